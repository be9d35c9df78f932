// Capture benchmark: prints figures for docs/performance.md ("Capture (BPF)"); not a pass/fail
// test. Needs root. Everything is measured against the real fetchcostd (started per case with
// --pid), its BPF programs' statistics read from /proc/<fetchcostd>/fdinfo.
//  1. BPF run time per event (BPF_ENABLE_STATS; run_time_ns / run_cnt per program): a process
//     that is not a target, and a target at 256 B and 4 KiB per call (every byte up to fetchcostd's
//     cap copied) and at a writev of 4 iovecs of 64 B, for each capture variant (the syscall
//     tracepoints as exit programs alone and as entry-exit pairs).
//  2. Loopback TCP throughput at 64 KiB writes, a broker's response path: the writer process is
//     the target, the reader (the consumer) another process. Rounds without fetchcostd and with
//     it attached alternate; each pair gives a ratio. Also bytes per CPU-second of writer + reader
//     + fetchcostd (less sensitive to the neighbours on a shared machine).
//
//   bench_capture [ROUNDS [SECONDS [CAPTURE_BYTES [throughput-only]]]]   (defaults 9 1.5 4096)
// throughput-only still measures the sock variant (its non-target cost corrects the shares).
// FC_BENCH_PIN=1 pins the writer and the reader to CPUs 0 and 1 (steadier wall ratios).
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "capture_bench: %s\n", why.c_str());
  std::exit(1);
}

// A forked process that runs `work` when told and reports two numbers back.
struct Child {
  pid_t pid = -1;
  int go = -1, back = -1;
  template <typename F>
  explicit Child(F work) {
    int g[2], b[2];
    if (pipe(g) != 0 || pipe(b) != 0) die("pipe failed");
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
    if (write(go, &c, 1) != 1) die("child gone");
  }
  // The child's two figures, and the CPU time (user + system) it used, BPF programs included.
  std::pair<double, double> result(double* cpu_seconds = nullptr) {
    std::pair<double, double> v{-1, 0};
    if (read(back, &v, sizeof(v)) != sizeof(v)) die("child failed");
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

// fetchcostd watching one pid; stops on destruction.
class Daemon {
 public:
  Daemon(pid_t target, const std::string& variant, std::uint32_t capture_bytes,
         std::size_t ring_kib = 4096) {
    int err[2];
    if (pipe(err) != 0) die("pipe failed");
    pid_ = fork();
    if (pid_ == 0) {
      dup2(err[1], 2);
      close(err[0]);
      close(err[1]);
      const std::string pid = std::to_string(target), cap = std::to_string(capture_bytes),
                        ring = std::to_string(ring_kib);
      // FC_BENCH_FETCHCOSTD: another build's binary (a saved copy), to compare versions.
      const char* bin =
          std::getenv("FC_BENCH_FETCHCOSTD") ? std::getenv("FC_BENCH_FETCHCOSTD") : FETCHCOSTD;
      execl(bin, bin, "--pid", pid.c_str(), "--listen", "127.0.0.1:0", "--capture-variant",
            variant.c_str(), "--capture-bytes", cap.c_str(), "--iovec-bytes", cap.c_str(),
            "--ring-kib", ring.c_str(), "--no-tls", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(err[1]);
    log_ = fdopen(err[0], "r");
    // Attached when it says it watches the pid (programs loaded and the target in the map).
    const std::string want = "watching pid " + std::to_string(target) + " ";
    char line[1024];
    while (std::fgets(line, sizeof(line), log_)) {
      log_text_ += line;
      if (std::strstr(line, want.c_str())) break;
    }
    if (log_text_.find(want) == std::string::npos) die("fetchcostd did not attach:\n" + log_text_);
    // Keep reading its log: a full pipe would stall fetchcostd, and with it the drain.
    reader_ = std::thread([this] {
      char l[1024];
      while (std::fgets(l, sizeof(l), log_)) log_text_ += l;
    });
  }
  ~Daemon() { stop(); }
  // Stops it; returns its last line ("N events handled, M in kernel, K dropped").
  std::string stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
      reader_.join();
      std::fclose(log_);
    }
    const auto at = log_text_.rfind("fetchcostd: ");
    std::string last = at == std::string::npos ? "" : log_text_.substr(at + 12);
    while (!last.empty() && last.back() == '\n') last.pop_back();
    return last;
  }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  FILE* log_ = nullptr;
  std::string log_text_;
  std::thread reader_;
};

struct ProgStats {
  std::uint64_t run_time_ns = 0, run_cnt = 0;
};

// The BPF programs a process holds, by name: run_time_ns / run_cnt from /proc/PID/fdinfo (the
// kernel's own statistics), the name from the program's info.
std::map<std::string, ProgStats> fdinfo_stats(pid_t pid) {
  std::map<std::string, ProgStats> out;
  const std::string proc = "/proc/" + std::to_string(pid);
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(proc + "/fd", ec)) {
    std::error_code lec;
    if (std::filesystem::read_symlink(e.path(), lec).string() != "anon_inode:bpf-prog") continue;
    std::ifstream info(proc + "/fdinfo/" + e.path().filename().string());
    std::string line;
    std::uint64_t id = 0;
    ProgStats s;
    while (std::getline(info, line)) {  // "key:\tvalue" lines
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      const std::string key = line.substr(0, colon);
      const std::uint64_t value = std::strtoull(line.c_str() + colon + 1, nullptr, 10);
      if (key == "prog_id") id = value;
      if (key == "run_time_ns") s.run_time_ns = value;
      if (key == "run_cnt") s.run_cnt = value;
    }
    const int fd = bpf_prog_get_fd_by_id(static_cast<__u32>(id));
    if (fd < 0) continue;
    bpf_prog_info pi{};
    __u32 len = sizeof(pi);
    if (bpf_obj_get_info_by_fd(fd, &pi, &len) == 0) {
      auto& slot = out[pi.name];  // names are truncated to 15 chars by the kernel
      slot.run_time_ns += s.run_time_ns;
      slot.run_cnt += s.run_cnt;
    }
    close(fd);
  }
  return out;
}

struct Pair {
  int client = -1, server = -1;
};
Pair loopback_pair() {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(l, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(l, 1) != 0) die("listen");
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  Pair p;
  p.client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(p.client, reinterpret_cast<sockaddr*>(&a), len) != 0) die("connect");
  p.server = accept(l, nullptr, nullptr);
  close(l);
  return p;
}

