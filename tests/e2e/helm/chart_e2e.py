#!/usr/bin/python3
"""End to end for the Helm chart: fetchcostd runs exactly as the chart's DaemonSet runs it (the
rendered container args and ConfigMap files, $(POD_IP) = 127.0.0.1) on tiered-broker with the real
clients, and

  - /healthz and /readyz (the chart's probes) answer 200 once the broker is watched;
  - every metric name used by the chart's alert rules and Grafana dashboard is in fetchcostd's
    real /metrics output;
  - a real Prometheus loads the rendered rules (all healthy) and evaluates every dashboard query
    without error; the per-client panels return data.

The world (s3rver, tiered-broker, tenants) is started like tests/e2e/attribution does, through
tools/scenario.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib.machinery import SourceFileLoader

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
sys.path.insert(0, os.path.join(REPO, "tests", "unit", "helm"))
import promnames  # noqa: E402

scenario = SourceFileLoader("scenario", os.path.join(REPO, "tools", "scenario")).load_module()

# Panels whose queries must return data once the clients have read remote data.
PANELS_WITH_DATA = ["Cost rate by client", "Remote read bytes by client", "Bytes per GET",
                    "Read amplification", "Remote read latency", "Object reads by attribution outcome",
                    "Top clients by cost"]
GRAFANA_VARS = {"$__rate_interval": "15s", "$__range": "10m", "$client_id": ".*", "$topic": ".*"}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


free_port = scenario.free_port


def wait_http(url, timeout, proc=None, log=None):
    try:
        return scenario.wait_http(url, timeout, proc, log)
    except RuntimeError as e:
        fail(str(e))


def render(renderer, chart, values):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(values, f)
    try:
        p = subprocess.run([renderer, "--chart", chart, "--name", "fetchcost", "--namespace", "kafka",
                            "-f", f.name, "--output", "json"], capture_output=True, text=True)
    finally:
        os.unlink(f.name)
    if p.returncode != 0:
        fail("chart does not render: " + p.stderr)
    return json.loads(p.stdout)


def kind(docs, k, suffix=""):
    found = [d["object"] for d in docs if d["object"]["kind"] == k
             and d["object"]["metadata"]["name"].endswith(suffix)]
    if len(found) != 1:
        fail(f"expected one {k}{suffix}, got {len(found)}")
    return found[0]


def start_fetchcostd(args, workdir, values):
    """Renders the chart and starts fetchcostd with the DaemonSet's args and ConfigMap files."""
    docs = render(args.renderer, args.chart, values)
    cm = kind(docs, "ConfigMap", "fetchcost")
    etc = os.path.join(workdir, "etc-fetchcost")
    shutil.rmtree(etc, ignore_errors=True)
    os.makedirs(etc)
    for name, text in cm["data"].items():
        with open(os.path.join(etc, name), "w") as f:
            f.write(text.replace("/etc/fetchcost/", etc + "/"))
    container = kind(docs, "DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    argv = [args.fetchcostd] + [a.replace("$(POD_IP)", "127.0.0.1").replace("/etc/fetchcost/", etc + "/")
                                for a in container["args"]]
    log = os.path.join(workdir, "fetchcostd.log")
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    return docs, proc, log


def check_broker_settings_found(base, info, fc_log):
    """With the chart's defaults, fetchcostd takes the broker's log dirs and listener port from
    its server.properties: the local tier holds the simulator's partitions."""
    port = int(info["broker"]["bootstrap"].rsplit(":", 1)[1])
    deadline = time.time() + 20
    while True:
        status = json.load(urllib.request.urlopen(base + "/api/v1/status", timeout=10))
        tier = status["local_tier"]
        if tier["partitions"] > 0 or time.time() > deadline:
            break
        time.sleep(0.5)
    dirs = [os.path.realpath(d) for d in tier["log_dirs"]]
    if dirs != [os.path.realpath(info["broker"]["log_dirs"])]:
        fail(f"local_tier.log_dirs {tier['log_dirs']}, the broker's are {info['broker']['log_dirs']} "
             f"(error: {tier.get('error')!r}); log: {open(fc_log).read()[-800:]}")
    if not tier["origin"].startswith(f"pid {info['broker']['pid']} "):
        fail(f"local_tier.origin {tier['origin']!r}: not the broker's settings")
    if tier["partitions"] == 0:
        fail(f"no partition of the broker's log dirs known after 20 s: {tier}")
    if port not in status["config"]["kafka_ports"]:
        fail(f"the broker's listener port {port} is not in config.kafka_ports {status['config']['kafka_ports']}")
    print(f"broker settings: log dirs {tier['log_dirs']} ({tier['partitions']} partitions) and "
          f"listener port {port} from {tier['origin']}")


