#!/usr/bin/python3
"""Unit test of bench_broker's verdicts: the interval it puts around a median of per-pair ratios
covers the true median as often as it says (checked against samples of a known distribution),
and a target is judged met, missed or not resolved from that interval. Also its perf split by
source line: a sample's address mapped to the line it was at or called from."""
import importlib.machinery
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
bench = importlib.machinery.SourceFileLoader("bench_broker", os.path.join(HERE, "run")).load_module()

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


# Too few pairs for a 95% interval: 5 pairs put the median outside [min, max] 6.25% of the time.
low, high = bench.median_interval([1.0, 1.1, 0.9, 1.2, 1.05])
check(math.isnan(low) and math.isnan(high), "5 pairs: no interval")
check(bench.median_interval([3, 1, 2, 6, 5, 4]) == (1, 6), "6 pairs: the smallest to the largest")
check(bench.median_interval(list(range(21, 0, -1))) == (6, 16), "21 pairs: 6th to 16th smallest")

# Coverage: pairs drawn from an exponential distribution (skewed, as per-pair CPU ratios under
# a noisy neighbour are), whose median is ln 2. The interval must hold it in at least 95% of
# runs; with 10 pairs the order statistics chosen hold it 97.9% of the time, so more than 99.5%
# would mean the interval is wider than it needs to be.
rng = random.Random(20261202)
for pairs in (6, 10, 21):
    trials = 4000
    held = 0
    for _ in range(trials):
        lo, hi = bench.median_interval([rng.expovariate(1.0) for _ in range(pairs)])
        held += lo <= math.log(2) <= hi
    rate = held / trials
    check(0.95 <= rate <= (0.995 if pairs != 6 else 1.0),
          f"{pairs} pairs: the interval holds the true median in {100 * rate:.1f}% of runs")

check(bench.verdict(0.005, 0.015, 0.02) == "met", "interval within the limit: met")
check(bench.verdict(0.03, 0.05, 0.02) == "MISSED", "interval beyond the limit: missed")
check(bench.verdict(0.01, 0.03, 0.02) == "not resolved by this run", "interval across: not resolved")
check(bench.verdict(float("nan"), float("nan"), 0.02).startswith("not resolved"),
      "no interval: not resolved")

# One figure of a pair of rounds: per-pair ratios and differences, not ratios of medians.
rounds_a = [{"cpu": x} for x in (10, 20, 30, 40, 50, 60)]
rounds_b = [{"cpu": x * 1.1 + 1} for x in (10, 20, 30, 40, 50, 60)]
f, ratios = bench.pair_figure(rounds_a, rounds_b, "cpu")
check(f.a == 35 and abs(f.b - 39.5) < 1e-9, "pair figure: the rounds' medians")
check(abs(f.ratio - (1.1 + 1 / 40 + 1.1 + 1 / 30) / 2) < 1e-9 and (f.ratio_low, f.ratio_high) == (min(ratios), max(ratios)),
      "pair figure: the median of per-pair B/A, 6 pairs' interval their min..max")
check(abs(f.added - 4.5) < 1e-9 and abs(f.added_low - 2) < 1e-9 and abs(f.added_high - 7) < 1e-9,
      "pair figure: the median of per-pair B−A and its interval")
f, ratios = bench.pair_figure([{"cpu": 0}] * 6, rounds_b, "cpu")
check(ratios == [float("nan")] or all(math.isnan(r) for r in ratios),
      "pair figure: rounds with nothing measured in A give no ratio, not a division by zero")

# The perf split by source line: a program's line table (JIT address, program, line, text), as
# jit_images reads it from the kernel, and samples' frames innermost first.
lines = [(0x1000, "sock_send_length", 10, "a();"), (0x1010, "sock_send_length", 11, "b();"),
         (0x1020, "sock_send_length", 12, "submit();"), (0x2000, "sock_recv_length", 40, "c();")]
site = bench.call_site(["bpf_prog_x_sock_send_length"], [0x1014], lines)
check(site == ("sock_send_length", 11, "b();"), "a sample in program code: its own line")
site = bench.call_site(["__bpf_ringbuf_reserve", "bpf_ringbuf_output", "bpf_prog_x_sock_send_length"],
                       [0xffff0000, 0xffff0100, 0x1020], lines)
check(site == ("sock_send_length", 11, "b();"),
      "a sample in a helper: the line of its call (the return address less one), not the next")
site = bench.call_site(["bpf_prog_y_sock_recv_length"], [0x2008], lines)
check(site == ("sock_recv_length", 40, "c();"), "another program's image: its own lines")
check(bench.call_site(["bpf_trace_run3", "__traceiter_sock_recv_length"], [1, 2], lines) is None,
      "the tracepoint's dispatch: no program frame, no line")
