#!/usr/bin/python3
"""docs/kubernetes.md: its PromQL examples and recording rules are valid (promtool), use only
metrics fetchcostd or kube-state-metrics export, and its values examples render."""
import json
import os
import re
import subprocess
import tempfile
import unittest

import helmtest
import promnames
from helmtest import render

KUBE_STATE_METRICS = {"kube_pod_info", "kube_pod_status_phase", "kube_pod_owner"}


def blocks(text, lang):
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


class KubernetesDoc(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(os.path.join(helmtest.ARGS.repo, "docs", "kubernetes.md"), encoding="utf-8") as f:
            cls.text = f.read()

    def promtool_check(self, groups):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "rules.yml")
            with open(path, "w") as f:
                f.write(groups)
            p = subprocess.run([helmtest.ARGS.promtool, "check", "rules", path],
                               capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_promql_examples(self):
        if not helmtest.ARGS.promtool:
            self.skipTest("no promtool")
        rule_blocks = [b for b in blocks(self.text, "yaml") if b.startswith("groups:")]
        self.assertTrue(rule_blocks)
        recorded = set()
        for b in rule_blocks:
            self.promtool_check(b)
            recorded |= set(re.findall(r"record:\s*(\S+)", b))
        queries = blocks(self.text, "promql")
        self.assertGreaterEqual(len(queries), 6)
        rules = []
        for i, q in enumerate(queries):
            expr = "\n".join(line for line in q.splitlines() if not line.lstrip().startswith("#"))
            rules.append({"record": f"doc:query_{i}", "expr": expr})
        self.promtool_check(json.dumps({"groups": [{"name": "doc", "rules": rules}]}))

        with open(os.path.join(helmtest.ARGS.repo, "userspace", "export", "metrics.cpp")) as f:
            exported = set(re.findall(r'"((?:kafka_server|fetchcost)_[a-z0-9_]+)"', f.read()))
        known = exported | KUBE_STATE_METRICS | recorded
        exprs = [r["expr"] for r in rules] + [e for b in rule_blocks
                                              for e in re.findall(r"expr: \|\n((?:\s{10,}.*\n)+)", b)]
        for expr in exprs:
            unknown = promnames.metric_names(expr) - known
            self.assertEqual(unknown, set(), expr)

    def test_values_examples_render(self):
        """The values blocks of the doc render (each as a values file of its own)."""
        n = 0
        for b in blocks(self.text, "yaml"):
            if b.startswith("groups:") or b.startswith("scrape_configs:"):
                continue
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                f.write(b)
            try:
                p = subprocess.run([helmtest.ARGS.renderer, "--chart", helmtest.ARGS.chart,
                                    "-f", f.name, "--output", "json"], capture_output=True, text=True)
            finally:
                os.unlink(f.name)
            self.assertEqual(p.returncode, 0, f"{b}\n{p.stderr}")
            n += 1
        self.assertGreaterEqual(n, 4)
        docs = render({"privileged": False, "leastPrivilege": {"extraCapabilities": ["CHECKPOINT_RESTORE"]}})
        self.assertTrue(docs)


if __name__ == "__main__":
    helmtest.main()
