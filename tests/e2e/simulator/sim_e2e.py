#!/usr/bin/python3
"""End-to-end tests of the tiered-broker simulator with real clients and a real S3 endpoint.

usage: sim_e2e.py --broker BIN clients --client kcat|python|kafkajs|platformatic --transport T
       sim_e2e.py --broker BIN scenario | storage-error | tls-listener | remote-fetch-modes

Ground truth here is independent of the simulator's own code: message contents are recomputed
from the documented rule, s3rver's request log counts GETs and bytes, and the raw Fetch requests
below are encoded by hand.
"""
import argparse
import importlib.machinery
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
scenario = importlib.machinery.SourceFileLoader(
    "scenario", os.path.join(REPO, "tools", "scenario")).load_module()

VALUE_SIZE = 700
PARTITIONS = 2
SEEDED = 1200  # messages per partition
TOPIC = f"scan:{PARTITIONS}:{SEEDED}:{VALUE_SIZE}"


class Failure(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)
    print(f"  ok: {msg}")


def expected_value(topic, partition, offset, size=VALUE_SIZE):
    v = f"{topic}/{partition}/{offset}/"
    return v + chr(97 + offset % 26) * max(0, size - len(v))


def verify_rows(rows, want, from_zero):
    """kcat rows: every message right, per-partition offsets consecutive."""
    check(len(rows) == want, f"kcat delivered {len(rows)} of {want} messages")
    last = {}
    bad = 0
    for t, p, o, k, v in rows:
        if k != f"{t}/{p}/{o}" or v != expected_value(t, p, o):
            bad += 1
        if p in last:
            check(o == last[p] + 1, f"partition {p} offsets consecutive") if o != last[p] + 1 else 0
        elif from_zero:
            check(o == 0, f"partition {p} starts at offset 0")
        last[p] = o
    check(bad == 0, "every message's key and value match the deterministic contents")
    return {p: o for p, o in last.items()}


def run_consumer(argv, timeout):
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
    if not lines:
        raise Failure(f"consumer printed no summary (exit {out.returncode}): "
                      f"{out.stderr.strip()[-800:]}")
    summary = json.loads(lines[-1])
    check(out.returncode == 0 and summary["ok"],
          f"{summary['client_id']}: {summary['messages']} messages, {summary['bad']} bad, "
          f"{summary['gaps']} gaps, {summary.get('redelivered', 0)} redelivered")
    return summary


def consume(world, client, client_id, start, count, bootstrap=None, tls=False):
    """Consumes with one of the four real clients; returns {partition: first offset}."""
    bs = bootstrap or world.bootstrap
    if client == "kcat":
        extra = ["-X", "security.protocol=SSL", "-X",
                 "enable.ssl.certificate.verification=false"] if tls else []
        rows = scenario.kcat_consume(bs, "scan", client_id, "beginning" if start == "earliest"
                                     else "end", count, extra=extra)
        verify_rows(rows, count, start == "earliest")
        first = {}
        for _, p, o, _, _ in rows:
            first.setdefault(p, o)
        return first
    common = ["--bootstrap", bs, "--topic", "scan", "--client-id", client_id, "--from", start,
              "--count", str(count), "--value-size", str(VALUE_SIZE), "--timeout-s", "60"]
    if tls:
        common.append("--tls")
    if client == "python":
        argv = [scenario.CONSUME_PY] + common
    else:
        argv = ["node", scenario.CONSUME_MJS, "--lib", client, "--group",
                f"group-{client_id}"] + common
    s = run_consumer(argv, 90)
    return {int(k.split("/")[1]): int(v["first"]) for k, v in s["partitions"].items()}


def ledger_for(world, client_id):
    return [e for e in world.admin("/ledger")["entries"] if e["client_id"] == client_id]