check(bench.call_site(["bpf_prog_x_sock_send_length"], [0x1014], []) is None,
      "no line info (an older kernel): no line")

# Rates from fetchcostd's status divide by the time between its two readings of the counters
# (refreshed about once a second), not by the round's: a round of 5.03 s whose two readings are
# 4.0 s apart saw 4.0 s of events.
st0 = {"events": 1000, "counters_read_unix_ns": 1_000_000_000_000}
st1 = {"events": 21000, "counters_read_unix_ns": 1_004_000_000_000}
check(bench.status_seconds(st0, st1, 5.03) == 4.0, "status rates: the readings' own 4.0 s")
check(bench.status_seconds({"events": 0}, {"events": 5}, 5.03) == 5.03,
      "status rates: a build that does not say falls back to the round's time")
check(bench.status_seconds(st0, dict(st0), 5.03) == 5.03,
      "status rates: readings that did not move fall back to the round's time")

# --bpf-together: the order of attachment alternates, and the build attached second runs on lines
# the first left warm. Two rounds in a row carry that once each way: their geometric mean.
check(bench.order_neutral_ratios([0.8, 1.25, 0.5, 2.0]) == [1.0, 1.0],
      "bpf-together: an order effect of 1.25 and 2 cancels in each pair of rounds")
got = bench.order_neutral_ratios([0.9, 1.6, 1.1])
check(len(got) == 1 and abs(got[0] - 1.2) < 1e-12, "bpf-together: a last unpaired round is left out")
got = bench.order_neutral_ratios([float("nan"), 1.2, 0.9, 1.6])
check(len(got) == 1 and abs(got[0] - 1.2) < 1e-12, "bpf-together: a pair with a nan is left out")
# Simulated rounds: a true B/A of 1.08, the second attached 25% cheaper, 3% noise per round. The
# per-round ratios' median lands on one order's side; the pairs' median on the truth.
rng = random.Random(20261205)
rounds = [1.08 * (0.75 if i % 2 == 0 else 1 / 0.75) * math.exp(rng.gauss(0, 0.03))
          for i in range(16)]
neutral = bench.order_neutral_ratios(rounds)
lo, hi = bench.median_interval(neutral)
check(len(neutral) == 8 and lo <= 1.08 <= hi and hi - lo < 0.1,
      f"bpf-together: 16 simulated rounds give 1.08 within {lo:.3f}..{hi:.3f}")

# --hooks-interleave: slices A H H A, each (hooks on, broker CPU ns, fetches, seconds). In the
# first pair A spends 50,000 ns on 1,000 fetches and H 52,000 on 980 (4% more CPU, 2% fewer
# fetches in the same time); in the second the host is 10% slower for both (55,000 and 57,200).
# Each pair's H/A is the same whichever comes first; a slice with no fetches leaves its pair out.
S = bench.Slice
slices = [S(False, 50_000, 1000, 0.25), S(True, 52_000, 980, 0.25), S(True, 57_200, 980, 0.25),
          S(False, 55_000, 1000, 0.25), S(False, 50_000, 0, 0.25), S(True, 52_000, 1000, 0.25)]
ratios = bench.interleaved_ratios(slices)
check(len(ratios) == 2 and all(abs(r - 1.04 * 1000 / 980) < 1e-12 for r in ratios),
      f"interleaved slices: H/A from (A H) and from (H A), the empty pair left out: {ratios}")
rates = bench.interleaved_ratios(slices, bench.fetch_rate)
check(len(rates) == 2 and all(abs(r - 0.98) < 1e-12 for r in rates),
      f"interleaved slices: fetches/s H/A 0.98 in both pairs: {rates}")
h = bench.pooled(slices, True)
check(h == S(True, 161_200, 2960, 0.75) and abs(bench.cpu_per_fetch(h) - 161.2 / 2960) < 1e-12,
      "interleaved slices: the slices with the hooks on pooled")

# --twin: broker 1 costs 1.2 times broker 0 on its own (a = 1.2), fetchcostd adds 3% to the one
# it watches, broker 0 in round 0 and broker 1 in round 1; broker 0's base is 10 µs per fetch.
unwatched = [12.0, 10.0]  # round 0: broker 1 unwatched; round 1: broker 0
watched = [10.3, 12.36]   # round 0: broker 0 watched;   round 1: broker 1
ratios, diffs = bench.twin_pairs(unwatched, watched)
check(len(ratios) == 1 and abs(ratios[0] - 1.03) < 1e-12,
      f"twin rounds: the brokers' own difference cancels, 1.03 left: {ratios}")
check(len(diffs) == 1 and abs(diffs[0] - 0.33) < 1e-12,
      f"twin rounds: the added µs, 3% of the brokers' mean 11 µs: {diffs}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all checks passed")