def prom_api(base, path, **params):
    try:
        return scenario.prom_api(base, path, **params)
    except RuntimeError as e:
        fail(str(e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fetchcostd", required=True)
    ap.add_argument("--broker", required=True)
    ap.add_argument("--renderer", required=True)
    ap.add_argument("--chart", default=os.path.join(REPO, "helm", "fetchcost"))
    ap.add_argument("--seconds", type=float, default=12)
    ap.add_argument("--metrics-out", help="also write the scraped /metrics here")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            fail("this test loads BPF programs and needs root (CI=true: no skipping)")
        print("SKIP: needs root")
        sys.exit(77)
    if not os.access(args.renderer, os.X_OK):
        fail(f"helmrender not built: {args.renderer} (tools/bootstrap installs Go)")

    workdir = tempfile.mkdtemp(prefix="fc-e2e-helm-")
    world = scenario.World(workdir, broker_bin=args.broker, s3_transport="http")
    fc = prom = None
    try:
        world.start()
        info = world.info
        port = free_port()
        values = {
            "listen": {"port": port},
            # The chart's defaults for the broker's log dirs (broker.logDirs: []) and Kafka ports
            # ([9092], not the simulator's): fetchcostd must read both from the broker's settings.
            "config": {"targets": {"pids": [info["broker"]["pid"]]},
                       "object_store": {"ports": [info["s3"]["port"]]}},
            "stateDir": {"mountPath": os.path.join(workdir, "state")},
            "priceTable": {"preset": "aws-s3-standard-internet"},
            # a tiny budget for the scanner and one for a group: fetchcost_budget_* get samples
            "extraConfig": {"budgets": {"limits": [{"client_id": "scanner-kcat", "per_hour": 1e-9},
                                                   {"group_id": "analytics", "per_hour": 1000}],
                                        "window_seconds": 5}},  # merged into config
            "prometheusRule": {"enabled": True},
        }
        docs, fc, fc_log = start_fetchcostd(args, workdir, values)
        base = f"http://127.0.0.1:{port}"
        budgets = True
        time.sleep(0.5)
        if fc.poll() is not None and "budgets" in open(fc_log).read():
            # fetchcostd without budgets support: the budget alert stays off (its default when
            # no budgets are configured) and its metric names are reported, not required.
            print("note: this fetchcostd refuses the budgets section:", open(fc_log).read().strip()[-300:])
            budgets = False
            del values["extraConfig"]
            values["prometheusRule"]["alerts"] = {"budgetExceeded": {"enabled": True}}
            docs, fc, fc_log = start_fetchcostd(args, workdir, values)
        status, _ = wait_http(base + "/healthz", 30, fc, fc_log)
        if status != 200:
            fail(f"/healthz answered {status}")
        wait_http(base + "/readyz", 30, fc, fc_log)  # the readiness probe: 503 until the broker is watched
        print("probes: /healthz and /readyz answer 200")
        check_broker_settings_found(base, info, fc_log)

        rules = os.path.join(workdir, "rules.yml")
        with open(rules, "w") as f:
            json.dump(kind(docs, "PrometheusRule")["spec"], f)
        prom, prom_base = scenario.start_prometheus(workdir, f"127.0.0.1:{port}", rules)

        world.start_tenants()
        time.sleep(args.seconds)
        # one more scanner replay while Prometheus holds the series, so rate() sees growth
        scenario.kcat_consume(world.bootstrap, "scan", "scanner-kcat", "beginning", 1000)
        time.sleep(4)

        metrics = urllib.request.urlopen(base + "/metrics", timeout=10).read().decode()
        if args.metrics_out:
            with open(args.metrics_out, "w") as f:
                f.write(metrics)
        exposed = promnames.exposition_names(metrics)
        with open(os.path.join(args.chart, "dashboards", "fetchcost.json"), encoding="utf-8") as f:
            dashboard = json.load(f)
        exprs = promnames.rule_expressions(kind(docs, "PrometheusRule")["spec"])
        exprs += promnames.dashboard_expressions(dashboard)
        used = {}
        for where, expr in exprs:
            for n in promnames.metric_names(expr):
                used.setdefault(n, []).append(where)
        missing = {n: w for n, w in used.items() if n not in exposed and n not in promnames.SYNTHETIC}
        pending = []
        if not budgets:
            for n in [n for n in missing if n.startswith("fetchcost_budget_")]:
                print(f"note: {n} (used by {missing.pop(n)}) needs fetchcostd's budgets")
                pending.append(n)
        if missing:
            fail(f"metric names used by the chart but not in fetchcostd's /metrics: {missing}")
        present = sorted(n for n in used if n not in pending)
        print(f"metric names: {len(present)} of the {len(used)} names used by the rules and the dashboard "
              f"are in /metrics ({', '.join(present)})")

        # Prometheus: the rendered rules load and evaluate, the dashboard queries run.
        time.sleep(3)
        groups = prom_api(prom_base, "/api/v1/rules")["groups"]
        loaded = [r for g in groups for r in g["rules"]]
        if not loaded:
            fail("Prometheus loaded no rule from the rendered PrometheusRule")
        bad = [(r["name"], r.get("lastError")) for r in loaded if r.get("health") != "ok"]
        if bad:
            fail(f"rules not healthy: {bad}")
        print(f"prometheus: {len(loaded)} rules loaded and healthy")
        up = prom_api(prom_base, "/api/v1/query", query='up{job="fetchcost"}')["result"]
        if not up or up[0]["value"][1] != "1":
            fail(f"up{{job=\"fetchcost\"}}: {up}")
        empty = []
        for p in dashboard["panels"]:
            for t in p["targets"]:
                q = t["expr"]
                for k, v in GRAFANA_VARS.items():
                    q = q.replace(k, v)
                result = prom_api(prom_base, "/api/v1/query", query=q)["result"]
                if not result and any(p["title"].startswith(w) for w in PANELS_WITH_DATA):
                    empty.append((p["title"], q))
        if empty:
            fail(f"dashboard queries without data: {empty}")
        print("prometheus: every dashboard query evaluates; the per-client panels have data")
        print("PASS")
    finally:
        scenario.stop_process(fc)
        scenario.stop_group(prom)
        world.stop()
        scenario.remove_workdir(workdir, args.keep)


if __name__ == "__main__":
    main()
