#!/usr/bin/python3
"""Faults, on one world (root, real kernel, tiered-broker + s3rver + kcat + fetchcostd):

  config      a bad price file: exit 2 naming the field; SIGHUP with a bad config or price file
              keeps the running config (status unchanged, fetchcost_config_errors_total counts)
  caps        once attached, CapEff holds only what re-attaching needs
  phase-a     baseline: per-client bytes/GETs/errors equal the simulator's ledger
  sigkill     fetchcostd SIGKILLed after a ledger save and restarted: the ledger file is intact,
              the report holds phase-a exactly once, counting resumes (phase-b exact)
  stall       s3rver stopped (SIGSTOP) 3 s under a scan: the GETs finish late, counted exactly
  errors      a remote segment deleted from s3rver: 404s counted as requests+errors, no bytes
  conns       one client opens 10,000 connections at once: fetchcostd keeps up, counts exactly
  fd-reuse    1,000 connect/fetch/close cycles (fds and sockets reused), each its own client-id
  log-dirs    the broker's log dirs vanish: no crash, remote reads still counted exactly
  restart     the broker restarts (new PID): fetchcostd follows it, counting resumes exactly; its
              server.properties, moved away when the new pid is found, is read once it is back
  ring        a second fetchcostd with a 4 KiB ring under 4,000 fetches/s: drops exported, attribution
              marked incomplete (metric and /api/v1/status), no crash

  faults_e2e.py --fetchcostd BIN --broker BIN --load BIN [--keep]
"""
import argparse
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

from common import (Fetchcostd, check, fetch_once, finish, free_port, get_json, metadata_v1,
                    read_frame, remote_offset, require_root, scenario, settle, wait_until,
                    metric_values, ledger_by_client)

# What fetchcostd keeps after attaching (userspace/daemon/privileges.h).
# (The broker restart below attaches TLS uprobes to the new pid after the drop, and
# e2e_daemon_control turns attribution off and on after it.)
CAPS_KEPT = {"cap_bpf": 39, "cap_perfmon": 38, "cap_sys_admin": 21, "cap_sys_resource": 24,
             "cap_sys_ptrace": 19, "cap_dac_read_search": 2,
             "cap_sys_nice": 23}  # capture.realtime_reader, capture.drain_yields (both on by default)


