// fetchcostd: watches Kafka broker processes with eBPF and serves per-client remote-fetch cost.
#include <CLI/CLI.hpp>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>

#include "capture/capture.h"
#include "daemon/targets.h"

namespace {

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop = true; }

const char* direction_name(unsigned d) { return d == FC_DIR_SEND ? "send" : "recv"; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fetchcostd — attributes Kafka tiered-storage reads to the clients that cause them"};
  std::vector<int> pids;
  std::string match = "kafka.Kafka";
  std::uint32_t capture_bytes = 4096;
  std::size_t ring_kib = 4096;
  double duration_s = 0;
  bool print_events = false;
  app.add_option("--pid", pids, "Watch these process ids (repeatable)");
  app.add_option("--match", match, "Watch processes whose command line contains this")
      ->capture_default_str();
  app.add_option("--capture-bytes", capture_bytes, "Bytes copied from each socket call")
      ->capture_default_str();
  app.add_option("--ring-kib", ring_kib, "Ring buffer size per CPU, KiB")->capture_default_str();
  app.add_option("--duration", duration_s, "Stop after this many seconds (0 = run until signalled)");
  app.add_flag("--print-events", print_events,
               "Print one line per captured event (metadata only, never payload bytes)");
  CLI11_PARSE(app, argc, argv);

  if (auto env = fc::capture::check_environment(); !env) {
    std::fprintf(stderr, "fetchcostd: %s\n", env.error().message.c_str());
    return 2;
  }

  std::uint64_t seen = 0;
  auto capture = fc::capture::Capture::open(
      {.ring_bytes_per_cpu = ring_kib * 1024, .default_capture_bytes = capture_bytes},
      [&](const fc::capture::EventView& ev) {
        ++seen;
        if (!print_events) return;
        const fc_event& h = ev.header;
        std::printf("event pid=%u tid=%u comm=%.*s dir=%s conn=%#llx pos=%llu len=%u captured=%u\n",
                    h.tgid, h.tid, FC_COMM_LEN, h.comm, direction_name(h.direction),
                    static_cast<unsigned long long>(h.conn_id),
                    static_cast<unsigned long long>(h.stream_pos), h.length, h.captured);
        std::fflush(stdout);
      });
  if (!capture) {
    std::fprintf(stderr, "fetchcostd: %s\n", capture.error().message.c_str());
    return 2;
  }

  std::set<pid_t> watched;
  auto refresh_targets = [&] {
    std::vector<pid_t> wanted(pids.begin(), pids.end());
    if (pids.empty()) wanted = fc::daemon::find_processes_by_cmdline(match);
    for (pid_t pid : wanted) {
      if (watched.count(pid) || !fc::daemon::process_alive(pid)) continue;
      if (auto r = (*capture)->add_target(pid, capture_bytes); !r) {
        std::fprintf(stderr, "fetchcostd: %s\n", r.error().message.c_str());
        continue;
      }
      watched.insert(pid);
      std::fprintf(stderr, "fetchcostd: watching pid %d\n", pid);
    }
    for (auto it = watched.begin(); it != watched.end();) {
      if (fc::daemon::process_alive(*it)) { ++it; continue; }
      (*capture)->remove_target(*it);
      std::fprintf(stderr, "fetchcostd: pid %d exited\n", *it);
      it = watched.erase(it);
    }
  };

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  std::fprintf(stderr, "fetchcostd: BPF programs attached on %d CPUs\n", (*capture)->cpu_count());
  if (std::getenv("FETCHCOSTD_READY_FILE")) {
    if (FILE* f = std::fopen(std::getenv("FETCHCOSTD_READY_FILE"), "w")) std::fclose(f);
  }

  const auto start = std::chrono::steady_clock::now();
  auto last_scan = start - std::chrono::hours(1);
  while (!g_stop) {
    const auto now = std::chrono::steady_clock::now();
    if (now - last_scan >= std::chrono::seconds(1)) {
      refresh_targets();
      last_scan = now;
    }
    if (duration_s > 0 && now - start >= std::chrono::duration<double>(duration_s)) break;
    if (auto r = (*capture)->poll(100); !r) {
      std::fprintf(stderr, "fetchcostd: %s\n", r.error().message.c_str());
      return 1;
    }
  }
  (void)(*capture)->poll(0);
  const auto totals = (*capture)->totals();
  std::fprintf(stderr, "fetchcostd: %llu events handled, %llu in kernel, %llu dropped\n",
               static_cast<unsigned long long>(seen),
               static_cast<unsigned long long>(totals.events),
               static_cast<unsigned long long>(totals.drops));
  return 0;
}
