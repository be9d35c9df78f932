// fetchcostd: watches Kafka broker processes with eBPF and serves per-client remote-fetch cost.
#include <arpa/inet.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/version.h"
#include "capture/capture.h"
#include "daemon/broker_config.h"
#include "daemon/config.h"
#include "daemon/privileges.h"
#include "daemon/service.h"
#include "daemon/targets.h"

namespace {

std::atomic<bool> g_stop{false};
std::atomic<bool> g_reload{false};
void on_signal(int) {
  g_stop = true;
}
void on_hangup(int) {
  g_reload = true;
}

const char* direction_name(unsigned d) {
  return d == FC_DIR_SEND ? "send" : "recv";
}

std::string endpoint(unsigned family, const std::uint8_t* addr, unsigned port) {
  char text[INET6_ADDRSTRLEN] = "?";
  inet_ntop(family == AF_INET6 ? AF_INET6 : AF_INET, addr, text, sizeof(text));
  return (family == AF_INET6 ? "[" + std::string(text) + "]" : std::string(text)) + ":" +
         std::to_string(port);
}

// Human-readable capture status (the JSON API will serve the same struct).
void print_capture_status(const fc::capture::Status& s) {
  std::fprintf(stderr,
               "status: variant=%s ring=%zu bytes/cpu events=%llu drops=%llu "
               "delivered=%llu tls_events=%llu ciphertext_skipped=%llu folded=%llu "
               "gathered=%llu gather_no_slot=%llu wakeups=%llu\n",
               fc::capture::variant_name(s.variant), s.ring_bytes_per_cpu,
               static_cast<unsigned long long>(s.totals.events),
               static_cast<unsigned long long>(s.totals.drops),
               static_cast<unsigned long long>(s.delivered),
               static_cast<unsigned long long>(s.totals.tls_events),
               static_cast<unsigned long long>(s.totals.ciphertext_skipped),
               static_cast<unsigned long long>(s.totals.folded),
               static_cast<unsigned long long>(s.totals.gathered),
               static_cast<unsigned long long>(s.totals.gather_no_slot),
               static_cast<unsigned long long>(s.totals.wakeups));
  for (std::size_t cpu = 0; cpu < s.per_cpu.size(); ++cpu)
    std::fprintf(stderr, "status:   cpu %zu events=%llu drops=%llu\n", cpu,
                 static_cast<unsigned long long>(s.per_cpu[cpu].events),
                 static_cast<unsigned long long>(s.per_cpu[cpu].drops));
  for (const auto& p : s.programs)
    std::fprintf(stderr, "status:   program %s runs=%llu run_time_ns=%llu verified_insns=%u\n",
                 p.name.c_str(), static_cast<unsigned long long>(p.run_count),
                 static_cast<unsigned long long>(p.run_time_ns), p.verified_insns);
  for (const auto& t : s.targets) {
    std::fprintf(
        stderr,
        "status:   pid %d (%s) capture=%u/%u bytes per call/iovec, %zu connections at attach\n",
        t.pid, t.comm.c_str(), t.policy.bytes_per_call, t.policy.bytes_per_iovec,
        t.existing_connections);
    for (const auto& l : t.tls) {
      std::string fns;
      for (const auto& f : l.functions) fns += (fns.empty() ? "" : ",") + f;
      std::fprintf(stderr, "status:     tls %s %s %s%s%s\n", l.flavour.c_str(), l.path.c_str(),
                   l.skipped ? "(skipped by configuration)" : fns.c_str(),
                   l.error.empty() ? "" : " error: ", l.error.c_str());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fetchcostd — attributes Kafka tiered-storage reads to the clients that cause them"};
  app.set_version_flag("--version", std::string("fetchcostd ") + fc::kVersion);
  std::vector<int> pids;
  // Flags that mirror a config field start from the config's default: one place for each.
  const fc::daemon::Config defaults;
  std::string match = defaults.cmdline_match;
  std::string cgroup;
  std::uint32_t capture_bytes = defaults.capture_bytes;
  std::uint32_t iovec_bytes = 4096;
  std::uint32_t head_bytes = defaults.object_store_head_bytes;
  std::size_t ring_kib = defaults.ring_kib_per_cpu;
  std::size_t wakeup_kib = defaults.wakeup_kib;
  int drain_nice = defaults.drain_nice;
  double duration_s = 0;
  double status_interval_s = 0;
  bool print_events = false;
  bool print_status = false;
  bool no_tls = false;
  bool no_realtime_reader = false;
  bool no_drain_yield = false;
  bool program_stats = false;
  bool skip_quiet_fetches = defaults.skip_quiet_fetches;
  int pass_interval_ms = defaults.pass_interval_ms;
  std::vector<std::string> tls_skip;
  std::string variant = "auto";
  std::string config_path;
  std::string listen;
  app.add_option("--config", config_path,
                 "JSON config (docs/configuration.md); command-line options override it");
  app.add_option("--listen", listen, "host:port for /metrics and the API (default 127.0.0.1:9464)");
  app.add_option("--pid", pids, "Watch these process ids (repeatable; not fetchcostd's own)");
  app.add_option("--match", match, "Watch processes whose command line contains this")
      ->capture_default_str();
  app.add_option("--cgroup", cgroup,
                 "Watch processes in this cgroup v2 path or below it (instead of --match)");
  app.add_option("--capture-bytes", capture_bytes, "Bytes copied from each socket call")
      ->capture_default_str();
  app.add_option("--iovec-bytes", iovec_bytes, "Bytes copied from each iovec of a call")
      ->capture_default_str();
  app.add_option("--object-store-head-bytes", head_bytes,
                 "Bytes copied from an object-store response's first read, its HTTP header (the "
                 "reads after it are object body: length only; 0 = --capture-bytes)")
      ->check(CLI::Range(0, 16384))
      ->capture_default_str();
  app.add_option("--ring-kib", ring_kib, "Ring buffer size per CPU, KiB")->capture_default_str();
  app.add_option("--wakeup-kib", wakeup_kib,
                 "A ring's unread KiB that wake the reader before its next pass (0 = half the "
                 "ring, at most 512; below --ring-kib)")
      ->capture_default_str();
  app.add_option("--drain-nice", drain_nice,
                 "Nice value of the drain thread, which decodes the records (0 = unchanged)")
      ->check(CLI::Range(-20, 19))
      ->capture_default_str();
  app.add_flag("--no-realtime-reader", no_realtime_reader,
               "Run the thread that moves records out of the rings at normal priority");
  app.add_flag("--no-drain-yield", no_drain_yield,
               "Run the drain thread at normal priority all the time, not at SCHED_IDLE while it "
               "keeps up");
  app.add_option("--pass-interval-ms", pass_interval_ms,
                 "While records flow, hand them to the drain at least this often (ms): shorter "
                 "passes hold a CPU the broker may want for less time, at more wakeups")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_flag("--program-stats", program_stats,
               "Have the kernel time the BPF programs' runs while fetchcostd runs "
               "(fetchcost_bpf_program_* metrics; two clock reads per run)");
  app.add_option("--skip-quiet-fetches", skip_quiet_fetches,
                 "Leave out fetches answered while the broker made no object-store call (no GET "
                 "can belong to them), sessionless or incremental ones that change no fetch "
                 "session: no records for them (true or false)")
      ->capture_default_str();
  app.add_option("--capture-variant", variant,
                 "Socket hooks: auto, sock-tracepoints (Linux >= 6.3), syscall-tracepoints (exit "
                 "programs, Linux >= 5.15; else as syscall-entry-exit) or syscall-entry-exit "
                 "(Linux >= 5.8)")
      ->check(
          CLI::IsMember({"auto", "sock-tracepoints", "syscall-tracepoints", "syscall-entry-exit"}))
      ->capture_default_str();
  app.add_flag("--no-tls", no_tls, "Do not attach TLS uprobes");
  app.add_option(
      "--tls-skip", tls_skip,
      "Do not hook this TLS library: openssl, boringssl, gnutls, or a path substring (repeatable)");
  app.add_option("--duration", duration_s,
                 "Stop after this many seconds (0 = run until signalled)");
  app.add_flag("--print-events", print_events,
               "Print one line per captured event (metadata only, never payload bytes)");
  app.add_option("--status-interval", status_interval_s,
                 "Print the capture status (probes per process, events, drops) every N seconds");
  app.add_flag("--status", print_status, "Print the capture status once after the first scan");
  CLI11_PARSE(app, argc, argv);

  fc::daemon::Config config;
  if (!config_path.empty()) {
    auto loaded = fc::daemon::load_config(config_path);
    if (!loaded) {
      std::fprintf(stderr, "fetchcostd: %s\n", loaded.error().message.c_str());
      return 2;
    }
    config = std::move(*loaded);
    if (pids.empty()) pids = config.pids;
    if (app.count("--match") == 0) match = config.cmdline_match;
    if (cgroup.empty()) cgroup = config.cgroup;
    if (app.count("--capture-bytes") == 0) capture_bytes = config.capture_bytes;
    if (app.count("--object-store-head-bytes") == 0) head_bytes = config.object_store_head_bytes;
    if (app.count("--ring-kib") == 0) ring_kib = config.ring_kib_per_cpu;
    if (app.count("--wakeup-kib") == 0) wakeup_kib = config.wakeup_kib;
    if (app.count("--drain-nice") == 0) drain_nice = config.drain_nice;
    if (!config.realtime_reader) no_realtime_reader = true;
    if (!config.drain_yields) no_drain_yield = true;
    if (config.program_stats) program_stats = true;
    if (app.count("--skip-quiet-fetches") == 0) skip_quiet_fetches = config.skip_quiet_fetches;
    if (app.count("--pass-interval-ms") == 0) pass_interval_ms = config.pass_interval_ms;
    auto listed = [&](const std::string& lib) {
      return std::find(config.tls_libraries.begin(), config.tls_libraries.end(), lib) !=
             config.tls_libraries.end();
    };
    // BoringSSL is OpenSSL's fork with the same entry points: "openssl" covers it too, so
    // configs written before capture told the two apart keep hooking netty-tcnative.
    for (const std::string lib : {"openssl", "gnutls", "boringssl"})
      if (!listed(lib) && !(lib == "boringssl" && listed("openssl"))) tls_skip.push_back(lib);
  }
  if (!listen.empty()) config.listen = listen;
  config.program_stats = program_stats;  // the flag's, as the status API reports it
  config.skip_quiet_fetches = skip_quiet_fetches;
  config.object_store_head_bytes = head_bytes;
  config.ring_kib_per_cpu = ring_kib;  // as the flags set them, for the status API
  config.wakeup_kib = wakeup_kib;
  // Discovery never finds this process; a pid given by hand could be it (Capture refuses it).
  if (std::find(pids.begin(), pids.end(), static_cast<int>(getpid())) != pids.end()) {
    std::fprintf(stderr,
                 "fetchcostd: pid %d is fetchcostd itself; give the broker's pid (--pid or "
                 "targets.pids in the config)\n",
                 static_cast<int>(getpid()));
    return 2;
  }

  if (auto env = fc::capture::check_environment(); !env) {
    std::fprintf(stderr, "fetchcostd: %s\n", env.error().message.c_str());
    return 2;
  }

  std::uint64_t seen = 0;
  fc::capture::Options options;
  options.ring_bytes_per_cpu = ring_kib * 1024;
  options.wakeup_bytes = wakeup_kib * 1024;
  options.default_policy = {capture_bytes, iovec_bytes, FC_ROLE_OTHER};
  options.default_policy.head_bytes = static_cast<std::uint16_t>(head_bytes);
  options.variant = variant == "sock-tracepoints"      ? fc::capture::Variant::kSockTracepoints
                    : variant == "syscall-tracepoints" ? fc::capture::Variant::kSyscallTracepoints
                    : variant == "syscall-entry-exit"  ? fc::capture::Variant::kSyscallEntryExit
                                                       : fc::capture::Variant::kAuto;
  options.tls = !no_tls;
  options.tls_skip = tls_skip;
  options.realtime_reader = !no_realtime_reader;
  options.pass_interval_ms = pass_interval_ms;
  options.drain_yields = !no_drain_yield;
  options.program_stats = program_stats;
  options.skip_quiet_fetches = skip_quiet_fetches;
  auto service = fc::daemon::Service::create(config);
  if (!service) {
    std::fprintf(stderr, "fetchcostd: %s\n", service.error().message.c_str());
    return 2;
  }
  std::fprintf(stderr, "fetchcostd: serving /metrics and /api/v1 on %s (port %d)\n",
               config.listen.c_str(), (*service)->port());
  auto on_event = [&](const fc::capture::EventView& ev) {
    ++seen;
    (*service)->on_event(ev);
    if (!print_events) return;
    const fc_event_common& c = ev.common;
    if (ev.data) {
      const fc_data_event& d = *ev.data;
      std::printf(
          "%s pid=%u tid=%u comm=%.*s conn=%#llx gen=%u fd=%d dir=%s src=%u pos=%llu "
          "len=%u captured=%u segs=%u flags=%#x%s\n",
          c.kind == FC_EVENT_TLS_DATA ? "tls" : "data", c.tgid, c.tid, FC_COMM_LEN, c.comm,
          static_cast<unsigned long long>(c.conn_id), c.generation, c.fd,
          direction_name(d.direction), d.source, static_cast<unsigned long long>(d.stream_pos),
          d.length, d.captured, d.nsegs, c.flags,
          ev.folded    ? " folded"
          : ev.skipped ? " left-out"
                       : "");
    } else if (ev.conn) {
      const fc_conn_event& k = *ev.conn;
      std::printf("%s pid=%u conn=%#llx gen=%u fd=%d origin=%u local=%s peer=%s\n",
                  c.kind == FC_EVENT_CONNECT ? "connect" : "close", c.tgid,
                  static_cast<unsigned long long>(c.conn_id), c.generation, c.fd, k.origin,
                  endpoint(k.family, k.local_addr, k.local_port).c_str(),
                  endpoint(k.family, k.peer_addr, k.peer_port).c_str());
    }
    std::fflush(stdout);
  };

  // Attribution off means probes detached: the Capture object owns every BPF link, so closing
  // it detaches everything; turning attribution on again loads and attaches anew.
  std::unique_ptr<fc::capture::Capture> capture;
  std::map<pid_t, std::uint64_t> watched;  // with each one's start time: its number may be reused
  // Brokers are searched for every second: every process's /proc entry once a minute (and after
  // each capture opens, whose exec hook saw nothing before), else those that exec'd since.
  const std::string cgroup_searched = cgroup.empty() ? "" : fc::daemon::cgroup_relative(cgroup);
  fc::daemon::ProcessFinder finder(
      [&](pid_t pid) {
        return cgroup.empty() ? fc::daemon::command_line_contains(pid, match)
                              : fc::daemon::in_cgroup(pid, cgroup_searched);
      },
      std::chrono::minutes(1));
  bool sweep_next = true;
  // Ports whose connections have a role for the BPF side, with the same capture sizes as
  // every other connection: `peer_side` names the far end's port.
  auto set_role = [&](const auto& ports, bool peer_side, fc_role role, const char* what) {
    for (std::uint16_t port : ports) {
      fc::capture::Policy policy = options.default_policy;
      policy.role = role;
      if (auto r = capture->set_port_policy(port, peer_side, policy); !r)
        std::fprintf(stderr, "fetchcostd: warning: %s port %u: %s\n", what, port,
                     r.error().message.c_str());
    }
  };
  auto open_capture = [&]() -> bool {
    auto opened = fc::capture::Capture::open(options, on_event);
    if (!opened) {
      std::fprintf(stderr, "fetchcostd: %s\n", opened.error().message.c_str());
      return false;
    }
    capture = std::move(*opened);
    watched.clear();
    sweep_next = true;
    // The broker's listeners: Kafka client connections, whose responses the BPF side frames
    // (sendfiles inside a response folded, its sends gathered into one record; bpf/capture.bpf.c,
    // response framing).
    // With the ports of the brokers' own listeners found since (re-applied on a re-open).
    set_role((*service)->kafka_ports(), false, FC_ROLE_KAFKA_CLIENT, "Kafka");
    // Connections to the object store's ports: after a response's first read, the reads
    // until the next request are object body, of which only a prefix is copied.
    set_role(config.object_store_ports, true, FC_ROLE_OBJECT_STORE, "object-store");
    const auto status = capture->status();
    std::uint32_t most_insns = 0;
    for (const auto& p : status.programs) most_insns = std::max(most_insns, p.verified_insns);
    std::fprintf(stderr,
                 "fetchcostd: BPF programs (%s) attached on %d CPUs; verified in %.2f s (at most "
                 "%u instructions walked per program, of the verifier's 1,000,000)\n",
                 fc::capture::variant_name(capture->variant()), capture->cpu_count(),
                 status.load_seconds, most_insns);
    if (status.reader_realtime)
      std::fprintf(stderr, "fetchcostd: ring reader thread at real-time priority (SCHED_FIFO 1)\n");
    else if (!status.reader_priority_error.empty())
      std::fprintf(stderr, "fetchcostd: warning: %s\n", status.reader_priority_error.c_str());
    if (!status.exec_hook_error.empty())
      std::fprintf(stderr,
                   "fetchcostd: warning: %s; the search for brokers reads every process each "
                   "second\n",
                   status.exec_hook_error.c_str());
    if (!status.program_stats.error.empty())
      std::fprintf(stderr, "fetchcostd: warning: %s\n", status.program_stats.error.c_str());
    else if (status.program_stats.held)
      std::fprintf(stderr,
                   "fetchcostd: the kernel times every run of the BPF programs "
                   "(capture.program_stats)\n");
    return true;
  };
  if ((*service)->attribution_enabled() && !open_capture()) return 2;
  // This thread drains the rings; the HTTP and ledger threads started before it keep their
  // priority. Before the capabilities go: it needs CAP_SYS_NICE.
  if (drain_nice != 0 && setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), drain_nice) != 0)
    std::fprintf(stderr,
                 "fetchcostd: could not set the drain thread's nice value to %d (%s): it keeps "
                 "its priority, so ring-buffer drops are more likely on a busy host; grant "
                 "CAP_SYS_NICE or set capture.drain_nice to 0\n",
                 drain_nice, std::strerror(errno));
  // Probes attached, listen socket bound: keep only what re-attaching needs (daemon/privileges.h).
  // A re-opened capture (attribution off, then on) makes its ring reader real-time again, and a
  // yielding drain needs CAP_SYS_NICE to leave SCHED_IDLE when it falls behind.
  if (auto caps =
          fc::daemon::drop_unneeded_capabilities(options.realtime_reader || options.drain_yields);
      !caps)
    std::fprintf(stderr, "fetchcostd: warning: %s\n", caps.error().message.c_str());
  else
    std::fprintf(stderr, "fetchcostd: capabilities now %s\n", caps->c_str());

  // Each broker's own settings (daemon/broker_config.h), read before it is watched: its client
  // listeners' ports join kafka_ports, and when the config names no log dirs the watched brokers'
  // log dirs together are the local tier's (kept when a broker exits, until another names
  // others). Settings that cannot be read (a properties file not there yet, a volume not mounted)
  // are tried again every kSettingsRetry while the broker is watched.
  struct BrokerSettingsRead {
    std::uint64_t started = 0;  // the process's start time: its number may be reused
    std::optional<fc::daemon::BrokerSettings> settings;
    std::string error;  // of the last try
    std::chrono::steady_clock::time_point next_try;
  };
  constexpr auto kSettingsRetry = std::chrono::seconds(10);
  std::map<pid_t, BrokerSettingsRead> broker_settings;
  // True when pid's settings were read by this call. Those of a process that had its number
  // before (another start time) are forgotten first.
  auto read_broker_settings = [&](pid_t pid, std::uint64_t started) {
    auto& read = broker_settings[pid];
    if (read.started != started) {
      read = {};
      read.started = started;
    }
    const auto now = std::chrono::steady_clock::now();
    if (read.settings || now < read.next_try) return false;
    auto found = fc::daemon::broker_settings(pid);
    if (!found) {
      if (found.error().message != read.error)  // said once, not at every try
        std::fprintf(stderr, "fetchcostd: warning: %s (tried again every %lld s)\n",
                     found.error().message.c_str(), static_cast<long long>(kSettingsRetry.count()));
      read.error = found.error().message;
      read.next_try = now + kSettingsRetry;
      return false;
    }
    if (!read.error.empty())
      std::fprintf(stderr, "fetchcostd: the settings of pid %d read on a later try (%s)\n", pid,
                   found->properties_file.c_str());
    read.error.clear();
    read.settings = std::move(*found);
    const auto fresh = (*service)->add_kafka_ports(read.settings->kafka_ports);
    if (fresh.empty()) return true;
    set_role(fresh, false, FC_ROLE_KAFKA_CLIENT, "Kafka");
    std::string listed;
    for (std::uint16_t port : fresh) listed += (listed.empty() ? "" : ", ") + std::to_string(port);
    std::fprintf(stderr, "fetchcostd: Kafka listener ports of pid %d (%s): %s\n", pid,
                 read.settings->properties_file.c_str(), listed.c_str());
    return true;
  };
  // Called when the watched brokers change.
  auto use_broker_log_dirs = [&] {
    std::vector<std::string> dirs;
    std::string origin;
    for (const auto& [pid, started] : watched) {
      const auto entry = broker_settings.find(pid);
      if (entry == broker_settings.end() || !entry->second.settings) continue;
      const auto& settings = *entry->second.settings;
      dirs.insert(dirs.end(), settings.log_dirs.begin(), settings.log_dirs.end());
      origin += (origin.empty() ? "pid " : "; pid ") + std::to_string(pid) + " " +
                settings.properties_file;
    }
    if (dirs.empty()) return;
    std::sort(dirs.begin(), dirs.end());
    dirs.erase(std::unique(dirs.begin(), dirs.end()), dirs.end());
    std::string joined;
    for (const auto& d : dirs) joined += (joined.empty() ? "" : ", ") + d;
    auto used = (*service)->use_broker_log_dirs(dirs, origin);
    if (!used) {
      std::fprintf(stderr, "fetchcostd: warning: the broker's log dirs (%s): %s\n", joined.c_str(),
                   used.error().message.c_str());
      return;
    }
    if (!*used) return;  // the config's, or the same dirs named by a restarted broker
    std::fprintf(stderr,
                 "fetchcostd: local log start offsets from the broker's log dirs: %s (%s)\n",
                 joined.c_str(), origin.c_str());
    for (const auto& dir : dirs) {
      std::error_code ec;
      if (!std::filesystem::is_directory(dir, ec))
        std::fprintf(stderr,
                     "fetchcostd: warning: the broker's log dir %s is not a directory fetchcostd "
                     "can read (%s); set log_dirs in the config\n",
                     dir.c_str(), ec ? ec.message().c_str() : "not found");
    }
  };

  auto refresh_targets = [&] {
    std::vector<pid_t> wanted(pids.begin(), pids.end());
    if (pids.empty()) {
      auto execs = capture->take_execs();  // taken on a sweep too, so that none is stale after
      if (sweep_next) execs.reset();
      sweep_next = false;
      wanted = finder.find(std::chrono::steady_clock::now(), execs);
      (*service)->set_target_search(finder.sweeps(), finder.processes_read());
    }
    bool changed = false;
    // A process's start time: the one the finder read this second, when it found the process.
    auto start_time = [&](pid_t pid) {
      const auto found = pids.empty() ? finder.start_time(pid) : std::nullopt;
      return found ? found : fc::daemon::process_start_time(pid);
    };
    // Those gone first: a process whose number another one took within the second is gone too,
    // and its settings with it, before that number is looked at as a new process below.
    for (auto it = watched.begin(); it != watched.end();) {
      const pid_t pid = it->first;
      const auto started = start_time(pid);
      if (started == it->second) {
        if (read_broker_settings(pid, it->second)) changed = true;  // read on a later try
        ++it;
        continue;
      }
      capture->remove_target(pid);
      std::fprintf(stderr, "fetchcostd: pid %d exited%s\n", pid,
                   started ? " (its number now another process's)" : "");
      it = watched.erase(it);
      changed = true;
    }
    for (pid_t pid : wanted) {
      if (watched.count(pid)) continue;
      const auto started = start_time(pid);
      if (!started) continue;  // exited
      // Its listener ports' role is set before its connections are.
      read_broker_settings(pid, *started);
      auto r = capture->add_target(pid);
      if (!r) {
        std::fprintf(stderr, "fetchcostd: %s\n", r.error().message.c_str());
        continue;
      }
      watched.emplace(pid, *started);
      changed = true;
      std::fprintf(stderr,
                   "fetchcostd: watching pid %d (%s), %zu TLS libraries, %zu open connections\n",
                   pid, r->comm.c_str(), r->tls.size(), r->existing_connections);
    }
    std::size_t unread = 0;
    std::string error;
    for (auto it = broker_settings.begin(); it != broker_settings.end();) {
      if (!watched.count(it->first) && start_time(it->first) != it->second.started) {
        it = broker_settings.erase(it);
        continue;
      }
      if (watched.count(it->first) && !it->second.settings) {
        ++unread;
        error = it->second.error;
      }
      ++it;
    }
    (*service)->set_broker_settings_unread(unread, error);
    if (changed) use_broker_log_dirs();
  };

  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGHUP, on_hangup);
  if (std::getenv("FETCHCOSTD_READY_FILE")) {
    if (FILE* f = std::fopen(std::getenv("FETCHCOSTD_READY_FILE"), "w")) std::fclose(f);
  }

