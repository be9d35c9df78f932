#!/usr/bin/python3
"""Writes fetchcost.json, the Grafana dashboard the chart ships (run it after editing this file;
tests/unit/helm checks that the JSON is what this script makes).

The dashboard has a datasource variable and no __inputs, so it works both from the Grafana
sidecar (ConfigMap with the grafana_dashboard label) and from a manual import.
"""
import json
import os

DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'client_id=~"$client_id", topic=~"$topic"'


def target(expr, legend, ref="A", instant=False, fmt="time_series"):
    t = {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref,
         "range": not instant, "instant": instant, "format": fmt}
    return t


def timeseries(pid, title, desc, targets, grid, unit="short", stack=False, decimals=None):
    fc = {"defaults": {"unit": unit, "custom": {"fillOpacity": 10 if not stack else 60,
                                                "lineWidth": 1, "showPoints": "never",
                                                "stacking": {"mode": "normal" if stack else "none",
                                                             "group": "A"}}},
          "overrides": []}
    if decimals is not None:
        fc["defaults"]["decimals"] = decimals
    return {"id": pid, "type": "timeseries", "title": title, "description": desc,
            "datasource": DS, "gridPos": grid, "targets": targets, "fieldConfig": fc,
            "options": {"legend": {"displayMode": "table", "placement": "right",
                                   "calcs": ["mean", "max"]},
                        "tooltip": {"mode": "multi", "sort": "desc"}}}


