"""Shared helpers of the chart tests: command-line arguments, rendering through helmrender,
looking objects up. Each test script is a unittest module run by ctest (label unit)."""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = None


def parse_args():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--renderer", required=True)
    ap.add_argument("--chart", required=True)
    ap.add_argument("--config-check", required=True)
    ap.add_argument("--promtool", default="")
    ap.add_argument("--repo", required=True)
    ap.add_argument("--fetchcostd", default="")
    ARGS, rest = ap.parse_known_args()
    return [sys.argv[0]] + rest


def need_renderer():
    if not os.access(ARGS.renderer, os.X_OK):
        msg = (f"helmrender was not built ({ARGS.renderer}): install golang-go, "
               "golang-github-masterminds-sprig-dev and golang-gopkg-yaml.v2-dev (tools/bootstrap)")
        if os.environ.get("CI") == "true":
            print("FAIL:", msg)
            sys.exit(1)
        print("SKIP:", msg)
        sys.exit(77)


class RenderError(Exception):
    pass


def render(values=None, sets=(), name="fetchcost", namespace="kafka", raw=False):
    """Renders the chart; values is a dict written to a values file. Returns the list of
    {"source", "object"} documents (or the YAML text with raw=True)."""
    cmd = [ARGS.renderer, "--chart", ARGS.chart, "--name", name, "--namespace", namespace,
           "--output", "yaml" if raw else "json"]
    with tempfile.TemporaryDirectory() as tmp:
        if values is not None:
            path = os.path.join(tmp, "values.json")  # JSON is YAML
            with open(path, "w") as f:
                json.dump(values, f)
            cmd += ["-f", path]
        for s in sets:
            cmd += ["--set", s]
        p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RenderError(p.stderr.strip())
    return p.stdout if raw else json.loads(p.stdout)


def objects(docs, kind=None):
    return [d["object"] for d in docs if kind is None or d["object"]["kind"] == kind]


def one(docs, kind, name_suffix=None):
    found = [o for o in objects(docs, kind)
             if name_suffix is None or o["metadata"]["name"].endswith(name_suffix)]
    if len(found) != 1:
        raise AssertionError(f"expected one {kind}{' ' + name_suffix if name_suffix else ''}, "
                             f"got {len(found)}")
    return found[0]


def main():
    argv = parse_args()
    need_renderer()
    unittest.main(argv=argv, verbosity=2)
