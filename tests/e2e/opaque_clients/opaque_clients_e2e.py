#!/usr/bin/python3
"""End-to-end: tenants in their own network namespaces (their own addresses, as pods have) consume
over the simulator's SSL listener while fetchcostd watches the broker; the remote reads it reports
are checked against the simulator's ledger (client-id -> bytes/GETs, reconciled with s3rver's
request log) joined with which client ran on which address (the test started them).

  --mode opaque    OpenSSL (the simulator's TLS library) is not hooked: the Kafka connections are
                   ciphertext, so identity falls back to the peer (client_id="peer:<ip>", peer_ip
                   label, method="estimated"). >= --min-share of GET bytes on the right peer, the
                   rest under __unattributed__, none on the peer that made no remote read.
  --mode readable  OpenSSL hooked: the same run attributes by client-id exactly (bytes, GETs and
                   errors equal to the ledger), each series carrying its tenant's peer_ip.

Tenants (one namespace and address each, all over TLS, concurrently):
  kcat      kcat/librdkafka from the earliest offsets of topic scan-kcat (remote, then local)
  python    python3-kafka from the earliest offsets of scan-python
  kafkajs   kafkajs (a group) from the earliest offsets of scan-kafkajs
  tail      @platformatic/kafka tailing all three from the latest offsets: local data only, its
            long-poll fetches are open while the others' remote reads run
(--shared-topic: the three scanners read one topic, the same segments at the same moments.)
--runs N repeats the case and prints every run's per-peer shares (a benchmark of the matching).
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib.machinery import SourceFileLoader

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
scenario = SourceFileLoader("scenario", os.path.join(REPO, "tools", "scenario")).load_module()

PARTITIONS, SEEDED, VALUE_SIZE = 2, 1500, 1000
TENANTS = ["kcat", "python", "kafkajs", "tail"]
SCANNERS = ["kcat", "python", "kafkajs"]  # read from the earliest offsets: remote, then local
CLIENT_ID = {t: f"tenant-{t}" for t in TENANTS}


class Failure(Exception):
    figures = None  # what was measured before the failed check, for --runs summaries


free_port = scenario.free_port


def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def metric_series(text, name):
    """[(labels dict, value)] of one metric family's samples in Prometheus text format."""
    out = []
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, value = line.rsplit(" ", 1)
        out.append((dict(LABEL_RE.findall(head)), float(value)))
    return out


