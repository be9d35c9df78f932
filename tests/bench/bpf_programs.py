"""The BPF programs a benchmark's fetchcostd holds: their run-time statistics (shared by the
benchmarks under tests/bench that read them)."""
import ctypes
import json
import os
import subprocess

SYS_BPF = 321  # x86-64


class BpfStats:
    """BPF_ENABLE_STATS(BPF_STATS_RUN_TIME): run-time statistics while the returned fd is open
    (reference counted by the kernel, so it does not fight other users of kernel.bpf_stats_enabled)."""

    def __init__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        attr = ctypes.create_string_buffer(128)  # union bpf_attr: enable_stats.type = 0 (RUN_TIME)
        fd = libc.syscall(SYS_BPF, 32, attr, 128)  # BPF_ENABLE_STATS
        if fd < 0:
            raise OSError(ctypes.get_errno(), "BPF_ENABLE_STATS failed")
        self.fd = fd

    def close(self):
        os.close(self.fd)


def bpf_programs(pid):
    """{prog_id: (run_time_ns, run_cnt)} for every BPF program fd process `pid` holds."""
    progs = {}
    d = f"/proc/{pid}/fdinfo"
    for fd in os.listdir(d):
        try:
            info = dict(line.split(":", 1) for line in open(os.path.join(d, fd)) if ":" in line)
        except OSError:
            continue
        if "prog_id" in info and "run_time_ns" in info:
            progs[int(info["prog_id"])] = (int(info["run_time_ns"]), int(info["run_cnt"]))
    return progs


def prog_name(prog_id, cache={}):
    if prog_id not in cache:
        out = subprocess.run(["bpftool", "prog", "show", "id", str(prog_id), "-j"],
                             capture_output=True, text=True).stdout
        try:
            cache[prog_id] = json.loads(out).get("name", str(prog_id))
        except json.JSONDecodeError:
            cache[prog_id] = str(prog_id)
    return cache[prog_id]