def reconcile(world):
    ok, rep = scenario.reconcile(world.workdir)
    check(rep["s3rver_console_by_status"] == rep["s3rver_exact_by_status"],
          f"s3rver's console log and the exact request log agree: "
          f"{rep['s3rver_console_by_status']}")
    check(ok, f"ledger {rep['ledger']} equals s3rver's request log {rep['s3rver']}")
    check(rep["s3rver"]["gets"] > 0, "the test caused remote GETs at all")
    return rep


# ---------------------------------------------------------------------------------------------


def test_clients(world_args, client, transport):
    world = scenario.World(tmpdir(), s3_transport=transport, topics=[TOPIC], chunk_size=32 * 1024,
                           segment_bytes=96 * 1024, produce_interval_ms=100, **world_args)
    with world:
        topics = world.admin("/topics")
        local_start = {p["partition"]: p["local_log_start_offset"] for p in topics[0]["partitions"]}
        check(all(v > 0 for v in local_start.values()),
              f"older segments exist only in the remote tier (local log start {local_start})")
        scan_id = f"{client}-{transport}-scan"
        first = consume(world, client, scan_id, "earliest", PARTITIONS * SEEDED)
        check(all(first.get(p) == 0 for p in range(PARTITIONS)),
              f"{client} read every partition from offset 0 (remote tier)")
        entries = ledger_for(world, scan_id)
        check(entries and entries[0]["gets"] > 0 and entries[0]["bytes"] > 0,
              f"ledger attributes remote GETs to {scan_id}: {entries and entries[0]['gets']} GETs")
        tail_id = f"{client}-{transport}-tail"
        hwm_before = {p["partition"]: p["high_watermark"]
                      for p in world.admin("/topics")[0]["partitions"]}
        first = consume(world, client, tail_id, "latest", 40)
        check(all(first[p] >= hwm_before[p] for p in first),
              f"{client} tailed from the latest offsets {first} (local tier)")
        check(not ledger_for(world, tail_id), f"{tail_id} caused no remote GETs")
        versions = world.admin("/stats")["requests_by_api_version"]
        print(f"  info: {client} used {sorted(versions)}")
    reconcile(world)


def test_fetch_versions(world_args):
    """Steers real clients to older Fetch versions so that v7 and v13-v16 are covered too.
    (@platformatic/kafka 1.35.0's Fetch v12 sends the topic id where v12 wants the topic name,
    so no real client here speaks a correct v12.)"""
    for client, version in [("kafkajs", 7), ("platformatic", 13), ("platformatic", 14),
                            ("platformatic", 15), ("platformatic", 16)]:
        world = scenario.World(tmpdir(), topics=[TOPIC], chunk_size=32 * 1024,
                               segment_bytes=96 * 1024, produce_interval_ms=0,
                               extra_broker_args=["--fetch-max-version", str(version)],
                               **world_args)
        with world:
            first = consume(world, client, f"{client}-v{version}", "earliest",
                            PARTITIONS * SEEDED)
            check(all(first.get(p) == 0 for p in range(PARTITIONS)),
                  f"{client} read from offset 0 with Fetch v{version}")
            versions = world.admin("/stats")["requests_by_api_version"]
            fetches = [k for k in versions if k.startswith("Fetch ")]
            check(fetches == [f"Fetch v{version}"], f"{client} used only {fetches}")
        reconcile(world)