def start_fetchcostd(args, world, workdir, mode):
    info = world.info
    port = free_port()
    config = {
        "listen": f"127.0.0.1:{port}",
        "targets": {"pids": [info["broker"]["pid"]]},
        "kafka_ports": [info["broker"]["kafka_port"], info["broker"]["tls_port"]],
        "object_store": {"ports": [info["s3"]["port"]]},
        "log_dirs": [info["broker"]["log_dirs"]],
        "state_dir": os.path.join(workdir, "state"),
        "price_table": "aws-s3-standard-same-region",
        # The simulator's SSL listener is OpenSSL; leaving OpenSSL out makes its Kafka connections
        # opaque, as a Java broker's JSSE is (s3rver is plain HTTP, so the GETs stay exact).
        "capture": {"tls_libraries": ["gnutls"] if mode == "opaque" else ["openssl", "gnutls"]},
    }
    with open(os.path.join(workdir, "fetchcost.json"), "w") as f:
        json.dump(config, f)
    log = open(os.path.join(workdir, "fetchcostd.log"), "w")
    fc = subprocess.Popen([args.fetchcostd, "--config", os.path.join(workdir, "fetchcost.json")],
                          stdout=log, stderr=log, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while True:
        try:
            get(base + "/readyz")
            # Ready, and the TLS libraries it is to hook are hooked, so every tenant's connection
            # is seen from its first byte.
            libs = [l for t in json.loads(get(base + "/api/v1/status"))["targets"]
                    for l in t["tls"]]
            if all(l["skipped"] or l["functions"] or l["error"] for l in libs) and libs:
                return fc, base
            raise RuntimeError("TLS libraries not hooked yet")
        except Exception:
            if fc.poll() is not None or time.time() > deadline:
                log.flush()
                raise Failure("fetchcostd did not become ready: " +
                              open(os.path.join(workdir, "fetchcostd.log")).read()[-2000:])
            time.sleep(0.2)


def tls_uprobes(fc_pid, broker_pid):
    """Paths of the libraries fetchcostd holds uprobes on, as the kernel lists them (bpftool), and
    the broker's OpenSSL library (its memory maps)."""
    out = subprocess.run(["bpftool", "-j", "perf", "list"], capture_output=True, text=True)
    if out.returncode != 0:
        raise Failure(f"bpftool perf list failed: {out.stderr.strip()}")
    paths = {os.path.basename(p["filename"]) for p in json.loads(out.stdout)
             if p["pid"] == fc_pid and p["fd_type"].startswith("uprobe")}
    with open(f"/proc/{broker_pid}/maps") as f:
        ssl = {os.path.basename(l.split()[-1]) for l in f if "libssl.so" in l}
    if not ssl:
        raise Failure("the simulator has no libssl mapped: its SSL listener is not OpenSSL?")
    return paths, ssl.pop()


def topic_of(tenant, shared):
    """Each scanner reads its own topic (remote reads of one partition by two clients at the same
    moment are a known limit of exact matching, not what this test is about); --shared-topic puts
    them all on one."""
    return "scan" if shared else f"scan-{tenant}"


def start_tenants(world, net, shared):
    bs = world.info["broker"]["tls_bootstrap"]
    total = PARTITIONS * SEEDED
    common = ["--bootstrap", bs, "--value-size", str(VALUE_SIZE), "--tls"]
    procs = {}
    procs["kcat"] = world.spawn("kcat", [
        "kcat", "-C", "-q", "-b", bs, "-t", topic_of("kcat", shared), "-o", "beginning",
        "-c", str(total),
        "-X", f"client.id={CLIENT_ID['kcat']}", "-X", "security.protocol=SSL",
        "-X", "enable.ssl.certificate.verification=false", "-f", "%o\\n",
        "-E"],  # a transient connection failure is not what this test is about: reconnect
        netns=net.ns("kcat"), stdout=subprocess.DEVNULL)
    procs["python"] = world.spawn("python", [
        scenario.CONSUME_PY, "--client-id", CLIENT_ID["python"], "--from", "earliest",
        "--count", str(total), "--timeout-s", "50", "--topic", topic_of("python", shared)] + common,
        netns=net.ns("python"))
    procs["kafkajs"] = world.spawn("kafkajs", [
        "node", scenario.CONSUME_MJS, "--lib", "kafkajs", "--client-id", CLIENT_ID["kafkajs"],
        "--group", "g-kafkajs", "--from", "earliest", "--count", str(total),
        "--timeout-s", "50", "--topic", topic_of("kafkajs", shared)] + common,
        netns=net.ns("kafkajs"))
    procs["tail"] = world.spawn("tail", [
        "node", scenario.CONSUME_MJS, "--lib", "platformatic", "--client-id", CLIENT_ID["tail"],
        "--group", "g-tail", "--from", "latest", "--forever",
        "--topic", ",".join(sorted({topic_of(t, shared) for t in SCANNERS}))] + common,
        netns=net.ns("tail"))
    return procs


def run_case(args, mode):
    """One run; returns a dict of figures. Raises Failure on a failed check."""
    workdir = tempfile.mkdtemp(prefix=f"fc-netns-{mode}-")
    fc = None
    t0 = time.time()
    try:
        with scenario.TenantNet(TENANTS) as net:
            world = scenario.World(workdir, broker_bin=args.broker, net=net, tls_listener=True,
                                   topics=[f"{t}:{PARTITIONS}:{SEEDED}:{VALUE_SIZE}" for t in
                                           sorted({topic_of(t, args.shared_topic)
                                                   for t in SCANNERS})],
                                   produce_interval_ms=200,
                                   # A loaded machine must not turn reads into remote.fetch.max.wait
                                   # timeouts (answered without the data: no fetch to match).
                                   extra_broker_args=["--remote-fetch-max-wait-ms", "10000"])
            with world:
                fc, base = start_fetchcostd(args, world, workdir, mode)
                procs = start_tenants(world, net, args.shared_topic)
                deadline = time.time() + args.seconds
                while time.time() < deadline and any(procs[t].poll() is None for t in SCANNERS):
                    time.sleep(0.2)
                for t in SCANNERS:
                    if procs[t].poll() != 0:
                        log = open(world.path(f"{t}.log"), errors="replace").read()[-1500:]
                        raise Failure(f"tenant {t} did not finish its scan in {args.seconds} s "
                                      f"(status {procs[t].poll()}): {log}")
                time.sleep(1)  # the tail goes on alone for a moment (local data, long polls)
                if procs["tail"].poll() is not None:
                    raise Failure("the tail tenant exited: " +
                                  open(world.path("tail.log"), errors="replace").read()[-1500:])
                os.killpg(procs["tail"].pid, signal.SIGTERM)
                procs["tail"].wait(timeout=15)
                time.sleep(2)  # fetchcostd settles what was in flight
                hooked, libssl = tls_uprobes(fc.pid, world.broker.pid)
                if mode == "opaque" and libssl in hooked:
                    raise Failure(f"fetchcostd holds uprobes on the broker's {libssl}: the "
                                  f"listener is not opaque")
                if mode == "readable" and libssl not in hooked:
                    raise Failure(f"fetchcostd holds no uprobe on the broker's {libssl}: "
                                  f"{sorted(hooked)}")
                ledger = world.admin("/ledger")
                metrics = get(base + "/metrics")
                status = json.loads(get(base + "/api/v1/status"))
                with open(os.path.join(workdir, "metrics.txt"), "w") as f:
                    f.write(metrics)
                with open(os.path.join(workdir, "status.json"), "w") as f:
                    json.dump(status, f, indent=1)
                timeouts = sum(e.get("remote_read_timeouts", 0) for e in ledger["entries"])
            # The ledger's totals must equal s3rver's own request log (not its console log, which
            # a stopped s3rver may leave unflushed).
            _, rep = scenario.reconcile(workdir)
            if any(rep["ledger"][k] != rep["s3rver"][k] for k in ("gets", "bytes", "errors")):
                raise Failure(f"ground truth: the ledger {rep['ledger']} does not reconcile with "
                              f"s3rver's request log {rep['s3rver']}")
            figures = {"mode": mode, "seconds": round(time.time() - t0, 1),
                       "ring_drops": sum(status.get("drops_per_cpu", [])),
                       "remote_read_timeouts": timeouts}
            try:
                return check(mode, net, ledger, metrics, args.min_share, figures)
            except Failure as e:
                e.figures = figures
                raise
    finally:
        if fc and fc.poll() is None:
            fc.send_signal(signal.SIGTERM)
            try:
                fc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                fc.kill()
                fc.wait()
        if args.keep or sys.exc_info()[0] is not None:  # a failed run keeps its logs
            print("kept", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def check(mode, net, ledger, metrics, min_share, figures):
    by_client = {t: CLIENT_ID[t] for t in TENANTS}
    tenant_of_client = {c: t for t, c in by_client.items()}
    truth = {}  # (client_id, topic) -> (bytes, gets, errors)
    for e in ledger["entries"]:
        if e["client_id"] not in tenant_of_client:
            raise Failure(f"the ledger names a client this test did not start: {e['client_id']}")
        truth[(e["client_id"], e["topic"])] = (e["bytes"], e["gets"], e["errors"])
    peer_truth = {net.ip(t): 0 for t in TENANTS}
    for (c, _), (b, _, _) in truth.items():
        peer_truth[net.ip(tenant_of_client[c])] += b
    total = sum(peer_truth.values())
    for t in SCANNERS:
        if peer_truth[net.ip(t)] == 0:
            raise Failure(f"tenant {t} made no remote read: the test did not test it")
    if peer_truth[net.ip("tail")] != 0:
        raise Failure("the tail tenant made remote reads: the no-remote-read peer is missing")

    bytes_series = metric_series(metrics, "kafka_server_remote_fetch_bytes_total")
    gets_series = metric_series(metrics, "kafka_server_remote_fetch_requests_total")
    if not bytes_series:
        raise Failure("kafka_server_remote_fetch_bytes_total has no series")
    seen_total = sum(v for _, v in bytes_series)
    print(f"  ledger per peer: " + json.dumps({f"{t}@{net.ip(t)}": peer_truth[net.ip(t)]
                                               for t in TENANTS}))
    print("  fetchcost series: " + json.dumps(
        [dict(l, bytes=int(v)) for l, v in sorted(bytes_series, key=lambda s: -s[1])]))
    figures.update(ledger_bytes=total, fetchcost_bytes=int(seen_total),
                   gets=ledger["totals"]["gets"])

    if mode == "readable":
        seen = {}
        for series, field in ((bytes_series, 0), (gets_series, 1)):
            for labels, v in series:
                c = labels.get("client_id")
                key = (c, labels.get("topic"))
                cur = list(seen.get(key, (0, 0, 0)))
                cur[field] += int(v)
                seen[key] = tuple(cur)
        want = {k: (b, g, 0) for k, (b, g, e) in truth.items()}
        figures["share"] = round(sum(min(seen.get(k, (0,))[0], b)
                                     for k, (b, g, e) in want.items()) / total, 4)
        if seen != want:
            raise Failure(f"per-client bytes/GETs differ from the ledger:\n  ledger    {want}\n"
                          f"  fetchcost {seen}")
        for labels, _ in bytes_series + gets_series:
            t = tenant_of_client.get(labels.get("client_id"))
            if labels.get("peer_ip") != net.ip(t):
                raise Failure(f"{labels.get('client_id')} ran on {net.ip(t)} but its series says "
                              f"peer_ip={labels.get('peer_ip')!r}: {labels}")
        print(f"  readable: per-client bytes and GETs equal to the ledger, peer_ip on every series")
        return figures

    # opaque
    seen = {}
    for labels, v in bytes_series:
        c = labels.get("client_id", "")
        if c == "__unattributed__":
            seen["__unattributed__"] = seen.get("__unattributed__", 0) + v
            continue
        if not c.startswith("peer:"):
            raise Failure(f"a series names client-id {c!r} on an opaque listener (was the TLS "
                          f"library hooked?): {labels}")
        ip = c[len("peer:"):]
        if labels.get("peer_ip") != ip:
            raise Failure(f"client_id {c} with peer_ip={labels.get('peer_ip')!r}")
        if v > 0 and labels.get("method") != "estimated":
            raise Failure(f"an opaque peer's series without method=\"estimated\": {labels}")
        if ip not in peer_truth:
            raise Failure(f"bytes on {c}, an address no tenant had")
        seen[ip] = seen.get(ip, 0) + v
    right = over = 0
    shares = {}
    for t in TENANTS:
        ip = net.ip(t)
        got, want = seen.get(ip, 0), peer_truth[ip]
        if want == 0 and got > 0:
            raise Failure(f"{int(got)} bytes on peer:{ip} ({t}), which made no remote read")
        right += min(got, want)
        over += max(0, got - want)
        shares[t] = round(got / want, 4) if want else 0.0
    share = right / total
    figures.update(share=round(share, 4), over=round(over / total, 4), per_peer=shares,
                   unattributed=int(seen.get("__unattributed__", 0)))
    print(f"  opaque: {share:.2%} of GET bytes on the right peer, {over / total:.2%} on a peer "
          f"beyond its ledger bytes, {seen.get('__unattributed__', 0) / total:.2%} unattributed; "
          f"per peer (fetchcost/ledger) {shares}")
    if abs(seen_total - total) > 0.01 * total:
        raise Failure(f"fetchcost's total {int(seen_total)} bytes does not reconcile with the "
                      f"ledger's {total}")
    if share < min_share:
        raise Failure(f"only {share:.2%} of GET bytes on the right peer (need {min_share:.0%})")
    if over > (1 - min_share) * total:
        raise Failure(f"{over / total:.2%} of GET bytes on peers beyond their ledger bytes")
    return figures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--fetchcostd", required=True)
    ap.add_argument("--broker", required=True)
    ap.add_argument("--mode", required=True, choices=["opaque", "readable"])
    ap.add_argument("--seconds", type=float, default=45, help="longest the scans may take")
    ap.add_argument("--min-share", type=float, default=0.95)
    ap.add_argument("--shared-topic", action="store_true",
                    help="the three scanners read one topic (the same segments at once)")
    ap.add_argument("--runs", type=int, default=1, help="repeat (benchmark); every run must pass")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            print("FAIL: this test creates network namespaces and loads BPF programs: it needs "
                  "root (CI=true: no skipping)")
            sys.exit(1)
        print("SKIP: needs root")
        sys.exit(77)
    results, failures = [], 0
    for i in range(args.runs):
        print(f"run {i + 1}/{args.runs} ({args.mode})", flush=True)
        try:
            results.append(run_case(args, args.mode))
            print("  " + json.dumps(results[-1]), flush=True)
        except Failure as e:
            failures += 1
            if e.figures and "share" in e.figures:
                results.append(e.figures)
                print("  " + json.dumps(e.figures), flush=True)
            print(f"  FAIL: {e}", flush=True)
    if args.runs > 1:
        shares = [r["share"] for r in results]
        who = "client" if args.mode == "readable" else "peer"
        print(f"{args.runs} runs, {failures} failed; share on the right {who}: "
              f"{', '.join(f'{s:.2%}' for s in shares)}; seconds: "
              f"{', '.join(str(r['seconds']) for r in results)}")
    if failures:
        print("FAIL")
        sys.exit(1)
    print("PASS")


if __name__ == "__main__":
    main()
