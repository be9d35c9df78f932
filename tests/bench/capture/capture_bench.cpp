// Capture benchmark: prints figures for docs/performance.md ("Capture (BPF)"); not a pass/fail
// test. Needs root.
//  1. BPF run time per event from the kernel's own statistics (BPF_ENABLE_STATS, run_time_ns /
//     run_cnt of each program): a process that is not a target, and a target at 256 B and 4 KiB
//     per call (everything copied), for both capture variants.
//  2. Loopback TCP throughput at 64 KiB writes without and with the capture attached (target
//     watched, ring buffers drained), alternated A B A B in the same run; medians and ratio.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "capture/capture.h"

namespace {

using Clock = std::chrono::steady_clock;
using fc::capture::Variant;

// A child that runs `work` when told and reports one number back.
struct Child {
  pid_t pid = -1;
  int go = -1, back = -1;
  template <typename F>
  explicit Child(F work) {
    int g[2], b[2];
    if (pipe(g) != 0 || pipe(b) != 0) std::abort();
    pid = fork();
    if (pid == 0) {
      close(g[1]);
      close(b[0]);
      char c;
      if (read(g[0], &c, 1) != 1) _exit(1);
      std::pair<double, double> v = work();
      if (write(b[1], &v, sizeof(v)) != sizeof(v)) _exit(2);
      _exit(0);
    }
    close(g[0]);
    close(b[1]);
    go = g[1];
    back = b[0];
  }
  void start() {
    char c = 'g';
    if (write(go, &c, 1) != 1) std::abort();
  }
  bool done() {
    pollfd p{back, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
  // The child's two figures, and the CPU time (user + system) it used, BPF programs included.
  std::pair<double, double> result(double* cpu_seconds = nullptr) {
    std::pair<double, double> v;
    if (read(back, &v, sizeof(v)) != sizeof(v)) std::abort();
    struct rusage ru {};
    wait4(pid, nullptr, 0, &ru);
    if (cpu_seconds)
      *cpu_seconds = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                     static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    close(go);
    close(back);
    return v;
  }
};

struct Pair {
  int client = -1, server = -1;
};
Pair loopback_pair() {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(l, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(l, 1) != 0) std::abort();
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  Pair p;
  p.client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(p.client, reinterpret_cast<sockaddr*>(&a), len) != 0) std::abort();
  p.server = accept(l, nullptr, nullptr);
  close(l);
  return p;
}

// `calls` writes of `size` bytes, each read back with reads of `size` bytes.
std::pair<double, double> ping_writes(std::size_t size, int calls) {
  Pair p = loopback_pair();
  std::vector<char> buf(size, 'x'), in(size);
  for (int i = 0; i < calls; ++i) {
    if (write(p.client, buf.data(), size) != static_cast<ssize_t>(size)) return {-1, 0};
    std::size_t got = 0;
    while (got < size) {
      ssize_t n = read(p.server, in.data() + got, size - got);
      if (n <= 0) return {-1, 0};
      got += static_cast<std::size_t>(n);
    }
  }
  return {calls, 0};
}

// Bytes moved and wall seconds: 64 KiB writes from one thread, reads on another.
std::pair<double, double> stream_throughput(double seconds) {
  Pair p = loopback_pair();
  constexpr std::size_t kChunk = 64 * 1024;
  std::thread reader([&] {
    std::vector<char> in(kChunk);
    while (read(p.server, in.data(), in.size()) > 0) {
    }
  });
  std::vector<char> buf(kChunk, 'y');
  std::uint64_t sent = 0;
  const auto start = Clock::now();
  const auto end = start + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    ssize_t n = write(p.client, buf.data(), buf.size());
    if (n <= 0) break;
    sent += static_cast<std::uint64_t>(n);
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  shutdown(p.client, SHUT_WR);
  reader.join();
  return {static_cast<double>(sent), elapsed};
}

std::map<std::string, fc::capture::ProgramStatus> program_stats(const fc::capture::Capture& c) {
  std::map<std::string, fc::capture::ProgramStatus> m;
  for (const auto& p : c.status().programs) m[p.name] = p;
  return m;
}

// Runs a child workload (target or not) and returns per-program ns/run over that window.
std::map<std::string, std::pair<double, std::uint64_t>> measure(fc::capture::Capture& cap,
                                                                bool target, std::size_t size,
                                                                int calls) {
  Child child([=] { return ping_writes(size, calls); });
  if (target && !cap.add_target(child.pid).ok()) std::abort();
  const auto before = program_stats(cap);
  child.start();
  while (!child.done()) (void)cap.poll(5);
  child.result();
  (void)cap.poll(0);
  const auto after = program_stats(cap);
  if (target) cap.remove_target(child.pid);
  std::map<std::string, std::pair<double, std::uint64_t>> out;
  for (const auto& [name, a] : after) {
    const auto& b = before.at(name);
    const std::uint64_t runs = a.run_count - b.run_count;
    if (runs == 0) continue;
    out[name] = {static_cast<double>(a.run_time_ns - b.run_time_ns) / static_cast<double>(runs),
                 runs};
  }
  return out;
}

void print_runtime(Variant variant) {
  std::uint64_t delivered = 0;
  fc::capture::Options options;
  options.variant = variant;
  options.ring_bytes_per_cpu = 8 << 20;
  options.default_policy = {4096, 4096, FC_ROLE_OTHER};
  options.tls = false;
  auto cap =
      fc::capture::Capture::open(options, [&](const fc::capture::EventView&) { ++delivered; });
  if (!cap) {
    std::fprintf(stderr, "capture_bench: %s\n", cap.error().message.c_str());
    std::exit(1);
  }
  const bool sock = variant == Variant::kSockTracepoints;
  const std::vector<std::string> send_progs =
      sock ? std::vector<std::string>{"sock_send_length"}
           : std::vector<std::string>{"sc_enter_write", "sc_exit_write"};
  const std::vector<std::string> recv_progs =
      sock ? std::vector<std::string>{"sock_recv_length"}
           : std::vector<std::string>{"sc_enter_read", "sc_exit_read"};
  struct Case {
    const char* label;
    bool target;
    std::size_t size;
  } cases[] = {{"non-target, 64 B", false, 64},
               {"target, 256 B captured", true, 256},
               {"target, 4 KiB captured", true, 4096}};
  constexpr int kCalls = 100000;
  for (const auto& c : cases) {
    auto r = measure(**cap, c.target, c.size, kCalls);
    auto sum = [&](const std::vector<std::string>& names) {
      double ns = 0;
      std::uint64_t runs = 0;
      for (const auto& n : names)
        if (r.count(n)) {
          ns += r[n].first;  // per-syscall cost: enter + exit on the fallback
          runs = std::max(runs, r[n].second);
        }
      return std::pair{ns, runs};
    };
    auto [send_ns, send_runs] = sum(send_progs);
    auto [recv_ns, recv_runs] = sum(recv_progs);
    std::printf("  %-20s %-26s send %7.1f ns/event (%llu runs)   recv %7.1f ns/event (%llu runs)\n",
                fc::capture::variant_name(variant), c.label, send_ns,
                static_cast<unsigned long long>(send_runs), recv_ns,
                static_cast<unsigned long long>(recv_runs));
  }
  const auto totals = (*cap)->totals();
  std::printf("  %-20s records %llu, drops %llu\n", fc::capture::variant_name(variant),
              static_cast<unsigned long long>(totals.events),
              static_cast<unsigned long long>(totals.drops));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

void print_throughput(int rounds, double seconds, std::uint32_t cap_bytes, bool target) {
  std::vector<double> without, with, eff_without, eff_with;
  std::uint64_t delivered = 0, drops = 0;
  for (int round = 0; round < rounds; ++round) {
    for (int attached = 0; attached < 2; ++attached) {
      std::unique_ptr<fc::capture::Capture> cap;
      if (attached) {
        fc::capture::Options options;
        options.ring_bytes_per_cpu = 8 << 20;
        options.default_policy = {cap_bytes, cap_bytes, FC_ROLE_OTHER};
        options.tls = false;
        auto opened = fc::capture::Capture::open(
            options, [&](const fc::capture::EventView&) { ++delivered; });
        if (!opened) {
          std::fprintf(stderr, "capture_bench: %s\n", opened.error().message.c_str());
          std::exit(1);
        }
        cap = std::move(opened.value());
      }
      Child child([=] { return stream_throughput(seconds); });
      if (cap && target && !cap->add_target(child.pid).ok()) std::abort();
      const double drain_cpu0 = process_cpu_seconds();
      std::map<std::string, fc::capture::ProgramStatus> before;
      if (cap) before = program_stats(*cap);
      child.start();
      while (!child.done()) {
        if (cap)
          (void)cap->poll(10);
        else
          usleep(10000);
      }
      double child_cpu = 0;
      const auto [bytes, elapsed] = child.result(&child_cpu);
      std::string prog_costs;
      if (cap) {
        (void)cap->poll(0);
        drops += cap->totals().drops;
        for (const auto& [name, a] : program_stats(*cap)) {
          const auto& b = before[name];
          if (a.run_count == b.run_count || a.run_time_ns == 0) continue;
          char line[128];
          std::snprintf(line, sizeof(line), " %s %.0f ns x %llu", name.c_str(),
                        static_cast<double>(a.run_time_ns - b.run_time_ns) /
                            static_cast<double>(a.run_count - b.run_count),
                        static_cast<unsigned long long>(a.run_count - b.run_count));
          prog_costs += line;
        }
      }
      // CPU spent: the workload (with the BPF programs it triggers) plus the drain.
      const double cpu = child_cpu + (process_cpu_seconds() - drain_cpu0);
      const double bps = bytes / elapsed;
      const double per_cpu = bytes / cpu;
      (attached ? with : without).push_back(bps);
      (attached ? eff_with : eff_without).push_back(per_cpu);
      std::printf("  round %d %-9s %8.1f MiB/s wall, %8.1f MiB per CPU-second%s\n", round + 1,
                  attached ? "captured" : "bare", bps / (1 << 20), per_cpu / (1 << 20),
                  prog_costs.c_str());
      std::fflush(stdout);
    }
  }
  const double a = median(without), b = median(with);
  const double ea = median(eff_without), eb = median(eff_with);
  std::printf("  median wall: bare %.1f MiB/s, captured %.1f MiB/s, ratio %.3f (loss %.1f%%)\n",
              a / (1 << 20), b / (1 << 20), b / a, 100.0 * (1 - b / a));
  std::printf(
      "  median per CPU-second (workload + drain): bare %.1f MiB, captured %.1f MiB, ratio "
      "%.3f (loss %.1f%%)\n",
      ea / (1 << 20), eb / (1 << 20), eb / ea, 100.0 * (1 - eb / ea));
  std::printf("  %llu records delivered, %llu dropped\n",
              static_cast<unsigned long long>(delivered), static_cast<unsigned long long>(drops));
}

}  // namespace

int main(int argc, char** argv) {
  if (geteuid() != 0) {
    std::fprintf(stderr, "capture_bench: needs root (BPF programs); skipped\n");
    return std::getenv("CI") && std::string(std::getenv("CI")) == "true" ? 1 : 77;
  }
  if (auto env = fc::capture::check_environment(); !env) {
    std::fprintf(stderr, "capture_bench: %s\n", env.error().message.c_str());
    return 1;
  }
  // bench_capture [rounds [seconds [capture bytes [throughput only]]]]
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 2.0;
  const auto cap_bytes = static_cast<std::uint32_t>(argc > 3 ? std::atoi(argv[3]) : 4096);
  const bool throughput_only = argc > 4;
  const int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (stats_fd < 0) {
    std::fprintf(stderr, "capture_bench: cannot enable BPF run-time statistics\n");
    return 1;
  }
  if (!throughput_only) {
    std::printf(
        "BPF run time per event (kernel bpf_stats: run_time_ns / run_cnt; 100000 calls each):\n");
    print_runtime(Variant::kSockTracepoints);
    print_runtime(Variant::kSyscallTracepoints);
  }
  // Throughput runs without the statistics' own timing overhead unless asked (diagnosis).
  if (!std::getenv("FC_BENCH_STATS")) close(stats_fd);
  std::printf(
      "Loopback TCP throughput, 64 KiB writes, %.1f s per run, %d rounds alternated, "
      "capture %u bytes per call:\n",
      seconds, rounds, cap_bytes);
  print_throughput(rounds, seconds, cap_bytes,
                   !(throughput_only && std::string(argv[4]) == "untargeted"));
  return 0;
}