def test_scenario(world_args):
    world = scenario.World(tmpdir(), topics=["scan:3:1500:1000"], chunk_size=128 * 1024,
                           segment_bytes=256 * 1024, produce_interval_ms=100,
                           group_initial_delay_ms=2000, **world_args)
    with world:
        world.start_tenants(topic="scan", value_size=1000)
        pid = world.broker.pid
        names = []
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        check(names.count("data-plane-kafk") >= 1 + 2 + 4,
              f"acceptor, network and handler threads are named data-plane-kafk "
              f"({names.count('data-plane-kafk')})")
        check(names.count("remote-log-read") == 4,
              f"the remote reader pool is named remote-log-read ({names.count('remote-log-read')})")
        # On-disk layout, as fetchcost's tier stage reads it.
        logs = world.info["broker"]["log_dirs"]
        for t in world.admin("/topics"):
            for p in t["partitions"]:
                d = os.path.join(logs, f"{t['name']}-{p['partition']}")
                with open(os.path.join(d, "partition.metadata")) as f:
                    meta = f.read()
                check(f"topic_id: {t['topic_id']}" in meta and len(t["topic_id"]) == 22,
                      f"{d}/partition.metadata carries the topic id")
                files = sorted(x for x in os.listdir(d) if x.endswith(".log"))
                check(all(len(x) == 24 for x in files) and
                      int(files[0][:20]) == p["local_log_start_offset"] > 0,
                      f"{d}: local segments {files} start at the local log start offset")
        time.sleep(20)
        procs = {name: proc for name, proc, _ in world.procs}
        check(all(procs[n].poll() is None for n in procs),
              "every tenant, the broker and s3rver are still running after 20 s")
        ledger = world.admin("/ledger")
        pids = [p.pid for _, p, _ in world.procs]
        with open(world.path("tiered-broker.log")) as f:
            generations = [l.strip() for l in f if "group analytics generation" in l]
        check(generations and ": 3 members" in generations[-1],
              f"the analytics group runs with 3 members: {generations[-1:]}")
    # Stopped: every tenant's summary says its messages were right, nobody is left behind.
    for name in ["tail-python", "tail-kafkajs", "small-fetch-platformatic", "analytics-1",
                 "analytics-2", "analytics-3"]:
        with open(world.path(f"{name}.log")) as f:
            lines = [l for l in f.read().splitlines() if l.startswith("{")]
        check(lines and json.loads(lines[-1])["ok"] and json.loads(lines[-1])["messages"] > 0,
              f"{name}: {lines and json.loads(lines[-1])['messages']} messages, all correct")
    alive = [p for p in pids if os.path.exists(f"/proc/{p}") and
             open(f"/proc/{p}/stat").read().split()[2] != "Z"]
    check(not alive, "no process outlives the scenario")
    by_client = {}
    for e in ledger["entries"]:
        by_client.setdefault(e["client_id"], []).append(e)
    for c in ["scanner-kcat", "small-fetch-platformatic"]:
        check(c in by_client and by_client[c][0]["gets"] > 0, f"{c} has remote GETs in the ledger")
    # Which members read remotely depends on who got which partition first; the group did.
    analytics = [e for i in (1, 2, 3) for e in by_client.get(f"analytics-{i}", [])]
    check(analytics and all(a["group_id"] == "analytics" for a in analytics) and
          sum(a["gets"] for a in analytics) > 0,
          f"the analytics group's remote GETs are attributed with group_id analytics "
          f"({len(analytics)} members with GETs)")
    check("tail-python" not in by_client and "tail-kafkajs" not in by_client,
          "tailing consumers cause no remote GETs")
    reconcile(world)