def cap_eff(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return None


def file_report(path):
    """{client_id: (bytes, requests, errors)} from ledger.json as saved on disk."""
    out = {}
    with open(path) as f:
        doc = json.load(f)
    for r in doc["buckets"]:
        b, q, e = out.get(r["client_id"], (0, 0, 0))
        out[r["client_id"]] = (b + r["bytes"], q + r["requests"], e + r["errors"])
    return out


def kcat(world, client, count, start="beginning", extra=()):
    return scenario.kcat_consume(world.bootstrap, "scan", client, start, count, timeout=90,
                                 extra=extra)


def exact(fc, world, clients, what):
    truth, seen = settle(fc, world, clients)
    check(sum(v[1] for v in truth.values()) > 0, f"{what}: the ledger has GETs ({truth})")
    ok = check(truth == seen, f"{what}: fetchcost {seen} == ledger {truth}")
    if not ok:  # keep both sides' per-GET detail for the post-mortem (the workdir is kept)
        name = re.sub(r"[^a-z0-9]+", "-", what.lower())[:40]
        with open(os.path.join(world.path(f"ledger-gets-{name}.json")), "w") as f:
            json.dump(world.admin("/ledger?gets=1"), f)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fetchcostd", required=True)
    ap.add_argument("--broker", required=True)
    ap.add_argument("--load", required=True, help="tiered-broker-load")
    ap.add_argument("--connections", type=int, default=10000)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    require_root()
    # 10,000 connections: both ends (this process and the broker it spawns) need the fds.
    # (raise the soft limit up to the hard one; a container may not allow more than that)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.connections + 2000
    if hard != resource.RLIM_INFINITY and hard < want:
        check(False, f"RLIMIT_NOFILE hard limit {hard} < {want}: cannot open "
                     f"{args.connections} connections (raise it: ulimit -Hn)")
        want = hard
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))

    workdir = tempfile.mkdtemp(prefix="fc-faults-")
    kafka_port = free_port()
    world = scenario.World(workdir, broker_bin=args.broker, topics=["scan:2:1500:1000"],
                           kafka_port=kafka_port,
                           extra_broker_args=["--remote-fetch-max-wait-ms", "10000"])
    fc = ring = None
    try:
        world.start()
        info = world.info
        base_cfg = {
            # Its ready file names this broker only: a restarted broker (new pid) matches again.
            "targets": {"cmdline_match": world.path("broker.ready")},
            # No kafka_ports, no log_dirs: the broker's own (its server.properties), as with the
            # defaults on a real host, followed across its restart below.
            "object_store": {"ports": [info["s3"]["port"]]},
            "audit_log": {"path": os.path.join(workdir, "audit.jsonl")},
        }

        # ---- config: bad price file at start, bad config / price file on SIGHUP ----
        bad_prices = os.path.join(workdir, "bad-prices.json")
        with open(bad_prices, "w") as f:
            f.write('{"currency": "USD", "get_usd_per_1000_requests": "cheap"}')
        bad = Fetchcostd(args.fetchcostd, workdir, "bad", dict(base_cfg, price_table=bad_prices))
        r = subprocess.run([args.fetchcostd, "--config", bad.config_path], capture_output=True,
                           text=True, timeout=30)
        check(r.returncode == 2 and "get_usd_per_1000_requests" in r.stderr,
              f"bad price file refused at start, field named: {r.stderr.strip()[:160]}")

        fc = Fetchcostd(args.fetchcostd, workdir, "fetchcostd", base_cfg).start()
        check(wait_until(lambda: fc.status()["targets"], 20), "broker watched")
        before = fc.status()["config"]
        fc.write_config(sensors={"max_sensors": -3})
        fc.proc.send_signal(signal.SIGHUP)
        check(wait_until(lambda: metric_values(fc.metrics(), "fetchcost_config_errors_total")
                         .get("") == 1), "SIGHUP with a bad config: counted")
        fc.write_config(price_table=bad_prices)
        fc.proc.send_signal(signal.SIGHUP)
        check(wait_until(lambda: metric_values(fc.metrics(), "fetchcost_config_errors_total")
                         .get("") == 2), "SIGHUP with a bad price file: counted")
        with open(fc.config_path, "w") as f:  # a number no double holds: it aborted fetchcostd
            f.write('{"capture": {"capture_bytes": 1e999}}')
        fc.proc.send_signal(signal.SIGHUP)
        check(wait_until(lambda: metric_values(fc.metrics(), "fetchcost_config_errors_total")
                         .get("") == 3) and fc.alive(),
              "SIGHUP with a number no double holds (1e999): counted, fetchcostd alive")
        check(fc.alive() and fc.status()["config"] == before, "running config left untouched")
        log = fc.log_tail()
        check("sensors.max_sensors" in log and "get_usd_per_1000_requests" in log and
              "number overflow parsing '1e999'" in log, "reload errors name the field in the log")
        fc.write_config()

        # ---- capabilities once attached ----
        eff = cap_eff(fc.proc.pid)
        want = sum(1 << b for b in CAPS_KEPT.values())
        check(eff is not None and eff & ~want == 0 and eff & (1 << 39) and eff & (1 << 38),
              f"CapEff {eff:#x} is within {{{', '.join(CAPS_KEPT)}}} ({want:#x})")

        # ---- phase a: baseline ----
        kcat(world, "phase-a", 1500)
        exact(fc, world, ["phase-a"], "phase-a baseline")

        # ---- SIGKILL after a save; restart on the same state dir ----
        ledger_file = os.path.join(fc.config["state_dir"], "ledger.json")
        want_a = ledger_by_client(world.admin("/ledger"))["phase-a"]
        check(wait_until(lambda: file_report(ledger_file).get("phase-a") == want_a, 25, 0.5),
              "ledger file saved with phase-a (saves every 10 s)")
        fc.stop(signal.SIGKILL)
        check(fc.proc.returncode == -9, "fetchcostd SIGKILLed")
        try:
            check(file_report(ledger_file).get("phase-a") == want_a,
                  "ledger file intact after SIGKILL")
        except ValueError as e:
            check(False, f"ledger file intact after SIGKILL ({e})")
        fc.start()
        check(wait_until(lambda: fc.status()["targets"], 20), "restarted fetchcostd watches the broker")
        check(fc.report().get("phase-a") == want_a,
              f"report after restart holds phase-a once: {fc.report().get('phase-a')} == {want_a}")
        kcat(world, "phase-b", 1500)
        exact(fc, world, ["phase-b"], "phase-b after SIGKILL+restart")

        # ---- s3rver stalls ----
        s3 = world.s3
        stall = subprocess.Popen(["kcat", "-C", "-q", "-b", world.bootstrap, "-t", "scan", "-o",
                                  "beginning", "-c", "1000", "-X", "client.id=phase-stall"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        os.kill(s3.pid, signal.SIGSTOP)
        time.sleep(3)
        os.kill(s3.pid, signal.SIGCONT)
        check(stall.wait(timeout=90) == 0, "the scan completes after the stall")
        exact(fc, world, ["phase-stall"], "s3rver stalled 3 s")

        # ---- storage errors: a segment object deleted ----
        topics = world.admin("/topics")
        key = topics[0]["partitions"][1]["segments"][0]["object"] + ".log"
        urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{info['s3']['port']}/tiered/{key}", method="DELETE"), timeout=10)
        log_start, local_start = remote_offset(world, "scan", 1)
        for i in range(3):
            fetch_once(kafka_port, "phase-errors", "scan", 1, log_start)
        truth, seen = settle(fc, world, ["phase-errors"])
        check(truth["phase-errors"][2] > 0, f"the ledger has failed GETs: {truth}")
        check(truth == seen, f"storage errors: fetchcost {seen} == ledger {truth}")

        # ---- 10,000 connections from one client ----
        socks = []
        t = time.time()
        try:
            for i in range(args.connections):
                s = socket.socket()
                s.setblocking(True)
                s.connect(("127.0.0.1", kafka_port))
                socks.append(s)
            for i, s in enumerate(socks):
                s.sendall(metadata_v1("many-conns", i))
            answered = 0
            for s in socks:
                s.settimeout(30)
                read_frame(s)
                answered += 1
            check(answered == args.connections,
                  f"{args.connections} connections opened and answered in {time.time() - t:.1f} s")
        finally:
            for s in socks:
                s.close()
        check(fc.alive() and wait_until(lambda: fc.status()["targets"], 5),
              "fetchcostd alive after 10,000 connections")
        kcat(world, "phase-c", 1000)
        exact(fc, world, ["phase-c"], "after 10,000 connections")

        # ---- fd-reuse storm: connect, fetch a remote offset, close; 1,000 times ----
        log_start, local_start = remote_offset(world, "scan", 0)
        t = time.time()
        for i in range(1000):
            fetch_once(kafka_port, f"storm-{i % 50}", "scan", 0, log_start + (i * 37) % (local_start - log_start))
        print(f"fd-reuse storm: 1000 connect/fetch/close in {time.time() - t:.1f} s")
        exact(fc, world, [f"storm-{i}" for i in range(50)], "fd-reuse storm, 50 clients")

        # ---- ring overflow: a second fetchcostd with a 4 KiB ring per CPU ----
        ring = Fetchcostd(args.fetchcostd, workdir, "ring",
                          dict(base_cfg, capture={"ring_kib_per_cpu": 4},
                               audit_log={"path": ""})).start()
        check(wait_until(lambda: ring.status()["targets"], 20), "tiny-ring fetchcostd watches")
        load = subprocess.run([args.load, "--port", str(kafka_port), "--offset", str(local_start),
                               "--max-bytes", "65536", "--connections", "8", "--seconds", "4",
                               "--rate", "4000",
                               "--client-id", "ring-load"], capture_output=True, text=True)
        print("load:", load.stdout.strip())
        kcat(world, "phase-ring", 1000)
        drops = lambda: sum(metric_values(ring.metrics(), "fetchcost_ring_drops_total").values())
        check(wait_until(lambda: drops() > 0, 10), f"ring drops exported ({drops()})")
        check(metric_values(ring.metrics(), "fetchcost_attribution_incomplete").get("") == 1,
              "fetchcost_attribution_incomplete is 1")
        check(ring.status().get("attribution_complete") is False,
              "/api/v1/status: attribution_complete false")
        check(ring.alive(), "tiny-ring fetchcostd did not crash")
        check(metric_values(fc.metrics(), "fetchcost_attribution_incomplete").get("") == 0,
              "the big-ring fetchcostd stayed complete")
        ring.stop()
        check(ring.proc.returncode == 0, "tiny-ring fetchcostd exits cleanly")
        exact(fc, world, ["phase-ring"], "big-ring fetchcostd beside it: exact")

        tier = fc.status()["local_tier"]
        check(tier["log_dirs"] == [info["broker"]["log_dirs"]] and tier["partitions"] > 0
              and tier["origin"].startswith(f"pid {world.broker.pid} ")
              and kafka_port in fc.status()["config"]["kafka_ports"]
              and metric_values(fc.metrics(), "fetchcost_local_tier_partitions").get("")
              == tier["partitions"],
              f"the broker's log dirs and listener port read from its settings ({tier})")

        # ---- log dirs vanish ----
        shutil.rmtree(info["broker"]["log_dirs"])
        time.sleep(2)
        check(fc.alive() and "ok" in urllib.request.urlopen(fc.base + "/healthz").read().decode(),
              "log dirs gone: fetchcostd alive and healthy")
        kcat(world, "phase-d", 1000)
        exact(fc, world, ["phase-d"], "log dirs gone: remote reads still exact")

        # ---- the broker restarts: new PID, its settings unreadable when fetchcostd finds it ----
        # fetchcostd is stopped while the broker restarts and its server.properties is moved
        # away, so the new pid is found with settings it cannot read; they are read on a later
        # try once the file is back.
        old_pid = world.broker.pid
        first_ledger = world.admin("/ledger")
        argv = list(world.broker.args)
        properties = world.path("config", "server.properties")
        os.kill(fc.proc.pid, signal.SIGSTOP)
        try:
            os.killpg(world.broker.pid, signal.SIGTERM)
            world.broker.wait(timeout=20)
            os.remove(world.path("broker.ready"))
            world.broker = world.spawn("tiered-broker", argv, cwd=world.workdir)
            b = scenario.wait_for_file(world.path("broker.ready"), world.broker, "tiered-broker", 60)
            os.rename(properties, properties + ".aside")
        finally:
            os.kill(fc.proc.pid, signal.SIGCONT)
        world.info["broker"]["admin"] = f"http://127.0.0.1:{b['admin_port']}"
        check(b["pid"] != old_pid, f"broker restarted: pid {old_pid} -> {b['pid']}")
        check(wait_until(lambda: [t["pid"] for t in fc.status()["targets"]] == [b["pid"]], 20),
              "fetchcostd watches the new pid only")
        unread = fc.status()["broker_settings"]
        check(unread["unread"] == 1 and "server.properties" in unread["error"]
              and metric_values(fc.metrics(), "fetchcost_broker_settings_unread").get("") == 1,
              f"the new pid's settings, moved away, are counted unread, naming the file ({unread})")
        os.rename(properties + ".aside", properties)
        check(wait_until(lambda: fc.status()["local_tier"]["origin"].startswith(f"pid {b['pid']} "),
                         25, 0.5),
              "the settings are read on a later try once the file is back (within 10 s)")
        tier = fc.status()["local_tier"]
        unread = fc.status()["broker_settings"]
        check(tier["log_dirs"] == [info["broker"]["log_dirs"]] and unread["unread"] == 0
              and unread["error"] == ""
              and metric_values(fc.metrics(), "fetchcost_broker_settings_unread").get("") == 0,
              f"the restarted broker's log dirs, the same, named by the new pid ({tier}, {unread})")
        libs = fc.status()["targets"][0]["tls"]
        check(libs and all(l["functions"] and not l["error"] for l in libs if not l["skipped"]),
              "TLS uprobes attached to the new pid with the reduced capabilities: " +
              ", ".join(f"{l['flavour']}: {len(l['functions'])} {l['error']}" for l in libs))
        kcat(world, "phase-e", 1000)
        exact(fc, world, ["phase-e"], "after the broker restart")
        # Across both broker lives, nothing lost and nothing twice: fetchcostd's totals equal the
        # two ledgers added up, for every client of both.
        second = ledger_by_client(world.admin("/ledger"))
        both = ledger_by_client(first_ledger)
        for c, v in second.items():
            o = both.get(c, (0, 0, 0))
            both[c] = (o[0] + v[0], o[1] + v[1], o[2] + v[2])
        mine = fc.clients()
        since_restart = {c: v for c, v in both.items() if c not in ("phase-a",)}
        check({c: mine.get(c) for c in since_restart} == since_restart,
              "every client since the SIGKILL restart equals both broker ledgers together")
        check(fc.report().get("phase-a") == want_a, "phase-a still counted exactly once")
    finally:
        for f in (ring, fc):
            if f:
                f.stop()
        world.stop()
    finish(workdir, args.keep)


if __name__ == "__main__":
    main()