// `calls` writes of `size` bytes (writev of `iovecs` equal parts when not 0), each read back
// with reads of `size` bytes. Returns the calls and the reads made.
std::pair<double, double> ping_writes(std::size_t size, int calls, int iovecs = 0) {
  Pair p = loopback_pair();
  std::vector<char> buf(size, 'x'), in(size);
  std::vector<iovec> iov(static_cast<std::size_t>(iovecs));
  for (int i = 0; i < iovecs; ++i)
    iov[i] = {buf.data() + size * i / iovecs, size * (i + 1) / iovecs - size * i / iovecs};
  double reads = 0;
  for (int i = 0; i < calls; ++i) {
    const ssize_t sent =
        iovecs ? writev(p.client, iov.data(), iovecs) : write(p.client, buf.data(), size);
    if (sent != static_cast<ssize_t>(size)) return {-1, 0};
    std::size_t got = 0;
    while (got < size) {
      ssize_t n = read(p.server, in.data() + got, size - got);
      ++reads;
      if (n <= 0) return {-1, 0};
      got += static_cast<std::size_t>(n);
    }
  }
  return {calls, reads};
}

struct Delta {
  double ns = 0;
  std::uint64_t runs = 0;
};
Delta delta(const std::map<std::string, ProgStats>& before,
            const std::map<std::string, ProgStats>& after, const std::string& name) {
  auto a = after.find(name);
  auto b = before.find(name);
  if (a == after.end() || b == before.end()) return {};
  return {static_cast<double>(a->second.run_time_ns - b->second.run_time_ns),
          a->second.run_cnt - b->second.run_cnt};
}