def test_groups(world_args):
    """Two-member consumer groups with each client's own group implementation."""
    parts, seeded = 4, 400
    world = scenario.World(tmpdir(), topics=[f"scan:{parts}:{seeded}:{VALUE_SIZE}"],
                           produce_interval_ms=0, chunk_size=32 * 1024, segment_bytes=64 * 1024,
                           group_initial_delay_ms=2000, **world_args)
    with world:
        for client in ["kcat", "python", "kafkajs", "platformatic"]:
            group = f"{client}-pair"
            members = []
            for i in (1, 2):
                cid = f"{client}-member-{i}"
                if client == "kcat":
                    argv = ["kcat", "-q", "-u", "-b", world.bootstrap, "-G", group, "-X",
                            f"client.id={cid}", "-X", "auto.offset.reset=earliest",
                            "-f", "%t %p %o %k %s\\n", "scan"]
                elif client == "python":
                    argv = [scenario.CONSUME_PY, "--bootstrap", world.bootstrap, "--topic", "scan",
                            "--client-id", cid, "--group", group, "--forever",
                            "--value-size", str(VALUE_SIZE)]
                else:
                    argv = ["node", scenario.CONSUME_MJS, "--lib", client, "--bootstrap",
                            world.bootstrap, "--topic", "scan", "--client-id", cid, "--group",
                            group, "--forever", "--value-size", str(VALUE_SIZE)]
                # Output to a file, not a pipe: kcat prints every message and would block.
                out = open(world.path(f"{cid}.out"), "w")
                members.append((subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL),
                                out))
            deadline = time.time() + 60
            state = {}
            while time.time() < deadline:
                time.sleep(0.5)
                state = world.admin("/groups").get(group, {})
                committed = state.get("committed_offsets", {})
                if (len(state.get("members", [])) == 2 and state.get("state") == "Stable" and
                        all(committed.get(f"scan/{p}") == seeded for p in range(parts))):
                    break
            check(len(state.get("members", [])) == 2 and state.get("state") == "Stable",
                  f"{client}: the group {group} is Stable with 2 members "
                  f"(generation {state.get('generation')}, protocol {state.get('protocol')})")
            check(all(state["committed_offsets"].get(f"scan/{p}") == seeded for p in range(parts)),
                  f"{client}: the group committed the end of every partition")
            seen, ok_members, per_member = {}, 0, []
            for m, out_file in members:
                m.terminate()
                m.wait(timeout=20)
                out_file.close()
                with open(out_file.name) as f:
                    out = f.read()
                if client == "kcat":
                    mine = set()
                    bad = 0
                    for line in out.splitlines():
                        t, p, o, k, v = line.split(" ", 4)
                        p, o = int(p), int(o)
                        bad += k != f"{t}/{p}/{o}" or v != expected_value(t, p, o)
                        seen.setdefault(p, set()).add(o)
                        mine.add(p)
                    ok_members += bad == 0
                    per_member.append(sorted(mine))
                else:
                    summary = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
                    ok_members += summary["ok"]
                    mine = set()
                    for key, v in summary["partitions"].items():
                        p = int(key.split("/")[1])
                        seen.setdefault(p, set()).update(range(int(v["first"]),
                                                               int(v["last"]) + 1))
                        mine.add(p)
                    per_member.append(sorted(mine))
            check(ok_members == 2, f"{client}: both members' messages are all correct")
            check(all(per_member) and not set(per_member[0]) & set(per_member[1]),
                  f"{client}: the partitions were split between the members {per_member}")
            check(all(seen.get(p) == set(range(seeded)) for p in range(parts)),
                  f"{client}: together the members delivered every offset of every partition")
        groups = world.admin("/ledger")["client_groups"]
        check(all(groups.get(f"{c}-member-{i}") == f"{c}-pair"
                  for c in ["kcat", "python", "kafkajs", "platformatic"] for i in (1, 2)),
              "the ledger knows every member's group")
    reconcile(world)