def stat(pid, title, desc, expr, grid, unit="short", decimals=None, thresholds=None):
    fc = {"defaults": {"unit": unit,
                       "thresholds": {"mode": "absolute",
                                      "steps": thresholds or [{"color": "green", "value": None}]}},
          "overrides": []}
    if decimals is not None:
        fc["defaults"]["decimals"] = decimals
    return {"id": pid, "type": "stat", "title": title, "description": desc, "datasource": DS,
            "gridPos": grid, "targets": [target(expr, "", instant=True)], "fieldConfig": fc,
            "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                        "colorMode": "value", "graphMode": "none", "textMode": "auto"}}


def grid(x, y, w, h):
    return {"x": x, "y": y, "w": w, "h": h}


def dashboard():
    panels = []
    # Row 1: totals.
    panels.append(stat(1, "Cost rate (per hour)",
                       "Remote-read cost of all clients on the selected brokers, per hour, in the price table's currency.",
                       f"sum(rate(fetchcost_remote_fetch_cost_total{{{SEL}}}[$__rate_interval])) * 3600",
                       grid(0, 0, 4, 4), decimals=4))
    panels.append(stat(2, "Remote read bytes/s",
                       "Bytes the brokers read from remote storage for client fetches.",
                       f"sum(rate(kafka_server_remote_fetch_bytes_total{{{SEL}}}[$__rate_interval]))",
                       grid(4, 0, 4, 4), unit="Bps"))
    panels.append(stat(3, "Unattributed share",
                       "Share of object reads that could not be matched to a client fetch.",
                       'sum(rate(fetchcost_object_reads_total{outcome="unattributed"}[$__rate_interval])) / '
                       'sum(rate(fetchcost_object_reads_total[$__rate_interval]))',
                       grid(8, 0, 4, 4), unit="percentunit", decimals=1,
                       thresholds=[{"color": "green", "value": None},
                                   {"color": "orange", "value": 0.05},
                                   {"color": "red", "value": 0.2}]))
    panels.append(stat(4, "Ring-buffer drops/s",
                       "Capture events lost because a CPU's BPF ring buffer was full.",
                       "sum(rate(fetchcost_ring_drops_total[$__rate_interval]))",
                       grid(12, 0, 4, 4),
                       thresholds=[{"color": "green", "value": None},
                                   {"color": "red", "value": 0.001}]))
    panels.append(stat(5, "Brokers watched",
                       "Broker processes fetchcostd watches, summed over nodes.",
                       "sum(fetchcost_targets)", grid(16, 0, 4, 4),
                       thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}]))
    panels.append(stat(6, "Probes attached (min per node)",
                       "BPF programs and uprobes attached, on the node with the fewest.",
                       "min(fetchcost_probes_attached)", grid(20, 0, 4, 4),
                       thresholds=[{"color": "red", "value": None}, {"color": "green", "value": 1}]))

    # Row 2: who costs what.
    top = {"id": 7, "type": "bargauge", "title": "Top clients by cost (dashboard range)",
           "description": "Remote-read cost per client over the dashboard's time range (all brokers).",
           "datasource": DS, "gridPos": grid(0, 4, 8, 10),
           "targets": [target(f"topk(10, sum by (client_id, currency) (increase(fetchcost_remote_fetch_cost_total{{{SEL}}}[$__range])))",
                              "{{client_id}} ({{currency}})", instant=True)],
           "fieldConfig": {"defaults": {"unit": "none", "decimals": 4,
                                        "thresholds": {"mode": "absolute",
                                                       "steps": [{"color": "blue", "value": None}]}},
                           "overrides": []},
           "options": {"orientation": "horizontal", "displayMode": "gradient",
                       "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                       "showUnfilled": True}}
    panels.append(top)
    panels.append(timeseries(8, "Cost rate by client (per hour)",
                             "Money per hour each client's remote reads cost (GET requests and egress).",
                             [target(f"sum by (client_id, currency) (rate(fetchcost_remote_fetch_cost_total{{{SEL}}}[$__rate_interval])) * 3600",
                                     "{{client_id}} ({{currency}})"),
                              ],
                             grid(8, 4, 16, 10), stack=True, decimals=4))
    panels.append(timeseries(9, "Cost rate by component (per hour)",
                             "api = GET requests, egress = bytes transferred out of the object store.",
                             [target(f"sum by (component, currency) (rate(fetchcost_remote_fetch_cost_total{{{SEL}}}[$__rate_interval])) * 3600",
                                     "{{component}} ({{currency}})")],
                             grid(0, 14, 8, 8), stack=True, decimals=4))
    panels.append(timeseries(10, "Remote read bytes by client",
                             "Bytes read from remote storage for each client's fetches (all brokers).",
                             [target(f"sum by (client_id) (rate(kafka_server_remote_fetch_bytes_total{{{SEL}}}[$__rate_interval]))",
                                     "{{client_id}}")],
                             grid(8, 14, 16, 8), unit="Bps", stack=True))

    # Row 3: efficiency and latency.
    panels.append(timeseries(11, "Bytes per GET",
                             "Remote bytes per object-store GET, per client: small values mean many small range reads (high request cost per byte).",
                             [target(f"sum by (client_id) (rate(kafka_server_remote_fetch_bytes_total{{{SEL}}}[$__rate_interval])) / "
                                     f"sum by (client_id) (rate(kafka_server_remote_fetch_requests_total{{{SEL}}}[$__rate_interval]))",
                                     "{{client_id}}")],
                             grid(0, 22, 8, 8), unit="bytes"))
    panels.append(timeseries(12, "Read amplification",
                             "Object bytes read / bytes delivered to the client: chunked range GETs read more than the fetch needs. The dashed series is fetchcostd's lifetime ratio.",
                             [target(f"sum by (client_id) (rate(fetchcost_remote_fetch_object_bytes_total{{{SEL}}}[$__rate_interval])) / "
                                     f"sum by (client_id) (rate(fetchcost_remote_fetch_delivered_bytes_total{{{SEL}}}[$__rate_interval]))",
                                     "{{client_id}}"),
                              target(f"max by (client_id) (fetchcost_read_amplification{{{SEL}}})",
                                     "{{client_id}} (lifetime)", ref="B")],
                             grid(8, 22, 8, 8), decimals=2))
    panels.append(timeseries(13, "Remote read latency (p50, p99)",
                             "Time from a fetch's first GET start to its last GET end.",
                             [target(f"histogram_quantile(0.5, sum by (le, client_id) (rate(kafka_server_remote_fetch_latency_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                                     "p50 {{client_id}}"),
                              target(f"histogram_quantile(0.99, sum by (le, client_id) (rate(kafka_server_remote_fetch_latency_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                                     "p99 {{client_id}}", ref="B")],
                             grid(16, 22, 8, 8), unit="s"))

    # Row 4: quality of the data.
    panels.append(timeseries(14, "Unattributed share",
                             "Object reads and remote bytes kept under client_id=\"__unattributed__\" (no client fetch matched). Totals still reconcile with the object store.",
                             [target('sum by (instance) (rate(fetchcost_object_reads_total{outcome="unattributed"}[$__rate_interval])) / '
                                     'sum by (instance) (rate(fetchcost_object_reads_total[$__rate_interval]))',
                                     "reads {{instance}}"),
                              target('sum(rate(kafka_server_remote_fetch_bytes_total{client_id="__unattributed__"}[$__rate_interval])) / '
                                     'sum(rate(kafka_server_remote_fetch_bytes_total[$__rate_interval]))',
                                     "bytes (all brokers)", ref="B")],
                             grid(0, 30, 8, 8), unit="percentunit"))
    panels.append(timeseries(15, "Object reads by attribution outcome",
                             "exact: the object key and range named the fetch; estimated: matched by time on an opaque (TLS) connection; unattributed: no match.",
                             [target("sum by (outcome) (rate(fetchcost_object_reads_total[$__rate_interval]))",
                                     "{{outcome}}")],
                             grid(8, 30, 8, 8), unit="reqps", stack=True))
    panels.append(timeseries(16, "Ring-buffer drops by node",
                             "Capture events lost per second; raise capture.ring_kib_per_cpu when this is not zero.",
                             [target("sum by (instance) (rate(fetchcost_ring_drops_total[$__rate_interval]))",
                                     "{{instance}}"),
                              target("sum by (instance) (rate(fetchcost_events_total[$__rate_interval]))",
                                     "events {{instance}}", ref="B")],
                             grid(16, 30, 8, 8)))

    groups = {"id": 17, "type": "table", "title": "Consumer groups of the clients",
              "description": "client_id → group_id, learned from JoinGroup/SyncGroup/OffsetCommit.",
              "datasource": DS, "gridPos": grid(0, 38, 24, 8),
              "targets": [target('max by (client_id, group_id) (fetchcost_client_group_info{client_id=~"$client_id"})',
                                 "", instant=True, fmt="table")],
              "fieldConfig": {"defaults": {}, "overrides": []},
              "transformations": [{"id": "organize", "options": {"excludeByName": {"Time": True, "Value": True}}}],
              "options": {"showHeader": True}}
    panels.append(groups)

    def label_var(name, label, metric):
        q = f"label_values({metric}, {name})"
        return {"name": name, "label": label, "type": "query", "datasource": DS,
                "definition": q, "query": {"query": q, "refId": "StandardVariableQuery"},
                "includeAll": True, "multi": True, "allValue": ".*", "refresh": 2, "sort": 1,
                "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
                "hide": 0, "options": [], "regex": ""}

    return {
        "title": "fetchcost — Kafka tiered-storage reads by client",
        "uid": "fetchcost-remote-fetch",
        "description": "Which Kafka clients make the brokers read tiered storage, and what it costs.",
        "tags": ["kafka", "tiered-storage", "fetchcost"],
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "1m",
        "time": {"from": "now-6h", "to": "now"},
        "timepicker": {},
        "timezone": "",
        "annotations": {"list": []},
        "links": [],
        "panels": panels,
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource",
             "query": "prometheus", "current": {}, "hide": 0, "includeAll": False,
             "multi": False, "options": [], "refresh": 1, "regex": ""},
            label_var("client_id", "Client", "kafka_server_remote_fetch_bytes_total"),
            label_var("topic", "Topic", "kafka_server_remote_fetch_bytes_total"),
        ]},
    }


def render():
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fetchcost.json")
    with open(out, "w", encoding="utf-8") as f:
        f.write(render())
    print("wrote", out)