// The programs are global: every process's socket calls run them (the neighbours' too), a
// non-target returning at once. Per-event cost of the target's own `events`: the window's time
// less the other runs at the non-target cost measured alone (all runs non-target).
double target_cost(const Delta& d, double events, double non_target_ns) {
  const double others = static_cast<double>(d.runs) - events;
  return events > 0 ? (d.ns - std::max(others, 0.0) * non_target_ns) / events : 0;
}

// Prints the cases of one variant; returns its non-target cost per program.
std::map<std::string, double> print_runtime(const std::string& variant) {
  const bool sock = variant == "sock-tracepoints";
  const bool pairs = variant == "syscall-entry-exit";
  using Names = std::vector<std::string>;
  // The syscall variants run one program (or pair) for both directions: its runs are split
  // between them by the calls each made, at the same cost per run.
  const Names recv_progs = sock    ? Names{"sock_recv_lengt"}  // kernel names stop at 15 chars
                           : pairs ? Names{"sc_enter", "sc_exit"}
                                   : Names{"sc_ret"};
  struct Case {
    const char* label;
    bool target;
    std::size_t size;
    int iovecs;  // 0: write(); else writev() of this many iovecs (a header written in parts)
  } cases[] = {{"non-target, 64 B", false, 64, 0},
               {"target, 256 B captured", true, 256, 0},
               {"target, 4 KiB captured", true, 4096, 0},
               {"target, writev 4 x 64 B", true, 256, 4}};
  // Rings large enough that nothing is dropped while fetchcostd drains on a busy machine (a
  // dropped record skips the copy and would flatter the figure).
  constexpr int kCalls = 20000;
  std::map<std::string, double> non_target;  // program -> ns per run
  for (const auto& c : cases) {
    const Names send_progs = sock ? Names{"sock_send_lengt"} : recv_progs;
    Child bystander([] { return std::pair<double, double>{0, 0}; });  // watched when c isn't
    Child child([=] { return ping_writes(c.size, kCalls, c.iovecs); });
    Daemon daemon(c.target ? child.pid : bystander.pid, variant, 4096, 128 * 1024);
    const auto before = fdinfo_stats(daemon.pid());
    child.start();
    const auto [calls, reads] = child.result();
    usleep(200000);  // fetchcostd drains
    const auto after = fdinfo_stats(daemon.pid());
    const std::string summary = daemon.stop();
    double cost[2] = {0, 0};
    std::uint64_t runs[2] = {0, 0};
    // One program for both directions (syscall variants): one figure, over both directions'
    // target calls.
    const bool shared = send_progs == recv_progs;
    const double events[2] = {shared ? calls + reads : calls, shared ? calls + reads : reads};
    for (int dir = 0; dir < 2; ++dir) {
      for (const auto& name : dir == 0 ? send_progs : recv_progs) {
        const Delta d = delta(before, after, name);
        runs[dir] = std::max(runs[dir], d.runs);
        if (!c.target) {
          non_target[name] = d.runs ? d.ns / static_cast<double>(d.runs) : 0;
          cost[dir] += non_target[name];
        } else {
          cost[dir] += target_cost(d, events[dir], non_target[name]);
        }
      }
    }
    std::printf(
        "  %-20s %-24s send %6.1f ns/event   recv %6.1f ns/event   (%.0f/%.0f target "
        "calls of %llu/%llu runs) [%s]\n",
        variant.c_str(), c.label, cost[0], cost[1], c.target ? calls : 0.0, c.target ? reads : 0.0,
        static_cast<unsigned long long>(runs[0]), static_cast<unsigned long long>(runs[1]),
        summary.c_str());
    std::fflush(stdout);
    bystander.start();
    bystander.result();
  }
  return non_target;
}