def test_storage_error(world_args):
    world = scenario.World(tmpdir(), topics=["scan:1:1500:1000"], produce_interval_ms=0,
                           **world_args)
    with world:
        key = world.admin("/topics")[0]["partitions"][0]["segments"][0]["object"] + ".log"
        req = urllib.request.Request(f"http://127.0.0.1:{world.info['s3']['port']}/tiered/{key}",
                                     method="DELETE")
        check(urllib.request.urlopen(req).status == 204, f"deleted {key} from s3rver")
        errors = [raw_fetch(world.bootstrap, [("scan", 0, 0)])[("scan", 0)][0]]
        check(errors == [56], f"a raw Fetch of the lost segment answers KAFKA_STORAGE_ERROR {errors}")
        p = subprocess.Popen(["kcat", "-C", "-b", world.bootstrap, "-t", "scan", "-o", "beginning",
                              "-c", "1", "-X", "client.id=victim", "-X", "debug=fetch"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        p.kill()
        _, err = p.communicate()
        check("Disk error" in err, "kcat (librdkafka) reports the broker's storage error")
        victim = ledger_for(world, "victim")
        check(victim and victim[0]["errors"] > 0, "the failed GETs are in victim's ledger entry")
    rep = reconcile(world)
    check(rep["s3rver"]["errors"] > 0, f"s3rver logged {rep['s3rver']['errors']} failed GETs")


def test_tls_listener(world_args):
    world = scenario.World(tmpdir(), topics=[TOPIC], tls_listener=True, produce_interval_ms=0,
                           chunk_size=32 * 1024, segment_bytes=96 * 1024, **world_args)
    with world:
        bs = world.info["broker"]["tls_bootstrap"]
        for client in ["kcat", "python", "kafkajs", "platformatic"]:
            first = consume(world, client, f"{client}-tls", "earliest", PARTITIONS * SEEDED,
                            bootstrap=bs, tls=True)
            check(all(first.get(p) == 0 for p in range(PARTITIONS)),
                  f"{client} consumed through the SSL listener from offset 0")
        tls_peers_survive_abrupt_closes(bs)
    reconcile(world)


def read_exactly(conn, n, what):
    """n bytes from conn; Failure naming `what` if the broker closes it first."""
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(min(n - len(buf), 65536))
        if not chunk:
            raise Failure(f"the broker closed {what}")
        buf += chunk
    return buf


def read_frame(conn, what):
    """One Kafka response frame (after its 4-byte size)."""
    (size,) = struct.unpack(">i", read_exactly(conn, 4, what))
    return read_exactly(conn, size, what)


def tls_peers_survive_abrupt_closes(bootstrap, healthy=4, abrupt=6):
    """Peers that drop their TLS connection without close_notify (a killed client, a reset pod)
    must not take healthy connections down with them. (OpenSSL leaves an error on the serving
    thread's queue; read without clearing it, the next WANT_READ looks like a failure: CI saw
    kafkajs get "Closed connection" this way.)"""
    host, port = bootstrap.rsplit(":", 1)
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE

    def api_versions(conn, corr):  # ApiVersions v0, hand-encoded; returns the correlation id
        req = struct.pack(">hhih", 18, 0, corr, 3) + b"raw"
        conn.sendall(struct.pack(">i", len(req)) + req)
        return struct.unpack_from(">i", read_frame(conn, "a healthy TLS connection"))[0]

    kept = []
    for i in range(healthy):  # more than the network threads: every thread serves one
        conn = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=10))
        check(api_versions(conn, i) == i, "ApiVersions answered on a fresh TLS connection")
        kept.append(conn)
    for _ in range(abrupt):  # handshake, half a frame, then close the TCP socket only
        conn = ctx.wrap_socket(socket.create_connection((host, int(port)), timeout=10))
        conn.sendall(b"\x00\x00")
        socket.socket.close(conn)  # SSLSocket.close would be the same; this says it: no TLS close
    time.sleep(0.5)
    failed = 0
    for i, conn in enumerate(kept):
        try:
            check(api_versions(conn, 100 + i) == 100 + i, "ApiVersions answered")
        except (Failure, OSError) as e:
            failed += 1
            print(f"  healthy connection {i}: {e}")
        conn.close()
    check(failed == 0, f"{failed} of {healthy} healthy TLS connections were closed after "
                       f"{abrupt} other peers went away without close_notify")
    print(f"  {healthy} TLS connections survived {abrupt} abrupt peer closes")


