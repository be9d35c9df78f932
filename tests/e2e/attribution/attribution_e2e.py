#!/usr/bin/python3
"""End-to-end: fetchcostd (real BPF on the real kernel) watching tiered-broker while the four real
clients consume through s3rver (or, with --object-store nginx, through nginx: another server's
HTTP responses to decode); fetchcostd's per-client figures are checked against the simulator's own
ledger (which tools/scenario reconciles with s3rver's request log).

  exact transports (http, openssl): bytes, GETs and errors per (client_id, topic) are equal;
  opaque (gnutls, not hooked):      >= 95% of GET bytes on the right client, the rest under
                                    __unattributed__, no bytes on a client without remote reads.
With --prometheus, a real Prometheus server scrapes fetchcostd and evaluates docs/promql.md's
queries; their values must agree with the ledger. fetchcostd then also times its programs
(capture.program_stats): the run time and runs it exports must agree with what bpftool reads
from the kernel for the programs it holds.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from importlib.machinery import SourceFileLoader

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
scenario = SourceFileLoader("scenario", os.path.join(REPO, "tools", "scenario")).load_module()


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


free_port = scenario.free_port


get_json = scenario.get_json


def per_client(sensors):
    out = {}
    for s in sensors:
        k = (s["client_id"], s["topic"])
        b, r, e = out.get(k, (0, 0, 0))
        out[k] = (b + s["bytes"], r + s["requests"], e + s["errors"])
    return out


def promql(base, query):
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    doc = get_json(url)
    if doc["status"] != "success":
        fail(f"PromQL {query!r}: {doc}")
    return {r["metric"].get("client_id", ""): float(r["value"][1]) for r in doc["data"]["result"]}


def promql_total(base, query):
    """The value of a query that sums to one series (0 if it has none)."""
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    doc = get_json(url)
    if doc["status"] != "success":
        fail(f"PromQL {query!r}: {doc}")
    return sum(float(r["value"][1]) for r in doc["data"]["result"])


def kernel_program_totals(pid):
    """(run_time_ns, run_cnt) summed over the BPF programs process `pid` holds, by bpftool."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                ids |= {int(line.split()[1]) for line in f if line.startswith("prog_id:")}
        except OSError:
            pass
    out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True).stdout
    progs = [p for p in json.loads(out or "[]") if p["id"] in ids]
    return sum(p.get("run_time_ns", 0) for p in progs), sum(p.get("run_cnt", 0) for p in progs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fetchcostd", required=True)
    ap.add_argument("--broker", required=True)
    ap.add_argument("--transport", default="http", choices=["http", "openssl", "gnutls"])
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--prometheus", action="store_true")
    ap.add_argument("--object-store", choices=["s3rver", "nginx"], default="s3rver",
                    help="nginx: another HTTP server's responses (headers, framing) to decode")
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--min-share", type=float, default=0.95,
                    help="opaque mode: least share of GET bytes on the right client")
    ap.add_argument("--scanner-passes", type=int, default=0,
                    help="replays of the scanner tenant (0: until the tenants stop)")
    ap.add_argument("--storage-errors", action="store_true",
                    help="delete one remote segment from the object store first: GETs of it "
                         "fail (404)")
    ap.add_argument("--log-dirs-rescan-only", action="store_true",
                    help="log_dirs_inotify false: periodic rescans alone keep the local tier")
    ap.add_argument("--settings-from-broker", action="store_true",
                    help="the config names no log_dirs and no kafka_ports: fetchcostd reads the "
                         "broker's log.dirs and listeners from its server.properties (named "
                         "relative to its working directory); the quiet-fetch check below needs "
                         "the listener's port")
    ap.add_argument("--no-tier", action="store_true",
                    help="log_dirs names an empty dir: no local tier (as where the broker's "
                         "settings cannot be read), every partition of every fetch possibly "
                         "remote; consumers at the log's end wait beside the scanner's replays, "
                         "and the figures must still equal the ledger")
    ap.add_argument("--replay-pair", action="store_true",
                    help="two more tenants replay a topic of their own from the remote tier at "
                         "once, one in its first remote segment, one in its last "
                         "(tiered-broker-load, fetches of a fixed offset on 8 connections, 1,000 a "
                         "second each): the broker queues some in another order than they came, and "
                         "a fetch in the last segment must not take a GET of the first (at most "
                         "0.1% of the pair's GETs unattributed; the other tenants exact)")
    ap.add_argument("--s3-read-bytes", type=int, default=0,
                    help="the broker reads a GET's response this many bytes at a time (a JVM "
                         "HTTP client's buffer): its body's reads are folded in the kernel, and "
                         "the figures must still equal the ledger")
    ap.add_argument("--session-tenant", action="store_true",
                    help="one more tenant that fetches as the Java client does, in an incremental "
                         "fetch session whose requests after the first list nothing")
    ap.add_argument("--wide-consumer", action="store_true",
                    help="at the end, a real librdkafka consumer (kcat) of a 64-partition topic "
                         "at its end: its 1.9 KiB sessionless fetches must be left out as quiet")
    ap.add_argument("--wide-remote-consumer", action="store_true",
                    help="two more tenants reading a 160-partition topic from its start, a real "
                         "librdkafka consumer (kcat) and a Java-like one (a fetch session): their "
                         "4.5 KiB fetch requests must be captured whole, or the GETs of the "
                         "partitions listed last go unattributed")
    ap.add_argument("--read-size-prefix-first", action="store_true",
                    help="the broker reads each request as a JVM broker does, its size prefix "
                         "first: the capture joins the two reads, and the figures must still "
                         "equal the ledger")
    ap.add_argument("--capture-variant", default=None,
                    help="fetchcostd's socket hooks (kernels < 6.3 load the syscall variants)")
    args = ap.parse_args()
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            fail("this test loads BPF programs and needs root (CI=true: no skipping)")
        print("SKIP: needs root")
        sys.exit(77)

    workdir = tempfile.mkdtemp(prefix=f"fc-e2e-{args.transport}-")
    broker_args = ["--s3-read-bytes", str(args.s3_read_bytes)] if args.s3_read_bytes else []
    if args.read_size_prefix_first:
        broker_args.append("--read-size-prefix-first")
    # --replay-pair reads a topic of its own, so that only its two clients read it.
    topics = ["scan:2:1500:1000"] + (["replay:1:1500:1000"] if args.replay_pair else [])
    topics += ["wide:64:20:100"] if args.wide_consumer else []  # local only, read by no tenant
    # Three segments of 128 KiB or so per partition: the first is only in the remote tier.
    # Two of them: two clients reading the same segment at once may swap a GET (a known gap).
    topics += ["wider:160:300:1000", "wider-java:160:300:1000"] if args.wide_remote_consumer else []
    world = scenario.World(workdir, broker_bin=args.broker, s3_transport=args.transport, topics=topics,
                           object_store=args.object_store, extra_broker_args=broker_args)
    fc = prom = None
    try:
        world.start()
        info = world.info
        port = free_port()
        if args.no_tier:
            os.makedirs(os.path.join(workdir, "no-log-dirs"))
        config = {
            "listen": f"127.0.0.1:{port}",
            "targets": {"pids": [info["broker"]["pid"]]},
            "kafka_ports": [] if args.settings_from_broker
            else [int(info["broker"]["bootstrap"].rsplit(":", 1)[1])],
            "object_store": {"ports": [info["s3"]["port"]]},
            "log_dirs": [] if args.settings_from_broker
            else [os.path.join(workdir, "no-log-dirs")] if args.no_tier
            else [info["broker"]["log_dirs"]],
            "state_dir": os.path.join(workdir, "state"),
            "audit_log": {"path": os.path.join(workdir, "audit.jsonl")},
            "price_table": "aws-s3-standard-internet",
        }
        if args.log_dirs_rescan_only:
            config["log_dirs_inotify"] = False
            config["log_dirs_rescan_seconds"] = 1
        if args.transport == "gnutls":  # GnuTLS stands in for a JVM's TLS: not hooked, opaque
            config["capture"] = {"tls_libraries": ["openssl"]}
        if args.prometheus:  # the programs' own cost, for docs/promql.md's queries of it
            config.setdefault("capture", {})["program_stats"] = True
        with open(os.path.join(workdir, "fetchcost.json"), "w") as f:
            json.dump(config, f)
        variant = ["--capture-variant", args.capture_variant] if args.capture_variant else []
        fc = subprocess.Popen([args.fetchcostd, "--config", os.path.join(workdir, "fetchcost.json")]
                              + variant,
                              stdout=subprocess.DEVNULL,
                              stderr=open(os.path.join(workdir, "fetchcostd.log"), "w"))
        base = f"http://127.0.0.1:{port}"
        try:
            scenario.wait_http(base + "/readyz", 30, fc, os.path.join(workdir, "fetchcostd.log"))
        except RuntimeError as e:
            fail(f"fetchcostd did not become ready: {e}")
        with urllib.request.urlopen(base + "/api/v1/status", timeout=10) as r:
            status = json.load(r)
        if args.capture_variant and status["variant"] != args.capture_variant:
            fail(f"fetchcostd loaded {status['variant']}, not {args.capture_variant}")
        if args.no_tier and status["local_tier"]["partitions"] != 0:
            fail(f"--no-tier, yet the local tier knows partitions: {status['local_tier']}")
        if args.settings_from_broker:
            if status["config"]["kafka_ports"] != [info["broker"]["kafka_port"]]:
                fail(f"the broker's listener port was not found: {status['config']['kafka_ports']}")
            tier = status["local_tier"]
            partitions = sum(len(t["partitions"]) for t in world.admin("/topics"))
            if (tier["log_dirs"] != [info["broker"]["log_dirs"]] or
                    tier["partitions"] != partitions or
                    tier["origin"] != f"pid {info['broker']['pid']} config/server.properties"):
                fail(f"the broker's log dirs were not found: {tier}")
        if args.prometheus:
            prom, prom_base = scenario.start_prometheus(workdir, f"127.0.0.1:{port}")
        inotify_fds = 0
        for fd in os.listdir(f"/proc/{fc.pid}/fd"):
            try:
                inotify_fds += os.readlink(f"/proc/{fc.pid}/fd/{fd}") == "anon_inode:inotify"
            except OSError:
                pass
        if args.log_dirs_rescan_only and inotify_fds:
            fail(f"log_dirs_inotify false, yet fetchcostd holds {inotify_fds} inotify fds")
        if not args.log_dirs_rescan_only and not inotify_fds:
            fail("fetchcostd watches no log dir with inotify")

        if args.storage_errors:
            # The first remote segment of partition 0 vanishes from the bucket: every read of it
            # fails, the broker answers KAFKA_STORAGE_ERROR, and fetchcost must count requests
            # and errors for the readers but never bytes.
            key = world.admin("/topics")[0]["partitions"][0]["segments"][0]["object"] + ".log"
            req = urllib.request.Request(f"http://127.0.0.1:{info['s3']['port']}/tiered/{key}",
                                         method="DELETE")
            urllib.request.urlopen(req, timeout=10)
        world.start_tenants(scanner_passes=args.scanner_passes)
        if args.session_tenant:
            # Fetch sessions (KIP-227), as the Java client fetches: the full request that opens
            # the session names partition 0 at its first remote offset; the incremental ones
            # after it list nothing, so each GET they cause belongs to the session's partition
            # alone. The ledger check below holds its bytes and GETs to the simulator's. It stops
            # after 6 s: its steady GETs would report every long poll held beside them, and the
            # quiet-fetch check above wants some left out.
            scan = next(t for t in world.admin("/topics") if t["name"] == "scan")
            part = min(scan["partitions"], key=lambda p: p["partition"])
            remote = next(s["base_offset"] for s in part["segments"] if s["remote"])
            world.spawn("sessions-java", [
                os.path.join(os.path.dirname(args.broker), "tiered-broker-load"),
                "--port", world.bootstrap.rsplit(":", 1)[1], "--topic", "scan",
                "--partition", str(part["partition"]), "--offset", str(remote),
                "--max-bytes", "65536", "--connections", "2", "--rate", "10",
                "--seconds", str(min(6, args.seconds)), "--client-id", "sessions-java",
                "--incremental-sessions", "--sessions-unchanged"])
        if args.wide_remote_consumer:
            # librdkafka lists every partition it reads on a broker in one request: 4.5 KiB for
            # 160 partitions in Fetch v11, over the 4 KiB a socket call is captured up to.
            world.spawn("wider-kcat", ["kcat", "-C", "-q", "-b", world.bootstrap, "-t", "wider",
                                       "-o", "beginning", "-e", "-X", "client.id=wider-kcat"],
                        stdout=subprocess.DEVNULL)
            # As a Java consumer of a topic like it: the request that opens its fetch session lists
            # the 160 partitions at their first offset, remote (4.5 KiB); the incremental ones
            # list nothing, so the decoder knows what each reads only from that first request.
            world.spawn("wider-java", [
                os.path.join(os.path.dirname(args.broker), "tiered-broker-load"),
                "--port", world.bootstrap.rsplit(":", 1)[1], "--topic", "wider-java",
                "--partition", "0", "--partitions-per-fetch", "160", "--offset", "0",
                "--max-bytes", "65536", "--connections", "1", "--rate", "20",
                "--seconds", str(min(6, args.seconds)), "--client-id", "wider-java",
                "--incremental-sessions", "--sessions-unchanged"])
        if args.replay_pair:
            replay = next(t for t in world.admin("/topics") if t["name"] == "replay")
            part = replay["partitions"][0]
            remote = [s["base_offset"] for s in part["segments"] if s["remote"]]
            if len(remote) < 2:
                fail(f"--replay-pair needs two remote segments in replay/0: {remote}")
            load = os.path.join(os.path.dirname(args.broker), "tiered-broker-load")
            for client, offset in (("replay-last", remote[-1]), ("replay-first", remote[0])):
                world.spawn(client, [
                    load, "--port", world.bootstrap.rsplit(":", 1)[1], "--topic", "replay",
                    "--partition", "0", "--offset", str(offset), "--max-bytes", "65536",
                    "--connections", "8", "--rate", "1000",
                    "--seconds", str(min(6, args.seconds)),
                    "--client-id", client])
        time.sleep(args.seconds)
        # Stop the tenants; keep the broker and the object store.
        for name, proc, log in list(world.procs):
            if proc not in (world.broker, world.s3):
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        time.sleep(3)  # the broker answers what was in flight; fetchcostd settles
        if args.prometheus:
            # One more replay once Prometheus holds the series, so rate()/increase() over the
            # window see the counters grow (reads between two scrapes of a new series do not).
            scenario.kcat_consume(world.bootstrap, "scan", "scanner-kcat", "beginning", 1000)
            time.sleep(3)

        ledger = world.admin("/ledger")
        if args.keep:
            with open(os.path.join(workdir, "ledger-gets.json"), "w") as f:
                json.dump(world.admin("/ledger?gets=1"), f, indent=1)
        truth = {(e["client_id"], e["topic"]): (e["bytes"], e["gets"], e["errors"])
                 for e in ledger["entries"]}
        seen = per_client(get_json(base + "/api/v1/clients")["sensors"])
        # With OpenSSL hooked, the object-store connections' own socket calls are counted, not
        # recorded (their plaintext comes from the probes); every other transport needs them.
        status = get_json(base + "/api/v1/status")
        skipped = status["tls_ciphertext_calls_skipped"]
        # A few client connections never find every gather slot of theirs busy (1,024 slots).
        if status["responses_not_gathered"] != 0:
            fail(f"{status['responses_not_gathered']} Kafka responses found no free gather slot")
        print(f"TLS connections' socket calls counted, not recorded: {skipped}")
        # Quiet fetches (capture.skip_quiet_fetches, on by default; sock variant): the tenants'
        # local fetches answered while the broker made no GET are left out, and the per-client
        # figures below must still equal the ledger.
        quiet = status["quiet_fetches"]
        sock = status["variant"] == "sock-tracepoints"
        print(f"quiet fetches: {quiet}")
        if quiet["enabled"] != sock or (quiet["left_out"] > 0) != sock:
            fail(f"quiet fetches {quiet} with the {status['variant']} variant")
        if not isinstance(quiet.get("pauses"), int) or (quiet["pauses"] > 0 and not sock):
            fail(f"quiet fetches {quiet}: no count of held requests' pauses")
        if args.session_tenant and sock:
            # A Java consumer whose positions do not move sends incremental fetches that list
            # nothing; answered locally with no GET in their window, they are left out too. The
            # other tenants have stopped, so no GET reports them: all but each connection's first
            # (the full request that opens its session) are left out.
            scan = next(t for t in world.admin("/topics") if t["name"] == "scan")
            part = min(scan["partitions"], key=lambda p: p["partition"])
            local = next(s["base_offset"] for s in part["segments"] if not s["remote"])
            run = subprocess.run([
                os.path.join(os.path.dirname(args.broker), "tiered-broker-load"),
                "--port", world.bootstrap.rsplit(":", 1)[1], "--topic", "scan",
                "--partition", str(part["partition"]), "--offset", str(local),
                "--max-bytes", "1024", "--connections", "2", "--rate", "200", "--seconds", "2",
                "--client-id", "sessions-java-local", "--incremental-sessions",
                "--sessions-unchanged"], capture_output=True, text=True, timeout=60)
            if run.returncode != 0:
                fail(f"tiered-broker-load failed: {run.stderr.strip()}")
            answered = json.loads(run.stdout.strip().splitlines()[-1])["responses"]
            time.sleep(2.5)  # fetchcostd reads the capture's counters about once a second
            left = get_json(base + "/api/v1/status")["quiet_fetches"]["left_out"] - quiet["left_out"]
            print(f"a Java-like tenant's unchanged incremental fetches: {left} of {answered} "
                  "left out")
            if answered < 100 or not 0.9 * (answered - 2) <= left <= answered:
                fail(f"{left} of the {answered} fetches of a Java-like tenant whose incremental "
                     "requests list nothing were left out: all but the 2 that open its sessions "
                     "should be")
        if args.wide_consumer and sock:
            # librdkafka fetches every partition it reads on a broker in one sessionless request:
            # 1,858 bytes for 64 partitions. The tenants have stopped, so no GET is in any of
            # its fetches' windows: they are all quiet, and all left out (held up to 4 KiB since
            # session 54; none were at 512 bytes). The broker counts the fetches it answers.
            fetches0 = world.admin("/stats")["fetches"]
            left0 = get_json(base + "/api/v1/status")["quiet_fetches"]["left_out"]
            run = subprocess.run(["timeout", "4", "kcat", "-C", "-q", "-b", world.bootstrap,
                                  "-t", "wide", "-o", "end", "-X", "client.id=wide-kcat",
                                  "-X", "fetch.wait.max.ms=100"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if run.returncode != 124:  # timeout's: kcat was still consuming
                fail(f"kcat on the 64-partition topic ended early ({run.returncode}): "
                     f"{run.stderr.strip()[-300:]}")
            fetches = world.admin("/stats")["fetches"] - fetches0
            time.sleep(2.5)  # fetchcostd reads the capture's counters about once a second
            left = get_json(base + "/api/v1/status")["quiet_fetches"]["left_out"] - left0
            print(f"a librdkafka consumer of 64 partitions: {left} of its {fetches} fetches "
                  "left out")
            # All are quiet; a few keep their records: one still waiting when kcat stops, and
            # any waiting when another request of its arrives on the connection (librdkafka
            # sends its metadata on the same one), which hands the fetch on.
            if fetches < 20 or not 0.8 * fetches <= left <= fetches:
                fail(f"{left} of the {fetches} fetches of a librdkafka consumer of 64 partitions "
                     "were left out: all are quiet")
        # Object-body reads that left bytes queued are folded into the next record (connections
        # without hooked TLS); small reads of whole responses must fold.
        folded_reads = status["folded_read_pieces"]
        print(f"pieces standing for folded object-body reads: {folded_reads}")
        if args.s3_read_bytes and args.transport != "openssl" and folded_reads == 0:
            fail(f"the broker read GET responses {args.s3_read_bytes} bytes at a time, yet no "
                 "object-body read was folded")
        # On the sock variant, the reads after the second folded in a row are folded by the CPU's
        # body hint, without the connection's state (GETs of chunks several reads long).
        by_hint = status["folded_by_hint"]
        print(f"object-body reads folded by a body hint: {by_hint}")
        if args.s3_read_bytes and args.transport != "openssl" and sock and by_hint == 0:
            fail(f"the broker read GET responses {args.s3_read_bytes} bytes at a time, yet no "
                 "read was folded by a body hint")
        # The simulator's own count of its reads: with the size prefix first, at least two per
        # request (the capture's side is the ledger check below).
        if args.read_size_prefix_first:
            broker = world.admin("/stats")
            print(f"the broker's plaintext reads: {broker['plaintext_reads']} for "
                  f"{broker['requests']} requests")
            if broker["plaintext_reads"] < 2 * broker["requests"]:
                fail("the broker did not read the requests' size prefixes first")
        if (skipped > 0) != (args.transport == "openssl"):
            fail(f"{skipped} socket calls of TLS-probed connections skipped with the "
                 f"{args.transport} transport")
        # What the capture lost or could not parse, to tell a failure's cause below.
        health = get_json(base + "/api/v1/status")
        print("capture health:", json.dumps({
            k: health.get(k) for k in ("drops", "object_store_http", "kafka_decoder",
                                       "attribution", "drain")} | {
            k: health["ring_reader"].get(k) for k in ("spool_peak_bytes", "pass_max_seconds")} | {
            # The simulator's remote reads that outlived their fetch (remote.fetch.max.wait.ms):
            # their GETs come after the answer.
            "broker_remote_read_timeouts": world.admin("/stats").get("remote_read_timeouts")}))
        print("ledger  ", json.dumps({f"{c}/{t}": v for (c, t), v in sorted(truth.items())}))
        print("fetchcost", json.dumps({f"{c}/{t}": v for (c, t), v in sorted(seen.items())}))
        if not truth or sum(v[0] for v in truth.values()) == 0:
            fail("the scenario made no remote reads: nothing was tested")
        if health["drops"]:  # holes no decoder can fill: the ledger check below would fail too
            fail(f"the ring buffers dropped {health['drops']} records (the ring reader's longest "
                 f"pass: {health['ring_reader']['pass_max_seconds']} s)")
        if args.transport in ("http", "openssl"):
            # The object-store exchanges fetchcostd parsed, against the simulator's GETs (its
            # uploads are requests too): every response found its request.
            http, ledger_gets = health["object_store_http"], sum(v[1] for v in truth.values())
            if min(http["requests"], http["responses"]) < ledger_gets or http["orphan_responses"]:
                fail(f"object-store exchanges {http} for the ledger's {ledger_gets} GETs")
        if args.session_tenant and truth.get(("sessions-java", "scan"), (0, 0, 0))[1] == 0:
            fail("the fetch-session tenant made no GET: nothing was tested")
        if args.wide_remote_consumer:
            gets = truth.get(("wider-kcat", "wider"), (0, 0, 0))[1]
            java_gets = truth.get(("wider-java", "wider-java"), (0, 0, 0))[1]
            print(f"consumers of 160 partitions: librdkafka {gets} GETs, Java-like {java_gets} "
                  "in the ledger")
            if gets < 160 or java_gets < 20:
                fail(f"the consumers of 160 partitions made {gets} and {java_gets} GETs: "
                     "nothing was tested")
            # Their requests were captured whole: none decoded with part of it missing.
            truncated = get_json(base + "/api/v1/status")["kafka_decoder"]["requests_truncated"]
            with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
                exported = [line for line in r.read().decode().splitlines()
                            if line.startswith("fetchcost_kafka_requests_truncated_total ")]
            if truncated != 0 or exported != ["fetchcost_kafka_requests_truncated_total 0"]:
                fail(f"Kafka requests decoded truncated: {truncated}, exported {exported}")
        if args.storage_errors and sum(v[2] for v in truth.values()) == 0:
            fail("no GET failed although a segment was deleted: nothing was tested")

        if args.replay_pair:
            # The pair's topic: no GET on the wrong one of the two (the one further on took the
            # other's, ranked oldest first); at 2,000 GETs/s a few may go unattributed.
            pair_gets = sum(v[1] for (c, t), v in truth.items() if t == "replay")
            if pair_gets < 1000:
                fail(f"the replay pair made {pair_gets} GETs: nothing was tested")
            for client in ("replay-first", "replay-last"):
                want, got = truth.get((client, "replay"), (0, 0, 0)), seen.get((client, "replay"), (0, 0, 0))
                if got[0] > want[0] or got[1] > want[1]:
                    fail(f"{client} has the other's GETs: {got} > the ledger's {want}")
            lost = seen.pop(("__unattributed__", "replay"), (0, 0, 0))[1]
            if lost > pair_gets / 1000:
                fail(f"{lost} of the replay pair's {pair_gets} GETs unattributed (more than 0.1%)")
            print(f"replay pair: no GET on the wrong client; {lost} of {pair_gets} unattributed")
            for key in [k for k in truth if k[1] == "replay"]:
                truth.pop(key)
                seen.pop(key, None)
        total_bytes = sum(v[0] for v in truth.values())
        if args.transport in ("http", "openssl"):
            if seen != truth:
                fail("per-client bytes/GETs/errors differ from the simulator's ledger")
        else:
            # Estimated bytes are the body bytes estimated from the ciphertext (TLS record overhead
            # and a typical response head taken off), so they never equal the ledger exactly.
            right = over = 0
            for key, (b, r, e) in seen.items():
                if key[0] == "__unattributed__":
                    continue
                if key not in truth:
                    fail(f"{key} got {b} bytes but made no remote read")
                right += min(b, truth[key][0])
                over += max(0, b - truth[key][0])
                if e > truth[key][2]:  # the status is invisible: failures must not be invented
                    fail(f"{key}: {e} errors reported, the ledger has {truth[key][2]}")
            share = right / total_bytes
            seen_total = sum(v[0] for v in seen.values())
            print(f"opaque: {share:.1%} of GET bytes on the right client, {over / total_bytes:.1%} "
                  f"more than the ledger on some client; fetchcost total {seen_total} vs ledger "
                  f"{total_bytes}")
            if share < args.min_share:
                fail(f"only {share:.1%} of GET bytes attributed to the right client "
                     f"(need {args.min_share:.0%})")
            if over > (1 - args.min_share) * total_bytes:  # the rest belongs under __unattributed__
                fail(f"{over} bytes ({over / total_bytes:.1%}) on clients beyond their ledger share")

        if args.prometheus:
            time.sleep(3)  # two more scrapes
            by_client = promql(prom_base, "sum by (client_id) (kafka_server_remote_fetch_bytes_total)")
            want = {}
            for (c, t), (b, r, e) in truth.items():
                want[c] = want.get(c, 0) + b
            for c, b in want.items():
                if by_client.get(c) != b:
                    fail(f"PromQL bytes for {c}: {by_client.get(c)} != ledger {b}")
            # The KIP's queries. increase()/rate() need two samples of a series, so a client
            # whose reads all fell between two scrapes shows 0 there; the scanner replays all run.
            window = promql(prom_base, "sum by (client_id) (increase(kafka_server_remote_fetch_bytes_total[10m]))")
            per_req = promql(prom_base, "sum by (client_id) (kafka_server_remote_fetch_bytes_total) / "
                                        "sum by (client_id) (kafka_server_remote_fetch_requests_total)")
            hourly = promql(prom_base, "sum by (client_id) (rate(fetchcost_remote_fetch_cost_total[10m])) * 3600")
            for c, b in want.items():
                gets = sum(v[1] for (cc, t), v in truth.items() if cc == c)
                if not (0 <= window.get(c, 0) <= 1.5 * b):
                    fail(f"increase() for {c}: {window.get(c)} vs ledger total {b}")
                if gets and abs(per_req.get(c, 0) - b / gets) > 1e-6 * b / gets:
                    fail(f"bytes per GET for {c}: {per_req.get(c)} vs ledger {b / gets}")
                if hourly.get(c, 0) < 0:
                    fail(f"negative hourly cost for {c}")
            if window.get("scanner-kcat", 0) <= 0 or hourly.get("scanner-kcat", 0) <= 0:
                fail(f"the scanner's window increase / hourly cost is not positive: {window} {hourly}")
            print("prometheus: bytes by client, increase over a window, bytes per GET and hourly "
                  "cost agree with the ledger")

            # The programs' own cost (capture.program_stats), against the kernel's counters as
            # bpftool reads them for the programs fetchcostd holds. The tenants have stopped, so
            # the counters barely move in the second between fetchcostd's reads and bpftool's.
            cores = promql_total(prom_base, "sum(rate(fetchcost_bpf_program_run_seconds_total[5m]))")
            per_run = promql_total(
                prom_base, "sum(rate(fetchcost_bpf_program_run_seconds_total[5m])) "
                           "/ sum(rate(fetchcost_bpf_program_runs_total[5m]))")
            exported_s = promql_total(prom_base, "sum(fetchcost_bpf_program_run_seconds_total)")
            exported_runs = promql_total(prom_base, "sum(fetchcost_bpf_program_runs_total)")
            kernel_ns, kernel_runs = kernel_program_totals(fc.pid)
            print(f"program stats: {cores * 1e3:.2f} ms/s of CPU in the programs, "
                  f"{per_run * 1e9:.0f} ns per run; exported {exported_s:.4f} s in "
                  f"{exported_runs:.0f} runs, bpftool {kernel_ns / 1e9:.4f} s in {kernel_runs} runs")
            if not (cores > 0 and 10e-9 <= per_run <= 20e-6):
                fail(f"the programs' cost: {cores} cores, {per_run} s per run")
            if not (0.8 * kernel_runs <= exported_runs <= kernel_runs and kernel_runs > 0):
                fail(f"runs exported {exported_runs}, the kernel counted {kernel_runs}")
            if not (0.8 * kernel_ns / 1e9 <= exported_s <= kernel_ns / 1e9):
                fail(f"run time exported {exported_s} s, the kernel counted {kernel_ns / 1e9} s")

        metrics = urllib.request.urlopen(base + "/metrics").read().decode()
        for name in ("kafka_server_remote_fetch_bytes_total", "kafka_server_remote_fetch_requests_total",
                     "kafka_server_remote_fetch_latency_seconds_bucket", "fetchcost_remote_fetch_cost_total",
                     "fetchcost_client_group_info", "fetchcost_ring_drops_total",
                     "fetchcost_spool_bytes", "fetchcost_spool_peak_bytes"):
            if name not in metrics:
                fail(f"{name} missing from /metrics")
        print("PASS")
    finally:
        scenario.stop_process(fc)
        scenario.stop_group(prom)
        world.stop()
        scenario.remove_workdir(workdir, args.keep)


if __name__ == "__main__":
    main()
