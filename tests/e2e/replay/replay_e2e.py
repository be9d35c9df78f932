#!/usr/bin/python3
"""`fetchcost replay` end to end: dumpcap records the loopback traffic of tiered-broker (its
Kafka listener and its S3 connections) while real clients read remote data; replaying the pcap
with the broker's log dirs must attribute exactly what the simulator's ledger says.
Needs root (capturing on lo)."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib.machinery import SourceFileLoader

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
scenario = SourceFileLoader("scenario", os.path.join(REPO, "tools", "scenario")).load_module()


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--fetchcost", required=True)
    ap.add_argument("--broker", required=True)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--save-pcap", help="copy the capture here (with a .json of its ports and log "
                                        "dirs copy) for tests/bench/pipeline")
    args = ap.parse_args()
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            fail("capturing on lo needs root (CI=true: no skipping)")
        print("SKIP: needs root")
        sys.exit(77)
    workdir = tempfile.mkdtemp(prefix="fc-replay-")
    # No producing: the log dirs replay reads afterwards are the ones the fetches saw.
    world = scenario.World(workdir, broker_bin=args.broker, produce_interval_ms=0)
    cap = None
    try:
        world.start()
        kafka_port = int(world.info["broker"]["bootstrap"].rsplit(":", 1)[1])
        s3_port = world.info["s3"]["port"]
        pcap = os.path.join(workdir, "broker.pcap")
        cap = subprocess.Popen(["dumpcap", "-q", "-i", "lo", "-s", "0", "-w", pcap, "-f",
                                f"tcp port {kafka_port} or tcp port {s3_port}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # dumpcap says "Capturing on 'Loopback: lo'" once packets are being recorded.
        deadline = time.time() + 30
        while time.time() < deadline:
            line = cap.stderr.readline()
            if not line or "Capturing on" in line:
                break
        if cap.poll() is not None:
            fail("dumpcap did not start")
        time.sleep(0.5)
        bs = world.bootstrap
        clients = [
            ["kcat", "-C", "-q", "-b", bs, "-t", "scan", "-o", "beginning", "-e", "-X",
             "client.id=replay-kcat", "-f", "%o\\n"],
            [scenario.CONSUME_PY, "--bootstrap", bs, "--topic", "scan", "--client-id",
             "replay-python", "--from", "earliest", "--value-size", "1000"],
        ]
        procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for c in clients]
        for p in procs:
            try:
                p.wait(timeout=150)
            except subprocess.TimeoutExpired:
                p.kill()
                fail(f"client {p.args[0]} did not finish")
        time.sleep(1)
        cap.send_signal(signal.SIGTERM)
        cap.wait(timeout=10)
        ledger = world.admin("/ledger")
        truth = {(e["client_id"], e["topic"]): (e["bytes"], e["gets"], e["errors"])
                 for e in ledger["entries"]}
        if not truth:
            fail("no remote reads happened: nothing to compare")
        if args.save_pcap:
            shutil.copy(pcap, args.save_pcap)
            shutil.copytree(world.info["broker"]["log_dirs"], args.save_pcap + ".logs",
                            dirs_exist_ok=True)
            with open(args.save_pcap + ".json", "w") as f:
                json.dump({"kafka_port": kafka_port, "object_store_port": s3_port,
                           "log_dirs": args.save_pcap + ".logs"}, f)
        out = subprocess.run([args.fetchcost, "replay", "--pcap", pcap, "--log-dirs",
                              world.info["broker"]["log_dirs"], "--kafka-port", str(kafka_port),
                              "--object-store-port", str(s3_port)],
                             capture_output=True, text=True, timeout=120)
        print(out.stderr.strip())
        if out.returncode != 0:
            fail(f"replay exited {out.returncode}")
        seen = {}
        for line in out.stdout.splitlines():
            r = json.loads(line)
            k = (r["client_id"], r["topic"])
            b, g, e = seen.get(k, (0, 0, 0))
            seen[k] = (b + r["bytes"], g + r["requests"], e + r["errors"])
        print("ledger", sorted(truth.items()))
        print("replay", sorted(seen.items()))
        # Totals are exact: every GET, byte and error of the capture is accounted for.
        for i, what in enumerate(("bytes", "GETs", "errors")):
            if sum(v[i] for v in seen.values()) != sum(v[i] for v in truth.values()):
                fail(f"total {what} differ from the ledger")
        # A pcap names no threads: a pooled S3 connection that passes from one reader to another
        # can move a GET between two clients reading the same segment at the same moment, so
        # per client the bar is 95% of the bytes (live capture, with thread ids, is exact).
        right = sum(min(b, truth.get(k, (0, 0, 0))[0]) for k, (b, g, e) in seen.items())
        share = right / sum(v[0] for v in truth.values())
        print(f"replay: {share:.2%} of GET bytes on the right client")
        if share < 0.95:
            fail(f"only {share:.2%} of the bytes on the right client")
        # No GET may go to a client that made none. One the pcap's timing cannot place (no fetch
        # of its partition pending when it started, such as a task's next chunk read on another
        # pooled connection after its fetch was answered: a live capture ties it by thread) may
        # stay unattributed, inside the 5% above (CI saw 1 of 160 GETs, 2,081 bytes, once).
        for k in seen:
            if k not in truth and k[0] != "__unattributed__":
                fail(f"{k} has bytes but made no remote read")
        unplaced = sum(g for k, (b, g, e) in seen.items() if k[0] == "__unattributed__")
        if unplaced > 0.05 * sum(v[1] for v in truth.values()):
            fail(f"{unplaced} GETs unattributed")
        print("PASS")
    finally:
        if cap and cap.poll() is None:
            cap.kill()
        world.stop()
        if args.keep:
            print("kept", workdir)
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