def test_remote_fetch_modes(world_args):
    parts = [("scan", 0, 0), ("scan", 1, 0), ("scan", 2, 0)]
    for flags, want_with_records in [([], 1), (["--kafka-4-2"], 3)]:
        world = scenario.World(tmpdir(), topics=["scan:3:1000:1000"], produce_interval_ms=0,
                               extra_broker_args=flags, **world_args)
        with world:
            before = world.admin("/stats")["remote_reads"]
            res = raw_fetch(world.bootstrap, parts)
            with_records = sum(1 for err, n in res.values() if err == 0 and n > 0)
            check(with_records == want_with_records,
                  f"{flags or 'default (Kafka <= 4.1)'}: {with_records} of 3 remote partitions "
                  f"carry records")
            check(world.admin("/stats")["remote_reads"] - before == want_with_records,
                  "remote reads started match")
        reconcile(world)
    world = scenario.World(tmpdir(), topics=[TOPIC], produce_interval_ms=0, chunk_size=32 * 1024,
                           segment_bytes=96 * 1024,
                           extra_broker_args=["--chunk-pool-threads", "2"], **world_args)
    with world:
        pid = world.broker.pid
        names = [open(f"/proc/{pid}/task/{t}/comm").read().strip()
                 for t in os.listdir(f"/proc/{pid}/task")]
        check(names.count("ForkJoinPool-1-") == 2,
              "--chunk-pool-threads: GETs run on ForkJoinPool-1-worker-N threads")
        consume(world, "kcat", "kcat-chunk-pool", "earliest", PARTITIONS * SEEDED)
    reconcile(world)
    world = scenario.World(tmpdir(), topics=["scan:1:1000:1000"], produce_interval_ms=0,
                           extra_broker_args=["--remote-fetch-max-wait-ms", "0"], **world_args)
    with world:
        empties = 0
        for _ in range(5):
            err, n = raw_fetch(world.bootstrap, [("scan", 0, 0)])[("scan", 0)]
            empties += err == 0 and n == 0
        time.sleep(0.5)
        stats = world.admin("/stats")
        check(empties > 0 and stats["remote_read_timeouts"] > 0,
              f"remote.fetch.max.wait=0: {empties}/5 responses went out without the remote data")
    reconcile(world)


# A hand-written Fetch v4 or v7 (independent of the simulator's encoder).
def raw_fetch(bootstrap, parts, max_wait_ms=500, version=4, session=(0, -1), forgotten=(),
              full=False):
    """Returns {(topic, p): (error, record bytes)}; with full=True (top error, session id, that)."""
    host, port = bootstrap.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    client = b"raw-fetch"
    body = struct.pack(">iiiib", -1, max_wait_ms, 1, 50 << 20, 0)
    if version >= 7:
        body += struct.pack(">ii", *session)
    topics = {}
    for t, p, o in parts:
        topics.setdefault(t, []).append((p, o))
    body += struct.pack(">i", len(topics))
    for t, ps in topics.items():
        body += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        for p, o in ps:
            body += struct.pack(">iq", p, o)
            if version >= 5:
                body += struct.pack(">q", -1)
            body += struct.pack(">i", 1 << 20)
    if version >= 7:
        gone = {}
        for t, p in forgotten:
            gone.setdefault(t, []).append(p)
        body += struct.pack(">i", len(gone))
        for t, ps in gone.items():
            body += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
            body += b"".join(struct.pack(">i", p) for p in ps)
    req = struct.pack(">hhih", 1, version, 7, len(client)) + client + body
    s.sendall(struct.pack(">i", len(req)) + req)
    data = read_frame(s, "the raw Fetch connection")
    s.close()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)
        pos += struct.calcsize(fmt)
        return v

    corr, throttle = take(">ii")
    top_error, session_id = take(">hi") if version >= 7 else (0, 0)
    (nt,) = take(">i")
    out = {}
    for _ in range(nt):
        (ln,) = take(">h")
        name = data[pos:pos + ln].decode()
        pos += ln
        (np_,) = take(">i")
        for _ in range(np_):
            p, err, hwm, lso = take(">ihqq")
            if version >= 5:
                take(">q")
            (naborted,) = take(">i")
            pos += max(naborted, 0) * 16
            (nrec,) = take(">i")
            pos += max(nrec, 0)
            out[(name, p)] = (err, max(nrec, 0))
    return (top_error, session_id, out) if full else out


