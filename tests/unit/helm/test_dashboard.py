#!/usr/bin/python3
"""The Grafana dashboard: what make_dashboard.py writes, importable anywhere (datasource variable,
no __inputs), with the panels the chart promises, and valid PromQL whose metric names fetchcostd
exports (against the sources here; tests/e2e/helm checks a real /metrics)."""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import helmtest
import promnames
from helmtest import one, render

REQUIRED_PANELS = ["Top clients by cost", "Cost rate by client", "Bytes per GET",
                   "Read amplification", "latency", "Unattributed share", "drops"]


class Dashboard(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        path = os.path.join(helmtest.ARGS.chart, "dashboards", "fetchcost.json")
        with open(path, encoding="utf-8") as f:
            cls.text = f.read()
        cls.dash = json.loads(cls.text)

    def test_generated_by_make_dashboard(self):
        p = subprocess.run([sys.executable, "-c",
                            "import sys; sys.path.insert(0, sys.argv[1]); import make_dashboard; "
                            "sys.stdout.write(make_dashboard.render())",
                            os.path.join(helmtest.ARGS.chart, "dashboards")],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, self.text, "run helm/fetchcost/dashboards/make_dashboard.py")

    def test_portable(self):
        self.assertNotIn("__inputs", self.dash)
        self.assertNotIn("${DS_", self.text)
        var = [v for v in self.dash["templating"]["list"] if v["name"] == "datasource"]
        self.assertEqual(len(var), 1)
        self.assertEqual((var[0]["type"], var[0]["query"]), ("datasource", "prometheus"))
        self.assertTrue(self.dash["uid"])
        for p in self.dash["panels"]:
            self.assertEqual(p["datasource"]["uid"], "${datasource}", p["title"])
            for t in p["targets"]:
                self.assertEqual(t["datasource"]["uid"], "${datasource}", p["title"])

    def test_panels(self):
        titles = [p["title"] for p in self.dash["panels"]]
        for want in REQUIRED_PANELS:
            self.assertTrue([t for t in titles if want.lower() in t.lower()], f"no panel on {want}")
        ids = [p["id"] for p in self.dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        # panels do not overlap on the 24-column grid
        cells = set()
        for p in self.dash["panels"]:
            g = p["gridPos"]
            self.assertLessEqual(g["x"] + g["w"], 24, p["title"])
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    self.assertNotIn((x, y), cells, p["title"])
                    cells.add((x, y))

    def test_configmap_carries_the_dashboard(self):
        cm = one(render(), "ConfigMap", "-dashboard")
        self.assertEqual(json.loads(cm["data"]["fetchcost.json"]), self.dash)
        cm = one(render({"dashboard": {"labels": {"grafana_dashboard": "1", "team": "data"},
                                       "annotations": {"grafana_folder": "Kafka"},
                                       "namespace": "monitoring"}}), "ConfigMap", "-dashboard")
        self.assertEqual(cm["metadata"]["namespace"], "monitoring")
        self.assertEqual(cm["metadata"]["annotations"]["grafana_folder"], "Kafka")
        self.assertEqual(cm["metadata"]["labels"]["team"], "data")

    def test_metric_names_are_exported_by_fetchcostd(self):
        sources = ""
        for f in glob.glob(os.path.join(helmtest.ARGS.repo, "userspace", "**", "*.cpp"), recursive=True):
            with open(f, encoding="utf-8", errors="replace") as fh:
                sources += fh.read()
        exported = set(re.findall(r'"((?:kafka_server|fetchcost)_[a-z0-9_]+)', sources))
        exported |= {n + s for n in set(exported) for s in ("_bucket", "_sum", "_count")}
        missing = {}
        for where, expr in promnames.chart_expressions(render, self.text):
            names = promnames.metric_names(expr)
            self.assertTrue(names, f"{where}: no metric in {expr!r}")
            for n in names - exported - promnames.SYNTHETIC:
                missing.setdefault(n, []).append(where)
        # fetchcost_budget_* arrives with fetchcostd's budgets (the alert is off unless budgets
        # are configured): tolerated here until those sources land; tests/e2e/helm checks the
        # real /metrics.
        pending = {n: w for n, w in missing.items() if n.startswith("fetchcost_budget_")}
        for n in pending:
            print(f"note: {n} not in fetchcostd's sources yet (used by {pending[n]})")
        self.assertEqual({n: w for n, w in missing.items() if n not in pending}, {})

    def test_promql_parses(self):
        """promtool check rules on the dashboard's queries as recording rules (Grafana's
        variables replaced by what Grafana would put there)."""
        if not helmtest.ARGS.promtool:
            self.skipTest("no promtool")
        subst = {"$__rate_interval": "2m", "$__range": "6h", "$client_id": ".*", "$topic": ".*"}
        rules = []
        for i, (where, expr) in enumerate(promnames.dashboard_expressions(self.dash)):
            for k, v in subst.items():
                expr = expr.replace(k, v)
            self.assertNotIn("$", expr, where)
            rules.append({"record": f"dashboard:query_{i}", "expr": expr})
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "dashboard-queries.yml")
            with open(path, "w") as f:
                json.dump({"groups": [{"name": "dashboard", "rules": rules}]}, f)
            p = subprocess.run([helmtest.ARGS.promtool, "check", "rules", path],
                               capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)

    def test_metric_name_extraction(self):
        self.assertEqual(promnames.metric_names(
            'histogram_quantile(0.99, sum by (le, client_id) (rate(kafka_server_remote_fetch_latency_seconds_bucket{client_id=~"$client_id"}[$__rate_interval])))'),
            {"kafka_server_remote_fetch_latency_seconds_bucket"})
        self.assertEqual(promnames.metric_names(
            'sum(rate(a_total{x="y"}[5m])) by (instance) / on (instance) group_left(node) b_info > 1e-3 and up{job=~"f|k/f"} == 0'),
            {"a_total", "b_info", "up"})


if __name__ == "__main__":
    helmtest.main()
