#!/usr/bin/python3
"""The chart's PrometheusRule: `promtool check rules` on its groups (default and non-default
values) and `promtool test rules alerts_test.yml` with a test for every alert."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import helmtest
from helmtest import one, render

ALL_ON = {"prometheusRule": {"enabled": True, "alerts": {"budgetExceeded": {"enabled": True}}}}


def rule_groups(values):
    return one(render(values), "PrometheusRule")["spec"]


def promtool(*args, cwd=None):
    return subprocess.run([helmtest.ARGS.promtool, *args], capture_output=True, text=True, cwd=cwd)


class AlertRules(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not helmtest.ARGS.promtool or not os.access(helmtest.ARGS.promtool, os.X_OK):
            msg = "promtool not found: install Debian's prometheus package (tools/bootstrap)"
            if os.environ.get("CI") == "true":
                raise AssertionError(msg)
            print("SKIP:", msg)
            sys.exit(77)
        cls.tmp = tempfile.mkdtemp(prefix="fc-helm-rules-")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check(self, spec, name):
        path = os.path.join(self.tmp, name)
        with open(path, "w") as f:
            json.dump(spec, f, indent=1)  # JSON is YAML
        p = promtool("check", "rules", path)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return path

    def test_check_rules_default_and_non_default(self):
        self.check(rule_groups(ALL_ON), "all-on.yml")
        self.check(rule_groups({"prometheusRule": {
            "enabled": True, "jobSelector": 'job="kafka-fetchcost"', "runbookBaseUrl": "https://runbooks.example/fetchcost",
            "additionalLabels": {"team": "data"},
            "alerts": {"costVelocity": {"perClientPerHour": 0.25, "window": "1h", "for": "30m"},
                       "unattributedShare": {"threshold": 0.05, "minReadsPerSecond": 1},
                       "ringDrops": {"threshold": 10}, "drainBehind": {"threshold": 0.8}},
            "additionalRules": [{"record": "fetchcost:cost_per_hour:sum",
                                 "expr": "sum by (client_id) (rate(fetchcost_remote_fetch_cost_total[5m])) * 3600"}]}}),
            "non-default.yml")

    def test_unit_tests_cover_every_alert(self):
        spec = rule_groups(ALL_ON)
        alerts = {r["alert"] for g in spec["groups"] for r in g["rules"] if "alert" in r}
        self.assertEqual(len(alerts), 9)
        with open(os.path.join(helmtest.HERE, "alerts_test.yml")) as f:
            tested = set(re.findall(r"alertname:\s*(\w+)", f.read()))
        self.assertEqual(alerts - tested, set(), "alerts without a promtool test")
        self.assertEqual(tested - alerts, set(), "tests of alerts the chart does not have")

    def test_promtool_test_rules(self):
        self.check(rule_groups(ALL_ON), "rules.yml")
        shutil.copy(os.path.join(helmtest.HERE, "alerts_test.yml"), self.tmp)
        p = promtool("test", "rules", "alerts_test.yml", cwd=self.tmp)
        print(p.stdout.strip())
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)


if __name__ == "__main__":
    helmtest.main()
