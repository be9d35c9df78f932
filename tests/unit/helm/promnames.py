"""Metric names used by the chart's PromQL (alert rules and Grafana dashboard), and metric names
present in a Prometheus text exposition. Shared by test_dashboard.py (names against fetchcostd's
sources) and tests/e2e/helm (names against a real fetchcostd's /metrics)."""
import json
import re

KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
            "group_left", "group_right", "inf", "nan", "start", "end", "atan2"}
# Series Prometheus makes itself rather than scraping them from fetchcostd.
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}


def metric_names(expr):
    """Metric names in a PromQL expression (Grafana variables allowed)."""
    e = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', expr)  # strings
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges, subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)  # Grafana variables ($__range, ${datasource})
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", e):
        word, call = m.group(1), m.group(2)
        if call or word in KEYWORDS:
            continue
        if re.fullmatch(r"[0-9.eE+-]+|0x[0-9a-fA-F]+", word):
            continue
        names.add(word)
    return names


def dashboard_expressions(dashboard):
    """(where, PromQL) for every panel target and query variable of a Grafana dashboard."""
    out = []

    def panels(ps):
        for p in ps:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(dashboard.get("panels", [])):
        for t in p.get("targets", []):
            if t.get("expr"):
                out.append((f"panel {p.get('title')!r}", t["expr"]))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        q = v.get("query")
        q = q.get("query", "") if isinstance(q, dict) else (q or "")
        m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", q)
        out.append((f"variable {v.get('name')}", m.group(1) if m else q))
    return out


def rule_expressions(spec):
    return [(f"rule {r.get('alert') or r.get('record')}", r["expr"])
            for g in spec["groups"] for r in g["rules"]]


def exposition_names(text):
    """Sample names and family names (# TYPE) of a Prometheus text exposition."""
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            names.add(line.split()[2])
        elif line and not line.startswith("#"):
            names.add(re.split(r"[{\s]", line, 1)[0])
    return names


def chart_expressions(render_fn, dashboard_text):
    """Every PromQL expression the chart ships: all alerts on, plus the dashboard."""
    from helmtest import one  # noqa: E402 (helmtest needs its arguments parsed first)
    docs = render_fn({"prometheusRule": {"enabled": True,
                                         "alerts": {"budgetExceeded": {"enabled": True}}}})
    exprs = rule_expressions(one(docs, "PrometheusRule")["spec"])
    exprs += dashboard_expressions(json.loads(dashboard_text))
    return exprs