  const auto start = std::chrono::steady_clock::now();
  auto last_scan = start - std::chrono::hours(1);
  auto last_status = start;
  bool first_scan = true;
  fc::capture::Counters totals;  // kept across detach/attach for the final line
  bool behind = false;           // the last tick left due records: read the rings, tick again
  bool drain_reported = false;   // whether the drain yields, said once per capture
  while (!g_stop) {
    if (g_reload.exchange(false)) {
      if (config_path.empty()) {
        std::fprintf(stderr, "fetchcostd: SIGHUP ignored: started without --config\n");
      } else if (auto reloaded = fc::daemon::load_config(config_path); !reloaded) {
        (*service)->count_config_error();
        std::fprintf(stderr, "fetchcostd: config reload refused, running config kept: %s\n",
                     reloaded.error().message.c_str());
      } else if (auto applied = (*service)->reload(*reloaded); !applied) {
        std::fprintf(stderr, "fetchcostd: config reload refused, running config kept: %s\n",
                     applied.error().message.c_str());
      } else {
        std::fprintf(stderr, "fetchcostd: config reloaded (attribution %s)\n",
                     reloaded->attribution_enabled ? "on" : "off");
      }
    }
    const bool enabled = (*service)->attribution_enabled();
    if (enabled && !capture) {
      if (!open_capture()) return 1;
      last_scan = start - std::chrono::hours(1);
    } else if (!enabled && capture) {
      (void)capture->poll(0);
      const auto t = capture->totals();
      totals.events += t.events;
      totals.drops += t.drops;
      capture.reset();
      drain_reported = false;
      watched.clear();
      (*service)->set_capture_status({});
      std::fprintf(stderr, "fetchcostd: attribution off: probes detached\n");
    }
    const auto now = std::chrono::steady_clock::now();
    if (duration_s > 0 && now - start >= std::chrono::duration<double>(duration_s)) break;
    if (!capture) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      const std::uint64_t now_ns = fc::monotonic_ns();
      (*service)->tick(now_ns, now_ns);  // no capture: nothing on its way
      continue;
    }
    if (now - last_scan >= std::chrono::seconds(1)) {
      refresh_targets();
      last_scan = now;
      (*service)->set_capture_status(capture->status());
      if (first_scan && print_status) print_capture_status(capture->status());
      first_scan = false;
    }
    if (status_interval_s > 0 &&
        now - last_status >= std::chrono::duration<double>(status_interval_s)) {
      print_capture_status(capture->status());
      last_status = now;
    }
    if (auto r = capture->poll(behind ? 0 : 100); !r) {
      std::fprintf(stderr, "fetchcostd: %s\n", r.error().message.c_str());
      return 1;
    }
    if (!drain_reported && options.drain_yields) {  // the first poll() made it yield, or not
      drain_reported = true;
      const auto s = capture->status();
      if (!s.drain_priority_error.empty())
        std::fprintf(stderr, "fetchcostd: warning: %s\n", s.drain_priority_error.c_str());
      (*service)->set_capture_status(s);  // the status taken before it said neither
    }
    behind = (*service)->tick(fc::monotonic_ns(), capture->handed_through_ns());
  }
  if (capture) {
    (void)capture->poll(0);
    (*service)->set_capture_status(capture->status());
    const auto t = capture->totals();
    totals.events += t.events;
    totals.drops += t.drops;
  }
  (*service)->shutdown();
  std::fprintf(stderr, "fetchcostd: %llu events handled, %llu in kernel, %llu dropped\n",
               static_cast<unsigned long long>(seen),
               static_cast<unsigned long long>(totals.events),
               static_cast<unsigned long long>(totals.drops));
  return 0;
}