double proc_cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close_paren = text.rfind(')');
  if (close_paren == std::string::npos) return 0;
  std::istringstream f(text.substr(close_paren + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && f >> field; ++i) {  // fields 14, 15: utime, stime (clock ticks)
    if (i == 14) utime = std::atof(field.c_str());
    if (i == 15) stime = std::atof(field.c_str());
  }
  return (utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

struct Spread {
  double median = 0, min = 0, max = 0, q1 = 0, q3 = 0;
};
Spread spread(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double i = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(i);
    const std::size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (i - static_cast<double>(lo));
  };
  return {at(0.5), v.front(), v.back(), at(0.25), at(0.75)};
}

// FC_BENCH_PIN=1: the writer on CPU 0, the reader on CPU 1 (fetchcostd is not pinned), so
// rounds do not differ by where the scheduler put the two; the wall ratios spread less.
void pin_to(int cpu) {
  static const bool pin =
      std::getenv("FC_BENCH_PIN") && std::string(std::getenv("FC_BENCH_PIN")) == "1";
  if (!pin || cpu >= static_cast<int>(std::thread::hardware_concurrency())) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof(set), &set);
}

void print_throughput(int rounds, double seconds, std::uint32_t cap_bytes,
                      double non_target_send_ns) {
  std::vector<double> wall_ratio, cpu_ratio, bare_wall, captured_wall, send_shares, recv_shares,
      send_ns;
  for (int round = 0; round < rounds; ++round) {
    double wall[2] = {0, 0}, eff[2] = {0, 0};
    // Alternate which goes first, so a trend in the neighbours' load favours neither.
    for (int k = 0; k < 2; ++k) {
      const bool attached = (k == 0) == (round % 2 == 1);
      Pair p = loopback_pair();
      Child reader([fd = p.server, other = p.client] {
        pin_to(1);
        close(other);  // EOF when the writer is done
        std::vector<char> in(64 * 1024);
        while (read(fd, in.data(), in.size()) > 0) {
        }
        return std::pair<double, double>{0, 0};
      });
      Child writer([fd = p.client, other = p.server, seconds] {
        pin_to(0);
        close(other);
        std::vector<char> buf(64 * 1024, 'y');
        std::uint64_t sent = 0;
        const auto start = Clock::now();
        const auto end = start + std::chrono::duration<double>(seconds);
        while (Clock::now() < end) {
          ssize_t n = write(fd, buf.data(), buf.size());
          if (n <= 0) break;
          sent += static_cast<std::uint64_t>(n);
        }
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        return std::pair<double, double>{static_cast<double>(sent), elapsed};
      });
      close(p.client);
      close(p.server);
      std::unique_ptr<Daemon> daemon;
      if (attached) daemon = std::make_unique<Daemon>(writer.pid, "auto", cap_bytes);
      const double daemon_cpu0 = daemon ? proc_cpu_seconds(daemon->pid()) : 0;
      const auto stats0 = daemon ? fdinfo_stats(daemon->pid()) : std::map<std::string, ProgStats>{};
      reader.start();
      writer.start();
      double writer_cpu = 0, reader_cpu = 0;
      const auto [bytes, elapsed] = writer.result(&writer_cpu);
      reader.result(&reader_cpu);
      const double daemon_cpu = daemon ? proc_cpu_seconds(daemon->pid()) - daemon_cpu0 : 0;
      std::string summary;
      if (daemon) {
        // The kernel's own account of the programs' time, against the CPU time of the process
        // each ran in: the writer (target, send path) and the reader (not a target, recv path).
        const auto stats1 = fdinfo_stats(daemon->pid());
        // Writes of 64 KiB on a blocking socket: one call, one event each.
        const Delta d = delta(stats0, stats1, "sock_send_lengt");
        const double event_ns = target_cost(d, bytes / 65536, non_target_send_ns);
        send_ns.push_back(event_ns);
        const double send_share = event_ns * (bytes / 65536) / 1e9 / writer_cpu;
        const Delta r = delta(stats0, stats1, "sock_recv_lengt");
        const double recv_share =
            (r.runs ? r.ns / static_cast<double>(r.runs) : 0) * (bytes / 65536) / 1e9 / reader_cpu;
        send_shares.push_back(send_share);
        recv_shares.push_back(recv_share);
        char text[160];
        std::snprintf(text, sizeof(text), "  BPF: %.2f%% of writer CPU, %.2f%% of reader CPU",
                      100 * send_share, 100 * recv_share);
        summary = text + std::string("  [") + daemon->stop() + "]";
      }
      wall[attached] = bytes / elapsed;
      eff[attached] = bytes / (writer_cpu + reader_cpu + daemon_cpu);
      std::printf(
          "  round %2d %-9s %7.1f MiB/s wall, %7.1f MiB per CPU-second (writer %.2f s, "
          "reader %.2f s, fetchcostd %.2f s)%s\n",
          round + 1, attached ? "attached" : "bare", wall[attached] / (1 << 20),
          eff[attached] / (1 << 20), writer_cpu, reader_cpu, daemon_cpu, summary.c_str());
      std::fflush(stdout);
    }
    bare_wall.push_back(wall[0]);
    captured_wall.push_back(wall[1]);
    wall_ratio.push_back(wall[1] / wall[0]);
    cpu_ratio.push_back(eff[1] / eff[0]);
  }
  const Spread w = spread(wall_ratio), c = spread(cpu_ratio), ss = spread(send_shares),
               rs = spread(recv_shares);
  std::printf(
      "  BPF programs' share of the writer's CPU (target, send path): median %.2f%%, "
      "range %.2f-%.2f%%; of the reader's (not a target): median %.2f%%, range "
      "%.2f-%.2f%%\n",
      100 * ss.median, 100 * ss.min, 100 * ss.max, 100 * rs.median, 100 * rs.min, 100 * rs.max);
  const Spread sn = spread(send_ns);
  std::printf(
      "  send program per 64 KiB write (target): median %.0f ns, quartiles %.0f-%.0f, range "
      "%.0f-%.0f\n",
      sn.median, sn.q1, sn.q3, sn.min, sn.max);
  std::printf("  median wall: bare %.1f MiB/s, attached %.1f MiB/s\n",
              spread(bare_wall).median / (1 << 20), spread(captured_wall).median / (1 << 20));
  std::printf(
      "  wall ratio attached/bare per round pair: median %.3f (loss %.1f%%), quartiles "
      "%.3f-%.3f, range %.3f-%.3f\n",
      w.median, 100 * (1 - w.median), w.q1, w.q3, w.min, w.max);
  std::printf(
      "  per CPU-second ratio (writer + reader + fetchcostd): median %.3f (loss %.1f%%), "
      "quartiles %.3f-%.3f, range %.3f-%.3f\n",
      c.median, 100 * (1 - c.median), c.q1, c.q3, c.min, c.max);
}

}  // namespace

