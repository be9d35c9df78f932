#!/usr/bin/python3
"""One tenant of the tiered-broker demo/tests with python3-kafka (Debian's; run with
/usr/bin/python3). Checks every message against the simulator's deterministic contents:
  key = "<topic>/<partition>/<offset>", value = key + "/" + ('a' + offset % 26) repeated.
Prints a JSON summary; exits 0 only when --count messages arrived and all were right.
"""
import argparse
import json
import signal
import sys
import time

from kafka import KafkaConsumer, TopicPartition

ap = argparse.ArgumentParser()
ap.add_argument("--bootstrap", required=True)
ap.add_argument("--topic", required=True)
ap.add_argument("--client-id", required=True)
ap.add_argument("--group")
ap.add_argument("--from", dest="start", default="earliest", choices=["earliest", "latest"])
ap.add_argument("--count", type=int, default=0)
ap.add_argument("--value-size", type=int)
ap.add_argument("--partition-max-bytes", type=int, default=1048576)
ap.add_argument("--timeout-s", type=float, default=60)
ap.add_argument("--tls", action="store_true")
ap.add_argument("--forever", action="store_true")
a = ap.parse_args()

stop = False


def on_signal(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)

topics = a.topic.split(",")
extra = {}
if a.tls:
    import ssl
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    extra = {"security_protocol": "SSL", "ssl_context": ctx}
consumer = KafkaConsumer(bootstrap_servers=a.bootstrap, client_id=a.client_id, group_id=a.group,
                         auto_offset_reset=a.start, enable_auto_commit=a.group is not None,
                         max_partition_fetch_bytes=a.partition_max_bytes,
                         session_timeout_ms=10000, heartbeat_interval_ms=1000,
                         consumer_timeout_ms=500, **extra)
if a.group:
    consumer.subscribe(topics)
else:
    parts = [TopicPartition(t, p) for t in topics for p in consumer.partitions_for_topic(t)]
    consumer.assign(parts)
    if a.start == "earliest":
        consumer.seek_to_beginning()
    else:
        consumer.seek_to_end()

state = {"messages": 0, "bad": 0, "gaps": 0, "redelivered": 0, "first_bad": None,
         "partitions": {}}
deadline = time.time() + a.timeout_s
while not stop and (a.forever or time.time() < deadline) and (a.forever or a.count == 0 or
                                                              state["messages"] < a.count):
    for m in consumer:
        k = f"{m.topic}/{m.partition}/{m.offset}"
        key = (m.key or b"").decode()
        value = (m.value or b"").decode()
        exp = k + "/"
        size = a.value_size if a.value_size else len(value)
        exp += chr(97 + m.offset % 26) * max(0, size - len(exp))
        p = state["partitions"].setdefault(f"{m.topic}/{m.partition}",
                                           {"first": m.offset, "last": None, "count": 0})
        # A skipped offset is a lost message; going back is at-least-once redelivery (allowed).
        if p["last"] is not None and m.offset > p["last"] + 1:
            state["gaps"] += 1
        if p["last"] is not None and m.offset <= p["last"]:
            state["redelivered"] += 1
        p["last"] = m.offset
        p["count"] += 1
        state["messages"] += 1
        if key != k or value != exp:
            state["bad"] += 1
            state["first_bad"] = state["first_bad"] or {"key": key, "offset": m.offset}
        if stop or (not a.forever and a.count and state["messages"] >= a.count):
            break
        if not a.forever and time.time() > deadline:
            break
consumer.close()
ok = state["bad"] == 0 and state["gaps"] == 0 and (a.forever or stop or state["messages"] >= a.count)
if not a.forever and not stop and state["messages"] < a.count:
    print(f"consume.py: timed out with {state['messages']}/{a.count} messages", file=sys.stderr)
print(json.dumps({"lib": "python3-kafka", "client_id": a.client_id, **state, "ok": ok}))
sys.exit(0 if ok else 1)
