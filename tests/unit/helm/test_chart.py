#!/usr/bin/python3
"""The chart renders for default and non-default values and the objects carry what a privileged
eBPF DaemonSet on broker nodes needs; the rendered config.json and price table load with
fetchcostd's own parsers (helm_config_check)."""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import helmtest
from helmtest import RenderError, objects, one, render

LEAST_CAPS = ["BPF", "PERFMON", "SYS_RESOURCE", "SYS_PTRACE", "DAC_READ_SEARCH", "SYS_NICE"]

NON_DEFAULT = {
    "fullnameOverride": "fc",
    "commonLabels": {"team": "streaming"},
    "image": {"registry": "registry.example", "repository": "platform/fetchcost", "tag": "1.2.3"},
    "privileged": False,
    "leastPrivilege": {"extraCapabilities": ["CHECKPOINT_RESTORE"],
                       "seccompProfile": {"type": "RuntimeDefault"}},
    "broker": {"logDirs": ["/data/kafka-0", "/data/kafka-1"]},
    "priceTable": {"custom": {"name": "negotiated", "currency": "EUR",
                              "get_usd_per_1000_requests": 0.00035, "egress_usd_per_gb": 0.01}},
    "listen": {"address": "0.0.0.0", "port": 9555},
    "stateDir": {"hostPath": "/srv/fetchcost"},
    "config": {"kafka_ports": [9092, 9093], "object_store": {"ports": [443, 9000]},
               "capture": {"ring_kib_per_cpu": 8192}},
    "nodeSelector": {"node-role.example/kafka": "true"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "kafka",
                     "effect": "NoSchedule"}],
    "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "{{ .Release.Name }}-broker"}},
         "topologyKey": "kubernetes.io/hostname"}]}},
    "priorityClassName": "system-node-critical",
    "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    "extraArgs": ["--capture-variant", "syscall-tracepoints"],
    "podAnnotations": {"example.com/owner": "platform"},
    "service": {"clusterIP": "None"},
    "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"},
                       "interval": "15s"},
    "podMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"},
                   "interval": "20s"},
    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
    "dashboard": {"enabled": False},
}


def container(ds):
    cs = ds["spec"]["template"]["spec"]["containers"]
    assert len(cs) == 1, cs
    return cs[0]


def mounts(ds):
    return {m["mountPath"]: m for m in container(ds)["volumeMounts"]}


def volumes(ds):
    return {v["name"]: v for v in ds["spec"]["template"]["spec"]["volumes"]}


def run_config_check(testcase, cm):
    """Writes the ConfigMap's files to a directory and runs fetchcostd's parsers on them."""
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in cm["data"].items():
            with open(os.path.join(tmp, name), "w") as f:
                f.write(text)
        p = subprocess.run([helmtest.ARGS.config_check, os.path.join(tmp, "config.json"), tmp],
                           capture_output=True, text=True)
    testcase.assertEqual(p.returncode, 0, f"fetchcostd refuses the rendered config: {p.stdout}{p.stderr}")
    return p.stdout


def config_map(docs, name):
    return next(o for o in objects(docs, "ConfigMap") if o["metadata"]["name"] == name)