int main(int argc, char** argv) {
  if (geteuid() != 0) {
    std::fprintf(stderr, "capture_bench: needs root (BPF programs); skipped\n");
    return std::getenv("CI") && std::string(std::getenv("CI")) == "true" ? 1 : 77;
  }
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 9;
  const double seconds = argc > 2 ? std::atof(argv[2]) : 1.5;
  const auto cap_bytes = static_cast<std::uint32_t>(argc > 3 ? std::atoi(argv[3]) : 4096);
  const bool throughput_only = argc > 4;
  signal(SIGPIPE, SIG_IGN);
  // On for the whole run (also the throughput rounds, for the programs' CPU share; the timing
  // adds ~20 ns per event, < 0.5 % of a 64 KiB write).
  const int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (stats_fd < 0) die("cannot enable BPF run-time statistics");
  std::printf(
      "BPF run time per event (fetchcostd's programs, run_time_ns / run_cnt from "
      "/proc/PID/fdinfo; 20000 write+read pairs each; other processes' runs taken out at the "
      "non-target cost):\n");
  const auto non_target = print_runtime("sock-tracepoints");
  if (!throughput_only) {
    print_runtime("syscall-tracepoints");
    print_runtime("syscall-entry-exit");
  }
  std::printf(
      "Loopback TCP throughput, 64 KiB writes by the target to a reader process that is "
      "not one, %.1f s per run, %d round pairs, fetchcostd --capture-bytes %u:\n",
      seconds, rounds, cap_bytes);
  print_throughput(rounds, seconds, cap_bytes, non_target.at("sock_send_lengt"));
  return 0;
}
