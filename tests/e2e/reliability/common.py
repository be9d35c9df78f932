"""Helpers shared by the reliability e2e scripts: fetchcostd on a tools/scenario World, the
simulator's ledger as ground truth, hand-encoded Kafka requests (independent of fetchcost's own
decoder), and the check/report conventions of the other e2e tests."""
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request
from importlib.machinery import SourceFileLoader

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
scenario = SourceFileLoader("scenario", os.path.join(REPO, "tools", "scenario")).load_module()

failures = []
T0 = time.time()


def check(cond, what):
    print(f"[{time.time() - T0:6.1f}s] " + ("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def require_root():
    if os.geteuid() != 0:
        if os.environ.get("CI") == "true":
            print("FAIL: needs root (CI=true: no skipping)")
            sys.exit(1)
        print("SKIP: needs root")
        sys.exit(77)


free_port = scenario.free_port


def http(url, data=None, timeout=10):
    req = urllib.request.Request(url, data=data.encode() if data else None,
                                 method="POST" if data else "GET")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read().decode("utf-8", errors="replace")


get_json = scenario.get_json


def wait_until(pred, timeout=20, step=0.1):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if pred():
                return True
        except Exception:
            pass
        time.sleep(step)
    return False


def metric_values(text, name):
    """{labels-string: value} of one metric family's samples in Prometheus text."""
    out = {}
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            head, value = line.rsplit(" ", 1)
            out[head[len(name):]] = float(value)
    return out


class Fetchcostd:
    """One fetchcostd with its own config, port, state dir and log."""

    def __init__(self, binary, workdir, name, config, extra_args=()):
        self.binary, self.workdir, self.name = binary, workdir, name
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.config_path = os.path.join(workdir, f"{name}.json")
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.config = {"listen": f"127.0.0.1:{self.port}",
                       "state_dir": os.path.join(workdir, f"{name}-state")}
        self.config.update(config)
        self.extra_args = list(extra_args)
        self.proc = None
        self.write_config()

    def write_config(self, **changes):
        c = dict(self.config)
        c.update(changes)
        with open(self.config_path, "w") as f:
            json.dump(c, f)

    def start(self, wait_ready=True):
        self.proc = subprocess.Popen([self.binary, "--config", self.config_path] + self.extra_args,
                                     stdout=open(self.log_path + ".out", "a"),
                                     stderr=open(self.log_path, "a"), start_new_session=True)
        if wait_ready and not wait_until(lambda: self.ready(), 30):
            raise RuntimeError(f"{self.name} did not become ready: " + self.log_tail())
        return self

    def ready(self):
        if self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited ({self.proc.returncode}): " + self.log_tail())
        try:
            with urllib.request.urlopen(self.base + "/readyz", timeout=1):
                return True
        except Exception:
            return False

    def log_tail(self, n=3000):
        try:
            return open(self.log_path, errors="replace").read()[-n:]
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def metrics(self):
        return http(self.base + "/metrics")

    def status(self):
        return get_json(self.base + "/api/v1/status")

    def clients(self):
        """{client_id: (bytes, requests, errors)} summed over topics."""
        out = {}
        for s in get_json(self.base + "/api/v1/clients")["sensors"]:
            b, r, e = out.get(s["client_id"], (0, 0, 0))
            out[s["client_id"]] = (b + s["bytes"], r + s["requests"], e + s["errors"])
        return out

    def report(self):
        """{client_id: (bytes, requests, errors)} from the persisted chargeback ledger."""
        out = {}
        for r in get_json(self.base + "/api/v1/report")["buckets"]:
            b, q, e = out.get(r["client_id"], (0, 0, 0))
            out[r["client_id"]] = (b + r["bytes"], q + r["requests"], e + r["errors"])
        return out

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode if self.proc else None


def ledger_by_client(ledger):
    out = {}
    for e in ledger["entries"]:
        b, g, r = out.get(e["client_id"], (0, 0, 0))
        out[e["client_id"]] = (b + e["bytes"], g + e["gets"], r + e["errors"])
    return out


def settle(fc, world, clients, timeout=60, steady=1.0):
    """Waits until the broker has no remote read in flight and fetchcostd's figures for `clients`
    equal the ledger's, both unchanged for `steady` s (or the timeout); returns (truth, seen).
    The ledger records a remote read task when the whole task ends, while fetchcostd counts each
    GET as it completes, and a consumer that has exited may leave a prefetch the broker still
    serves: equal figures mid-task (CI: fetchcostd ahead for > 20 s, or both at 60 of 65 GETs)
    are not the end."""
    truth, seen = {}, {}

    def same():
        nonlocal truth, seen
        ledger = world.admin("/ledger")
        queued = world.admin("/stats")["remote_reads"]
        idle = queued == sum(e["remote_reads"] for e in ledger["entries"])
        led = ledger_by_client(ledger)
        truth = {c: led.get(c, (0, 0, 0)) for c in clients}
        got = fc.clients()
        seen = {c: got.get(c, (0, 0, 0)) for c in clients}
        return idle and truth == seen

    deadline = time.time() + timeout
    steady_since = None
    while time.time() < deadline:
        try:
            ok = same()
        except Exception:
            ok = False
        if not ok:
            steady_since = None
        elif steady_since is None:
            steady_since = time.time()
        elif time.time() - steady_since >= steady:
            break
        time.sleep(0.25)
    return truth, seen


# ---- hand-encoded Kafka requests (the simulator's wire, not fetchcost's decoder) ----

def kstr(s):
    b = s if isinstance(s, bytes) else s.encode()
    return struct.pack(">h", len(b)) + b


def fetch_v4(client_id, topic, partition, offset, corr=1, max_bytes=65536):
    body = struct.pack(">hhi", 1, 4, corr) + kstr(client_id)
    body += struct.pack(">iiiib", -1, 100, 1, max_bytes, 0)
    body += struct.pack(">i", 1) + kstr(topic) + struct.pack(">i", 1)
    body += struct.pack(">iqi", partition, offset, max_bytes)
    return struct.pack(">i", len(body)) + body


def metadata_v1(client_id, corr=1):
    body = struct.pack(">hhi", 3, 1, corr) + kstr(client_id) + struct.pack(">i", -1)
    return struct.pack(">i", len(body)) + body


def read_frame(sock):
    def exactly(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf
    size = struct.unpack(">i", exactly(4))[0]
    return exactly(size)


def fetch_once(port, client_id, topic, partition, offset, timeout=15):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(fetch_v4(client_id, topic, partition, offset))
        return read_frame(s)
    finally:
        s.close()


def remote_offset(world, topic="scan", partition=0):
    """An offset only in the remote tier (below the local log start)."""
    for t in world.admin("/topics"):
        if t["name"] == topic:
            p = t["partitions"][partition]
            return p["log_start_offset"], p["local_log_start_offset"]
    raise RuntimeError("no topic " + topic)


def finish(workdir, keep):
    import shutil
    if failures:
        print(f"{len(failures)} checks failed: {failures}; logs in {workdir}")
        sys.exit(1)
    if not keep:
        shutil.rmtree(workdir, ignore_errors=True)
    print("PASS")