def test_fetch_sessions(world_args):
    """Incremental fetch sessions (KIP-227), which none of the four clients uses."""
    world = scenario.World(tmpdir(), topics=["scan:2:1000:1000"], produce_interval_ms=0,
                           **world_args)
    with world:
        p = {x["partition"]: x for x in world.admin("/topics")[0]["partitions"]}
        local, end = p[0]["local_log_start_offset"], p[1]["high_watermark"]
        bs = world.bootstrap
        err, sid, out = raw_fetch(bs, [("scan", 0, local), ("scan", 1, end)], version=7,
                                  session=(0, 0), max_wait_ms=0, full=True)
        check(err == 0 and sid != 0 and set(out) == {("scan", 0), ("scan", 1)} and
              out[("scan", 0)][1] > 0, f"a full fetch with epoch 0 opens session {sid}")
        err, sid2, out = raw_fetch(bs, [], version=7, session=(sid, 1), max_wait_ms=0, full=True)
        check(err == 0 and sid2 == sid and set(out) == {("scan", 0)},
              f"an incremental fetch returns only the partition with news: {sorted(out)}")
        err, _, out = raw_fetch(bs, [], version=7, session=(sid, 1), max_wait_ms=0, full=True)
        check(err == 71, f"a stale epoch answers INVALID_FETCH_SESSION_EPOCH ({err})")
        err, _, out = raw_fetch(bs, [("scan", 1, 0)], version=7, session=(sid, 2), max_wait_ms=0,
                                forgotten=[("scan", 0)], full=True)
        check(err == 0 and set(out) == {("scan", 1)},
              f"forgotten partitions leave the session, changed ones come back: {sorted(out)}")
        err, _, out = raw_fetch(bs, [], version=7, session=(sid + 1000, 1), max_wait_ms=0,
                                full=True)
        check(err == 70, f"an unknown session answers FETCH_SESSION_ID_NOT_FOUND ({err})")
    reconcile(world)


_dirs = []


def tmpdir():
    d = tempfile.mkdtemp(prefix="sim-e2e-")
    _dirs.append(d)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--broker", required=True, help="tiered-broker binary")
    ap.add_argument("--keep", action="store_true", help="keep work directories")
    sub = ap.add_subparsers(dest="test", required=True)
    c = sub.add_parser("clients")
    c.add_argument("--client", required=True, choices=["kcat", "python", "kafkajs", "platformatic"])
    c.add_argument("--transport", required=True, choices=["http", "openssl", "gnutls"])
    for name in ["scenario", "storage-error", "tls-listener", "remote-fetch-modes",
                 "fetch-sessions", "fetch-versions", "groups"]:
        sub.add_parser(name)
    a = ap.parse_args()
    world_args = {"broker_bin": a.broker}
    ok = False
    try:
        if a.test == "clients":
            test_clients(world_args, a.client, a.transport)
        else:
            {"scenario": test_scenario, "storage-error": test_storage_error,
             "tls-listener": test_tls_listener,
             "remote-fetch-modes": test_remote_fetch_modes,
             "fetch-sessions": test_fetch_sessions,
             "fetch-versions": test_fetch_versions,
             "groups": test_groups}[a.test](world_args)
        ok = True
    except (Failure, RuntimeError, subprocess.TimeoutExpired) as e:
        print(f"FAIL: {e}", file=sys.stderr)
    finally:
        if ok and not a.keep:
            for d in _dirs:
                shutil.rmtree(d, ignore_errors=True)
        elif _dirs:
            print(f"work directories kept: {' '.join(_dirs)}", file=sys.stderr)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