class DefaultValues(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = render()
        cls.ds = one(cls.docs, "DaemonSet")

    def test_kinds(self):
        kinds = sorted(o["kind"] for o in objects(self.docs))
        self.assertEqual(kinds, ["ConfigMap", "ConfigMap", "DaemonSet", "Service", "ServiceAccount"])
        for o in objects(self.docs):
            self.assertEqual(o["metadata"]["namespace"], "kafka")
            self.assertEqual(o["metadata"]["labels"]["app.kubernetes.io/instance"], "fetchcost")

    def test_privileged_host_pid(self):
        spec = self.ds["spec"]["template"]["spec"]
        self.assertIs(spec["hostPID"], True)
        self.assertNotIn("hostNetwork", spec)
        sc = container(self.ds)["securityContext"]
        self.assertIs(sc["privileged"], True)
        self.assertEqual(sc["runAsUser"], 0)
        self.assertIs(sc["readOnlyRootFilesystem"], True)
        self.assertIs(spec["automountServiceAccountToken"], False)

    def test_mounts(self):
        m, v = mounts(self.ds), volumes(self.ds)
        for path in ("/sys/kernel/btf", "/sys/kernel/tracing", "/sys/kernel/debug"):
            self.assertIs(m[path].get("readOnly"), True, path)
            self.assertEqual(v[m[path]["name"]]["hostPath"]["path"], path)
        self.assertEqual(m["/sys/kernel/tracing"]["mountPropagation"], "HostToContainer")
        # No log dir mounted by default: fetchcostd reads the broker's own through /proc/PID/root,
        # and a hostPath of type Directory would keep the pod from starting where it is missing.
        self.assertFalse([name for name in v if name.startswith("logdir-")])
        state = m["/var/lib/fetchcost"]
        self.assertFalse(state.get("readOnly", False))
        self.assertEqual(v[state["name"]]["hostPath"],
                         {"path": "/var/lib/fetchcost", "type": "DirectoryOrCreate"})
        self.assertIn("emptyDir", v[m["/tmp"]["name"]])
        cfg = m["/etc/fetchcost"]
        self.assertIs(cfg["readOnly"], True)
        self.assertEqual(v[cfg["name"]]["configMap"]["name"], "fetchcost")

    def test_args_env_ports_probes(self):
        c = container(self.ds)
        self.assertEqual(c["image"], "fetchcost:0.1.0")
        self.assertEqual(c["args"], ["--config", "/etc/fetchcost/config.json", "--listen", "$(POD_IP):9464"])
        env = {e["name"]: e for e in c["env"]}
        self.assertEqual(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"], "status.podIP")
        self.assertEqual(c["ports"], [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}])
        self.assertEqual(c["livenessProbe"]["httpGet"], {"path": "/healthz", "port": "metrics"})
        self.assertEqual(c["readinessProbe"]["httpGet"], {"path": "/readyz", "port": "metrics"})
        self.assertNotIn("enabled", c["livenessProbe"])
        self.assertIn("memory", c["resources"]["limits"])

    def test_selector_and_service(self):
        sel = self.ds["spec"]["selector"]["matchLabels"]
        pod_labels = self.ds["spec"]["template"]["metadata"]["labels"]
        self.assertTrue(sel.items() <= pod_labels.items())
        svc = one(self.docs, "Service")
        self.assertEqual(svc["spec"]["selector"], sel)
        self.assertIs(svc["spec"]["publishNotReadyAddresses"], True)
        self.assertEqual(svc["spec"]["ports"][0]["name"], "metrics")
        self.assertEqual(svc["spec"]["ports"][0]["targetPort"], "metrics")

    def test_config_checksum(self):
        ann = self.ds["spec"]["template"]["metadata"]["annotations"]
        self.assertRegex(ann["checksum/config"], r"^[0-9a-f]{64}$")
        changed = one(render(sets=["config.kafka_ports={9093}"]), "DaemonSet")
        same = one(render(sets=["resources.limits.memory=1Gi"]), "DaemonSet")
        self.assertNotEqual(changed["spec"]["template"]["metadata"]["annotations"]["checksum/config"],
                            ann["checksum/config"])
        self.assertEqual(same["spec"]["template"]["metadata"]["annotations"]["checksum/config"],
                         ann["checksum/config"])

    def test_config_loads_in_fetchcostd(self):
        cm = config_map(self.docs, "fetchcost")
        self.assertEqual(sorted(cm["data"]), ["config.json"])
        cfg = json.loads(cm["data"]["config.json"])
        self.assertEqual(cfg["log_dirs"], [])
        self.assertEqual(cfg["state_dir"], "/var/lib/fetchcost")
        self.assertEqual(cfg["price_table"], "aws-s3-standard-same-region")
        self.assertEqual(cfg["targets"]["cmdline_match"], "kafka.Kafka")
        self.assertNotIn("listen", cfg)
        out = run_config_check(self, cm)
        self.assertIn("log_dirs=0", out)

    def test_monitors_off_by_default(self):
        for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
            self.assertEqual(objects(self.docs, kind), [], kind)

    def test_dashboard_configmap(self):
        cm = config_map(self.docs, "fetchcost-dashboard")
        self.assertEqual(cm["metadata"]["labels"]["grafana_dashboard"], "1")
        dash = json.loads(cm["data"]["fetchcost.json"])
        with open(os.path.join(helmtest.ARGS.chart, "dashboards", "fetchcost.json")) as f:
            self.assertEqual(dash, json.load(f))

    def test_yaml_output_is_helm_template_like(self):
        raw = render(raw=True)
        self.assertTrue(raw.startswith("---\n# Source: fetchcost/templates/"))
        self.assertNotIn("<no value>", raw)


class NonDefaultValues(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = render(NON_DEFAULT, name="prod")
        cls.ds = one(cls.docs, "DaemonSet")

    def test_names_labels_image(self):
        self.assertEqual(self.ds["metadata"]["name"], "fc")
        self.assertEqual(self.ds["metadata"]["labels"]["team"], "streaming")
        self.assertEqual(container(self.ds)["image"], "registry.example/platform/fetchcost:1.2.3")
        digest = one(render(sets=["image.digest=sha256:" + "ab" * 32]), "DaemonSet")
        self.assertEqual(container(digest)["image"], "fetchcost@sha256:" + "ab" * 32)

    def test_least_privilege(self):
        sc = container(self.ds)["securityContext"]
        self.assertIs(sc["privileged"], False)
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        self.assertEqual(sc["capabilities"]["add"], LEAST_CAPS + ["CHECKPOINT_RESTORE"])
        self.assertIs(sc["allowPrivilegeEscalation"], False)
        self.assertIs(sc["readOnlyRootFilesystem"], True)
        self.assertEqual(sc["runAsUser"], 0)
        self.assertEqual(sc["seccompProfile"], {"type": "RuntimeDefault"})
        self.assertIs(self.ds["spec"]["template"]["spec"]["hostPID"], True)
        # Kubernetes refuses allowPrivilegeEscalation=false with SYS_ADMIN.
        admin = one(render({"privileged": False,
                            "leastPrivilege": {"extraCapabilities": ["SYS_ADMIN"]}}), "DaemonSet")
        self.assertNotIn("allowPrivilegeEscalation", container(admin)["securityContext"])
        default_lp = container(one(render(sets=["privileged=false"]), "DaemonSet"))["securityContext"]
        self.assertEqual(default_lp["capabilities"]["add"], LEAST_CAPS)
        self.assertEqual(default_lp["seccompProfile"], {"type": "Unconfined"})

    def test_scheduling(self):
        spec = self.ds["spec"]["template"]["spec"]
        self.assertEqual(spec["nodeSelector"], {"node-role.example/kafka": "true"})
        self.assertEqual(spec["tolerations"][0]["value"], "kafka")
        term = spec["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]
        self.assertEqual(term["labelSelector"]["matchLabels"]["app"], "prod-broker")  # through tpl
        self.assertEqual(spec["priorityClassName"], "system-node-critical")
        self.assertEqual(container(self.ds)["resources"]["limits"]["memory"], "1Gi")
        self.assertEqual(self.ds["spec"]["template"]["metadata"]["annotations"]["example.com/owner"],
                         "platform")

    def test_log_dirs_state_listen(self):
        m, v = mounts(self.ds), volumes(self.ds)
        for d in ("/data/kafka-0", "/data/kafka-1"):
            self.assertIs(m[d]["readOnly"], True)
            self.assertEqual(v[m[d]["name"]]["hostPath"], {"path": d, "type": "Directory"})
        self.assertEqual(v[m["/var/lib/fetchcost"]["name"]]["hostPath"]["path"], "/srv/fetchcost")
        c = container(self.ds)
        self.assertEqual(c["args"], ["--config", "/etc/fetchcost/config.json", "--listen", "0.0.0.0:9555",
                                     "--capture-variant", "syscall-tracepoints"])
        self.assertEqual(c["ports"][0]["containerPort"], 9555)

    def test_custom_price_table_and_config(self):
        cm = config_map(self.docs, "fc")
        self.assertEqual(sorted(cm["data"]), ["config.json", "price-table.json"])
        cfg = json.loads(cm["data"]["config.json"])
        self.assertEqual(cfg["price_table"], "/etc/fetchcost/price-table.json")
        self.assertEqual(cfg["log_dirs"], ["/data/kafka-0", "/data/kafka-1"])
        self.assertEqual(cfg["kafka_ports"], [9092, 9093])
        self.assertEqual(cfg["capture"]["ring_kib_per_cpu"], 8192)
        self.assertEqual(cfg["capture"]["capture_bytes"], 4096)  # defaults kept beside overrides
        self.assertEqual(json.loads(cm["data"]["price-table.json"])["currency"], "EUR")
        out = run_config_check(self, cm)
        self.assertIn("currency=EUR", out)
        self.assertIn("log_dirs=2", out)

    def test_every_preset_loads(self):
        presets = sorted(f[:-5] for f in os.listdir(os.path.join(helmtest.ARGS.repo, "userspace", "cost", "presets"))
                         if f.endswith(".json"))
        self.assertGreater(len(presets), 3)
        for p in presets:
            docs = render(sets=[f"priceTable.preset={p}"])
            run_config_check(self, config_map(docs, "fetchcost"))

    def test_service_monitor(self):
        sm = one(self.docs, "ServiceMonitor")
        self.assertEqual(sm["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(sm["metadata"]["labels"]["release"], "kube-prometheus-stack")
        ep = sm["spec"]["endpoints"][0]
        self.assertEqual((ep["port"], ep["path"], ep["interval"]), ("metrics", "/metrics", "15s"))
        self.assertEqual(ep["relabelings"][0]["targetLabel"], "node")
        svc = one(self.docs, "Service")
        self.assertTrue(sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items())
        self.assertEqual(sm["spec"]["namespaceSelector"]["matchNames"], ["kafka"])
        self.assertEqual(svc["spec"]["clusterIP"], "None")

    def test_pod_monitor(self):
        pm = one(self.docs, "PodMonitor")
        ep = pm["spec"]["podMetricsEndpoints"][0]
        self.assertEqual((ep["port"], ep["interval"]), ("metrics", "20s"))
        pod_labels = self.ds["spec"]["template"]["metadata"]["labels"]
        self.assertTrue(pm["spec"]["selector"]["matchLabels"].items() <= pod_labels.items())
        self.assertEqual(pm["metadata"]["labels"]["release"], "kube-prometheus-stack")

    def test_prometheus_rule(self):
        rule = one(self.docs, "PrometheusRule")
        self.assertEqual(rule["metadata"]["labels"]["release"], "kube-prometheus-stack")
        names = [r["alert"] for r in rule["spec"]["groups"][0]["rules"]]
        self.assertEqual(names, ["FetchcostCostVelocityHigh", "FetchcostUnattributedShareHigh",
                                 "FetchcostRingBufferDrops", "FetchcostDrainBehind",
                                 "FetchcostProbesDetached",
                                 "FetchcostNoTargets", "FetchcostNoLocalTier", "FetchcostDown"])
        down = rule["spec"]["groups"][0]["rules"][-1]["expr"]
        self.assertIn('up{job=~"fc|kafka/fc"} == 0', down)

    def test_no_dashboard(self):
        self.assertEqual([o for o in objects(self.docs, "ConfigMap")
                          if "dashboard" in o["metadata"]["name"]], [])


class OtherSettings(unittest.TestCase):
    def test_budget_alert_auto(self):
        budgets = {"limits": [{"client_id": "scanner", "per_hour": 0.5}], "window_seconds": 300}
        docs = render({"prometheusRule": {"enabled": True}, "extraConfig": {"budgets": budgets}})
        names = [r["alert"] for r in one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]]
        self.assertIn("FetchcostBudgetExceeded", names)
        cfg = json.loads(config_map(docs, "fetchcost")["data"]["config.json"])
        self.assertEqual(cfg["budgets"], budgets)
        off = render({"prometheusRule": {"enabled": True, "alerts": {"budgetExceeded": {"enabled": False}}},
                      "extraConfig": {"budgets": budgets}})
        self.assertNotIn("FetchcostBudgetExceeded",
                         [r["alert"] for r in one(off, "PrometheusRule")["spec"]["groups"][0]["rules"]])
        in_config = render({"prometheusRule": {"enabled": True}, "config": {"budgets": budgets}})
        self.assertIn("FetchcostBudgetExceeded",
                      [r["alert"] for r in one(in_config, "PrometheusRule")["spec"]["groups"][0]["rules"]])
        self.assertEqual(json.loads(config_map(in_config, "fetchcost")["data"]["config.json"])["budgets"], budgets)
        run_config_check(self, config_map(in_config, "fetchcost"))
        forced = render({"prometheusRule": {"enabled": True, "alerts": {"budgetExceeded": {"enabled": True}}}})
        self.assertIn("FetchcostBudgetExceeded",
                      [r["alert"] for r in one(forced, "PrometheusRule")["spec"]["groups"][0]["rules"]])

    def test_alert_toggles_and_extras(self):
        docs = render({"prometheusRule": {
            "enabled": True, "jobSelector": 'job="kafka-fetchcost"', "additionalLabels": {"team": "data"},
            "alerts": {"ringDrops": {"enabled": False}, "costVelocity": {"perClientPerHour": 5}},
            "additionalRules": [{"record": "fetchcost:cost_per_hour:sum",
                                 "expr": "sum(rate(fetchcost_remote_fetch_cost_total[5m])) * 3600"}]}})
        rules = one(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]
        names = [r.get("alert", r.get("record")) for r in rules]
        self.assertNotIn("FetchcostRingBufferDrops", names)
        self.assertEqual(names[-1], "fetchcost:cost_per_hour:sum")
        self.assertIn("* 3600 > 5", rules[0]["expr"])
        self.assertEqual(rules[0]["labels"]["team"], "data")
        self.assertIn('up{job="kafka-fetchcost"} == 0', rules[names.index("FetchcostDown")]["expr"])

    def test_chart_owned_config_keys_are_refused(self):
        for key, hint in (("log_dirs", "broker.logDirs"), ("listen", "listen.address"),
                          ("state_dir", "stateDir"), ("price_table", "priceTable")):
            with self.assertRaises(RenderError) as e:
                render({"config": {key: "x"}})
            self.assertIn(hint, str(e.exception))

    def test_service_monitor_needs_service(self):
        with self.assertRaises(RenderError) as e:
            render({"serviceMonitor": {"enabled": True}, "service": {"enabled": False}})
        self.assertIn("service.enabled", str(e.exception))
        docs = render({"service": {"enabled": False}})
        self.assertEqual(objects(docs, "Service"), [])

    def test_mounts_and_probes_can_be_turned_off(self):
        docs = render({"hostMounts": {"debugfs": False}, "broker": {"logDirs": []},
                       "livenessProbe": {"enabled": False}, "hostNetwork": True,
                       "serviceAccount": {"create": False}})
        ds = one(docs, "DaemonSet")
        self.assertNotIn("/sys/kernel/debug", mounts(ds))
        self.assertFalse([p for p in mounts(ds) if p.startswith("/var/lib/kafka")])
        self.assertNotIn("livenessProbe", container(ds))
        self.assertIn("readinessProbe", container(ds))
        spec = ds["spec"]["template"]["spec"]
        self.assertIs(spec["hostNetwork"], True)
        self.assertEqual(spec["dnsPolicy"], "ClusterFirstWithHostNet")
        self.assertEqual(spec["serviceAccountName"], "default")
        self.assertEqual(objects(docs, "ServiceAccount"), [])
        cm = config_map(docs, "fetchcost")
        self.assertEqual(json.loads(cm["data"]["config.json"])["log_dirs"], [])
        run_config_check(self, cm)

    def test_extras(self):
        docs = render({"extraEnv": [{"name": "A", "value": "1"}],
                       "extraVolumes": [{"name": "x", "emptyDir": {}}],
                       "extraVolumeMounts": [{"name": "x", "mountPath": "/x"}],
                       "podLabels": {"a": "b"}, "imagePullSecrets": [{"name": "regcred"}],
                       "podSecurityContext": {"fsGroup": 0},
                       "securityContext": {"readOnlyRootFilesystem": False},
                       "serviceMonitor": {"enabled": True, "namespace": "monitoring",
                                          "metricRelabelings": [{"action": "drop", "regex": "fetchcost_sensor.*",
                                                                 "sourceLabels": ["__name__"]}]},
                       "prometheusRule": {"enabled": True, "namespace": "monitoring"}})
        ds = one(docs, "DaemonSet")
        spec = ds["spec"]["template"]["spec"]
        self.assertEqual([e["name"] for e in container(ds)["env"]], ["POD_IP", "NODE_NAME", "A"])
        self.assertIn("/x", mounts(ds))
        self.assertIn("x", volumes(ds))
        self.assertEqual(ds["spec"]["template"]["metadata"]["labels"]["a"], "b")
        self.assertEqual(spec["imagePullSecrets"], [{"name": "regcred"}])
        self.assertEqual(spec["securityContext"], {"fsGroup": 0})
        self.assertIs(container(ds)["securityContext"]["readOnlyRootFilesystem"], False)
        self.assertIs(container(ds)["securityContext"]["privileged"], True)
        sm = one(docs, "ServiceMonitor")
        self.assertEqual(sm["metadata"]["namespace"], "monitoring")
        self.assertEqual(sm["spec"]["namespaceSelector"]["matchNames"], ["kafka"])
        self.assertEqual(sm["spec"]["endpoints"][0]["metricRelabelings"][0]["action"], "drop")
        self.assertEqual(one(docs, "PrometheusRule")["metadata"]["namespace"], "monitoring")

    def test_release_name_containing_chart_name(self):
        ds = one(render(name="kafka-fetchcost"), "DaemonSet")
        self.assertEqual(ds["metadata"]["name"], "kafka-fetchcost")
        ds = one(render(name="prod"), "DaemonSet")
        self.assertEqual(ds["metadata"]["name"], "prod-fetchcost")


@unittest.skipUnless(shutil.which("helm"), "helm is not installed (not packaged in Debian)")
class RealHelm(unittest.TestCase):
    """Where Helm is installed: helm lint passes and `helm template` renders the same objects."""

    def helm_template(self, values):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "values.json")
            with open(path, "w") as f:
                json.dump(values, f)
            p = subprocess.run(["helm", "template", "fetchcost", helmtest.ARGS.chart, "--namespace", "kafka",
                                "-f", path], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
            lint = subprocess.run(["helm", "lint", helmtest.ARGS.chart, "-f", path], capture_output=True, text=True)
            self.assertEqual(lint.returncode, 0, lint.stdout + lint.stderr)
        p = subprocess.run([helmtest.ARGS.renderer, "--yaml-to-json"], input=p.stdout,
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return sorted((d["object"] for d in json.loads(p.stdout)),
                      key=lambda o: (o["kind"], o["metadata"]["name"]))

    def test_same_objects_as_helmrender(self):
        for values in ({}, NON_DEFAULT):
            ours = sorted(objects(render(values)), key=lambda o: (o["kind"], o["metadata"]["name"]))
            self.assertEqual(self.helm_template(values), ours)


class Notes(unittest.TestCase):
    def notes(self, *sets):
        cmd = [helmtest.ARGS.renderer, "--chart", helmtest.ARGS.chart, "--namespace", "kafka", "--notes"]
        for s in sets:
            cmd += ["--set", s]
        p = subprocess.run(cmd, capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        return p.stdout

    def test_notes_render(self):
        self.assertIn("DaemonSet fetchcost in kafka\n(privileged)", self.notes())
        lp = self.notes("privileged=false", "serviceMonitor.enabled=true")
        self.assertIn("least-privilege mode: BPF, PERFMON, SYS_RESOURCE, SYS_PTRACE, DAC_READ_SEARCH, SYS_NICE", lp)
        self.assertIn("ServiceMonitor created", lp)


class Readme(unittest.TestCase):
    def test_every_value_is_documented(self):
        p = subprocess.run([helmtest.ARGS.renderer, "--chart", helmtest.ARGS.chart, "--print-values"],
                           capture_output=True, text=True, check=True)
        values = json.loads(p.stdout)
        with open(os.path.join(helmtest.ARGS.chart, "README.md"), encoding="utf-8") as f:
            readme = f.read()
        documented = set(re.findall(r"^\| `([^`]+)` \|", readme, re.M))

        def leaves(node, prefix):
            if isinstance(node, dict) and node:
                for k, v in node.items():
                    yield from leaves(v, f"{prefix}.{k}" if prefix else k)
            else:
                yield prefix

        undocumented = []
        for path in leaves(values, ""):
            parts = path.split(".")
            if not any(".".join(parts[:i]) in documented for i in range(1, len(parts) + 1)):
                undocumented.append(path)
        self.assertEqual(undocumented, [], "values missing from helm/fetchcost/README.md")
        stale = [d for d in documented if not any(leaf == d or leaf.startswith(d + ".")
                                                  for leaf in leaves(values, ""))]
        self.assertEqual(stale, [], "README documents values the chart does not have")


if __name__ == "__main__":
    helmtest.main()
