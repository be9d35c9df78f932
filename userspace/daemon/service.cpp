#include "daemon/service.h"

#include <httplib.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/clock.h"
#include "base/version.h"
#include "daemon/budget.h"
#include "daemon/reorder.h"

#include "export/export.h"
#include "pipeline/capture_feed.h"
#include "pipeline/pipeline.h"
#include "pipeline/tier_view.h"
#include "tier/tier.h"

namespace fc::daemon {
namespace {

constexpr std::uint64_t kReorderWindowNs = 5'000'000;     // records older than this are settled
constexpr std::uint64_t kMaxSettleLagNs = 1'000'000'000;  // see Service::tick
constexpr std::uint64_t kLedgerSaveIntervalNs = 10'000'000'000;
constexpr std::uint64_t kBudgetIntervalNs = 1'000'000'000;
// A sweep (Pipeline::tick: gaps, timeouts, idle flushes) walked every connection, 10-20 ms with
// 15,000 open (now mostly the ones that got bytes since the last). Run after every ring wakeup,
// sweeps took most of the drain's time in a burst of new connections and the ring filled. So a
// sweep waits at least this long after the last one, and at least kSweepRestFactor times as long as
// the last one took (at most a fifth of the drain's time). Idle, the drain wakes every 100 ms
// anyway.
constexpr std::uint64_t kSweepMinIntervalNs = 10'000'000;
constexpr std::uint64_t kSweepRestFactor = 4;
// A burst (thousands of new connections at once) could keep one tick handing records to the
// pipeline for 50-80 ms while nobody read the rings. A tick now hands on slices of
// kReleaseSlice records for about kReleaseBudgetNs, then the drain reads the rings again and
// comes back at once; the records wait in the window (memory) instead of the ring. Past
// kMaxBacklogBytes held, it hands on everything due again (the rings absorb, or drop and count).
constexpr std::size_t kReleaseSlice = 256;
constexpr std::uint64_t kReleaseBudgetNs = 5'000'000;
constexpr std::size_t kMaxBacklogBytes = 64u << 20;
constexpr int kMaxActionsInFlight = 4;  // beyond this, actions are skipped (and counted)

extern "C" char** environ;

// Budget actions (a command or a webhook) run on their own detached threads: a slow hook must
// never hold the pipeline. The counters outlive the service (shared with the threads).
struct ActionCounters {
  std::atomic<int> in_flight{0};
  std::atomic<std::uint64_t> ok{0};
  std::atomic<std::uint64_t> failed{0};
  std::atomic<std::uint64_t> skipped{0};
};

void run_command(const std::string& command, const std::vector<std::string>& extra_env,
                 ActionCounters& counters) {
  // Everything the child needs is built before fork(): only async-signal-safe calls after it.
  std::vector<std::string> env_strings(extra_env);
  for (char** e = environ; e && *e; ++e) env_strings.emplace_back(*e);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  const pid_t pid = fork();
  if (pid < 0) {
    ++counters.failed;
    return;
  }
  if (pid == 0) {
    // The hook must not inherit the daemon's sockets and BPF objects.
    close_range(3, ~0u, 0);
    execve("/bin/sh", const_cast<char**>(argv), envp.data());
    _exit(127);
  }
  int status = 0;
  for (int waited_ms = 0;; waited_ms += 50) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) break;
    if (waited_ms >= 30'000) {  // a hung hook is killed, not waited for forever
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      ++counters.failed;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    ++counters.ok;
  else
    ++counters.failed;
}

void post_webhook(const std::string& url, const std::string& body, ActionCounters& counters) {
  // url is http://host[:port][/path] (validated by the config).
  const std::string rest = url.substr(7);
  const auto slash = rest.find('/');
  const std::string host_port = rest.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/" : rest.substr(slash);
  httplib::Client client("http://" + host_port);
  client.set_connection_timeout(2);
  client.set_read_timeout(5);
  client.set_write_timeout(5);
  auto res = client.Post(path, body, "application/json");
  if (res && res->status >= 200 && res->status < 300)
    ++counters.ok;
  else
    ++counters.failed;
}

std::string escape_label(std::string_view v) {
  std::string out;
  for (char ch : v) {
    if (ch == '\\' || ch == '"') out.push_back('\\');
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(ch);
  }
  return out;
}

nlohmann::json config_json(const Config& c) {
  nlohmann::json limits = nlohmann::json::array();
  for (const auto& l : c.budgets.limits) {
    nlohmann::json item{{"per_hour", l.per_hour}};
    if (!l.client_id.empty())
      item["client_id"] = l.client_id;
    else
      item["group_id"] = l.group_id;
    limits.push_back(item);
  }
  return {{"listen", c.listen},
          {"targets", {{"pids", c.pids}, {"cmdline_match", c.cmdline_match}, {"cgroup", c.cgroup}}},
          {"kafka_ports", c.kafka_ports},
          {"object_store",
           {{"ports", c.object_store_ports},
            {"cidrs", c.object_store_cidrs},
            {"hosts", c.object_store_hosts},
            {"key_layout", c.key_layout},
            {"virtual_host_suffixes", c.virtual_host_suffixes}}},
          {"log_dirs", c.log_dirs},
          {"price_table", c.price_table},
          {"sensors",
           {{"max_sensors", c.max_sensors},
            {"idle_expiry_seconds", c.idle_expiry_seconds},
            {"partition_label", c.partition_label}}},
          {"state_dir", c.state_dir},
          {"ledger",
           {{"retention_days", c.ledger_retention_days}, {"hourly_days", c.ledger_hourly_days}}},
          {"audit_log",
           {{"path", c.audit_log_path},
            {"max_bytes", c.audit_log_max_bytes},
            {"keep", c.audit_log_keep}}},
          {"capture",
           {{"ring_kib_per_cpu", c.ring_kib_per_cpu},
            {"wakeup_kib", c.wakeup_kib},
            {"capture_bytes", c.capture_bytes},
            {"object_store_head_bytes", c.object_store_head_bytes},
            {"tls_libraries", c.tls_libraries}}},
          {"attribution_enabled", c.attribution_enabled},
          {"budgets",
           {{"limits", limits},
            {"window_seconds", c.budgets.window_seconds},
            {"repeat_seconds", c.budgets.repeat_seconds},
            {"command", c.budgets.command},
            {"webhook", c.budgets.webhook}}}};
}

}  // namespace

struct Service::Impl {
  Config config;
  sensors::SensorTable sensors;
  std::unique_ptr<tier::LocalTierMap> tier_map;
  std::unique_ptr<pipeline::TierView> tier_view;
  // Where the tier map's log dirs came from ("config", or the broker process and properties
  // file they were read from; empty: none yet), and why the last switch to them failed.
  std::string log_dirs_origin;
  std::string log_dirs_error;
  // Watched brokers whose settings could not be read, and the last reason.
  std::size_t broker_settings_unread = 0;
  std::string broker_settings_error;
  std::uint64_t target_sweeps = 0, target_processes_read = 0;  // set_target_search
  std::unique_ptr<exporter::Ledger> ledger;
  std::unique_ptr<exporter::AuditLog> audit;
  std::unique_ptr<pipeline::Pipeline> pipe;
  std::unique_ptr<pipeline::CaptureFeed> feed;
  exporter::HttpServer http;
  int port = 0;
  std::string currency;

  std::mutex mutex;  // guards the pipeline and status against the HTTP thread
  // Only the capture thread (on_event, tick, shutdown) touches these: no lock per event.
  ReorderWindow window;
  std::uint64_t last_save_ns = 0;
  std::atomic<bool> enabled{true};
  capture::Status capture_status;
  std::atomic<std::uint64_t> events{0};  // counted without the lock, read by the HTTP thread
  BudgetTracker budgets;
  std::uint64_t last_budget_ns = 0;
  std::shared_ptr<ActionCounters> actions = std::make_shared<ActionCounters>();
  std::uint64_t config_errors = 0;
  std::uint64_t drops_before = 0;  // ring drops of captures since closed (attribution off/on)
  // How long the capture drain waited for `mutex` (HTTP handlers hold it only to copy state).
  std::uint64_t drain_wait_ns = 0;
  std::uint64_t drain_wait_max_ns = 0;
  std::uint64_t tick_max_ns = 0;  // the longest tick (ordering records, the pipeline)
  std::uint64_t next_sweep_ns = 0;

  // The ledger is saved on its own thread: writing and fsyncing a ledger of many client-ids
  // took ~0.5 s under load, and the capture drain would wait for it (ring drops).
  std::thread saver;
  std::mutex saver_mutex;
  std::condition_variable saver_wake;
  bool save_requested = false;
  bool saver_stopping = false;
  std::atomic<std::uint64_t> save_last_ns{0};
  std::atomic<std::uint64_t> save_max_ns{0};
  std::atomic<std::uint64_t> save_errors{0};
  // The nice value fetchcostd started with: budget hooks run at it, not at the raised priority
  // of the capture drain thread that starts them (capture.drain_nice).
  const int start_nice = getpriority(PRIO_PROCESS, 0);
  bool save_failing = false;         // saver thread (or shutdown, after it stopped) only
  std::int64_t compacted_hour = -1;  // likewise

  void start_saver() {
    saver = std::thread([this] {
      std::unique_lock lock(saver_mutex);
      while (true) {
        saver_wake.wait(lock, [this] { return save_requested || saver_stopping; });
        if (saver_stopping) return;
        save_requested = false;
        lock.unlock();
        save_ledger();
        lock.lock();
      }
    });
  }

  void request_save() {
    {
      std::lock_guard lock(saver_mutex);
      save_requested = true;
    }
    saver_wake.notify_one();
  }

  void stop_saver() {
    {
      std::lock_guard lock(saver_mutex);
      saver_stopping = true;
    }
    saver_wake.notify_one();
    if (saver.joinable()) saver.join();
  }

  void save_ledger() {
    const auto start = std::chrono::steady_clock::now();
    // The retention, at start and then once an hour: it only visits the oldest buckets.
    if (const std::int64_t now = std::time(nullptr); now / 3600 != compacted_hour) {
      const auto done = ledger->compact(now);
      compacted_hour = now / 3600;
      if (done.folded || done.dropped)
        std::fprintf(stderr,
                     "fetchcostd: ledger: %zu hourly buckets folded into days, %zu older "
                     "than the retention dropped\n",
                     done.folded, done.dropped);
    }
    if (auto r = ledger->save(); !r) {
      // Counted; logged when saving starts failing. The next save retries (the buckets stay in
      // memory).
      if (!save_failing)
        std::fprintf(stderr, "fetchcostd: ledger: %s\n", r.error().message.c_str());
      save_failing = true;
      ++save_errors;
    } else {
      save_failing = false;
    }
    const auto took =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - start)
                                       .count());
    save_last_ns = took;
    if (took > save_max_ns) save_max_ns = took;
  }

  // Sensor snapshots are reused across scrapes: after the first ones a scrape allocates no
  // per-sensor memory at all (a copy of every sensor is a few MB at the default bound).
  std::mutex snapshot_mutex;
  std::vector<std::unique_ptr<sensors::Snapshot>> spare_snapshots;

  std::shared_ptr<const sensors::Snapshot> take_snapshot() {
    std::unique_ptr<sensors::Snapshot> snap;
    {
      std::lock_guard lock(snapshot_mutex);
      if (!spare_snapshots.empty()) {
        snap = std::move(spare_snapshots.back());
        spare_snapshots.pop_back();
      }
    }
    if (!snap) snap = std::make_unique<sensors::Snapshot>();
    sensors.snapshot(*snap);  // the sensors' own lock, for one copy pass
    return std::shared_ptr<const sensors::Snapshot>(
        snap.release(), [this](const sensors::Snapshot* p) {
          std::unique_ptr<sensors::Snapshot> back(const_cast<sensors::Snapshot*>(p));
          std::lock_guard lock(snapshot_mutex);
          if (spare_snapshots.size() < 2) spare_snapshots.push_back(std::move(back));
        });
  }

  explicit Impl(const Config& c)
      : config(c),
        sensors(sensors::Config{.max_sensors = c.max_sensors,
                                .idle_expiry = std::chrono::nanoseconds(
                                    static_cast<std::int64_t>(c.idle_expiry_seconds * 1e9)),
                                .partition_label = c.partition_label}),
        budgets(c.budgets) {}

  // Cumulative cost per client and per group, for the budgets.
  void evaluate_budgets(std::uint64_t now_ns) {
    if (config.budgets.limits.empty()) return;
    std::map<std::string, std::string> group_of;
    sensors.for_each_group(
        [&](std::string_view c, std::string_view g) { group_of[std::string(c)] = std::string(g); });
    std::map<std::string, double> by_client, by_group;
    sensors.for_each([&](const sensors::SensorView& s) {
      const double cost = s.counters.cost_api + s.counters.cost_egress;
      by_client[std::string(s.client_id)] += cost;
      if (auto g = group_of.find(std::string(s.client_id)); g != group_of.end())
        by_group[g->second] += cost;
    });
    for (const BudgetState& state :
         budgets.update(static_cast<double>(now_ns) / 1e9, by_client, by_group))
      start_action(state);
  }

  void start_action(const BudgetState& state) {
    const auto& b = config.budgets;
    if (b.command.empty() && b.webhook.empty()) return;
    if (actions->in_flight.load() >= kMaxActionsInFlight) {
      ++actions->skipped;
      return;
    }
    nlohmann::json doc{{"client_id", state.limit.client_id},
                       {"group_id", state.limit.group_id},
                       {"budget_per_hour", state.limit.per_hour},
                       {"cost_per_hour", state.cost_per_hour},
                       {"currency", currency},
                       {"window_seconds", b.window_seconds}};
    std::vector<std::string> env{
        "FETCHCOST_CLIENT_ID=" + state.limit.client_id,
        "FETCHCOST_GROUP_ID=" + state.limit.group_id,
        "FETCHCOST_BUDGET_PER_HOUR=" + std::to_string(state.limit.per_hour),
        "FETCHCOST_COST_PER_HOUR=" + std::to_string(state.cost_per_hour),
        "FETCHCOST_CURRENCY=" + currency};
    ++actions->in_flight;
    std::thread([counters = actions, command = b.command, webhook = b.webhook, env,
                 nice = start_nice,
                 body = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)] {
      setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice);
      if (!command.empty()) run_command(command, env, *counters);
      if (!webhook.empty()) post_webhook(webhook, body, *counters);
      --counters->in_flight;
    }).detach();
  }

  nlohmann::json budgets_json() {
    nlohmann::json out = nlohmann::json::array();
    const auto& states = budgets.states();
    for (std::size_t i = 0; i < config.budgets.limits.size(); ++i) {
      const auto& l = config.budgets.limits[i];
      const double rate = i < states.size() ? states[i].cost_per_hour : 0;
      const bool exceeded = i < states.size() && states[i].exceeded;
      out.push_back({{"client_id", l.client_id},
                     {"group_id", l.group_id},
                     {"per_hour", l.per_hour},
                     {"cost_per_hour", rate},
                     {"exceeded", exceeded}});
    }
    return out;
  }

  std::string budget_metrics() {
    std::ostringstream out;
    out << "# HELP fetchcost_budget_exceeded 1 while the cost rate of a client or group is over "
           "its budget\n# TYPE fetchcost_budget_exceeded gauge\n";
    const auto& states = budgets.states();
    auto labels = [](const BudgetLimit& l) {
      return l.client_id.empty() ? "group_id=\"" + escape_label(l.group_id) + "\""
                                 : "client_id=\"" + escape_label(l.client_id) + "\"";
    };
    for (const auto& s : states)
      out << "fetchcost_budget_exceeded{" << labels(s.limit) << "} " << (s.exceeded ? 1 : 0)
          << "\n";
    out << "# HELP fetchcost_budget_cost_per_hour Cost rate over the budget window (money/hour)\n"
           "# TYPE fetchcost_budget_cost_per_hour gauge\n";
    for (const auto& s : states)
      out << "fetchcost_budget_cost_per_hour{" << labels(s.limit) << ",currency=\""
          << escape_label(currency) << "\"} " << s.cost_per_hour << "\n";
    out << "# HELP fetchcost_budget_limit_per_hour The configured budget (money/hour)\n"
           "# TYPE fetchcost_budget_limit_per_hour gauge\n";
    for (const auto& s : states)
      out << "fetchcost_budget_limit_per_hour{" << labels(s.limit) << ",currency=\""
          << escape_label(currency) << "\"} " << s.limit.per_hour << "\n";
    out << "# HELP fetchcost_budget_actions_total Budget commands/webhooks run, by result\n"
           "# TYPE fetchcost_budget_actions_total counter\n"
        << "fetchcost_budget_actions_total{result=\"ok\"} " << actions->ok.load() << "\n"
        << "fetchcost_budget_actions_total{result=\"failed\"} " << actions->failed.load() << "\n"
        << "fetchcost_budget_actions_total{result=\"skipped\"} " << actions->skipped.load() << "\n";
    return out.str();
  }

  exporter::SelfMetrics self_metrics() {
    exporter::SelfMetrics m;
    m.version = kVersion;
    m.attribution_enabled = enabled;
    m.events = events.load(std::memory_order_relaxed);
    m.quiet_fetches = capture_status.totals.quiet_fetches;
    m.quiet_fetch_pauses = capture_status.totals.hold_pauses;
    m.config_errors = config_errors;
    m.local_tier_partitions = tier_map->stats().partitions;
    m.broker_settings_unread = broker_settings_unread;
    m.drain_wait_seconds = static_cast<double>(drain_wait_ns) / 1e9;
    m.spool_bytes = capture_status.spool_bytes;
    m.spool_peak_bytes = capture_status.spool_peak_bytes;
    m.spool_limit_bytes = capture_status.spool_limit_bytes;
    for (const auto& cpu : capture_status.per_cpu) m.ring_drops_per_cpu.push_back(cpu.drops);
    m.attribution_incomplete = incomplete();
    m.probes_attached = capture_status.programs.size();
    for (const auto& t : capture_status.targets)
      for (const auto& l : t.tls) m.probes_attached += l.skipped ? 0 : l.functions.size();
    m.targets = capture_status.targets.size();
    m.programs_timed = capture_status.program_stats.kernel_timing;
    if (m.programs_timed)
      for (const auto& p : capture_status.programs)
        m.programs.push_back({p.name, p.run_count, static_cast<double>(p.run_time_ns) / 1e9});
    if (pipe) {
      const auto& a = pipe->attribution_counters();
      m.reads_exact = a.reads_exact;
      m.reads_estimated = a.reads_estimated;
      m.reads_unattributed = a.reads_unattributed;
      const auto s = pipe->stats();
      m.parse_errors["kafka"] = s.kafka_parse_errors;
      m.parse_errors["http"] = s.http.resyncs;
      m.kafka_requests_truncated = s.kafka_requests_truncated;
    }
    return m;
  }

  // Events lost in the ring buffers (now, or before a detach) leave holes no decoder can fill.
  bool incomplete() const { return drops_before + capture_status.totals.drops > 0; }

  // Hands the due records to the pipeline. Budgeted (from tick), it stops after about
  // kReleaseBudgetNs so the drain goes back to the rings, unless the window already holds
  // kMaxBacklogBytes. Returns whether due records are still held.
  bool release(std::uint64_t before_ns, bool budgeted) {
    const auto deliver = [this](const capture::EventView& view) { feed->on_event(view); };
    if (!budgeted || window.memory_bytes() > kMaxBacklogBytes)
      return window.release(before_ns, deliver);
    const auto start = std::chrono::steady_clock::now();
    while (window.release(before_ns, deliver, kReleaseSlice)) {
      if (std::chrono::steady_clock::now() - start >= std::chrono::nanoseconds(kReleaseBudgetNs))
        return true;
    }
    return false;
  }

  // /api/v1/clients from a snapshot, one sensor row at a time (outside every lock).
  static void stream_clients_json(const sensors::Snapshot& snap, const std::string& head,
                                  const exporter::TextSink& sink) {
    std::unordered_map<std::string_view, std::string_view> groups;
    groups.reserve(snap.groups.size());
    for (const auto& g : snap.groups) groups.emplace(snap.group_client(g), snap.group_id(g));
    const std::size_t n_buckets = snap.latency_buckets_seconds.size() + 1;
    exporter::ChunkWriter w(sink);
    w.text(head).text(",\"sensors\":[");
    bool first = true;
    for (const auto& row : snap.rows) {
      if (!w.ok()) return;
      const sensors::SensorView s = snap.view(row);
      const auto& c = s.counters;
      const auto group = groups.find(s.client_id);
      const nlohmann::json doc{
          {"client_id", s.client_id},
          {"peer_ip", s.peer_ip},
          {"group_id", group == groups.end() ? std::string_view() : group->second},
          {"topic", s.topic},
          {"partition", s.partition},
          {"method", sensors::method_name(s.method)},
          {"bytes", c.remote_bytes},
          {"requests", c.requests},
          {"errors", c.errors},
          {"object_bytes", c.object_bytes_read},
          {"delivered_bytes", c.bytes_delivered},
          {"read_amplification", c.read_amplification()},
          {"latency_count", c.latency_count},
          {"latency_sum_seconds", c.latency_sum_seconds},
          {"latency_buckets", std::vector<std::uint64_t>(c.latency_buckets.begin(),
                                                         c.latency_buckets.begin() + n_buckets)},
          {"cost_api", c.cost_api},
          {"cost_egress", c.cost_egress},
          {"folded", s.folded}};
      if (!first) w.text(",");
      first = false;
      w.text(doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
      w.maybe_flush();
    }
    w.text("]}");
    w.flush();
  }

  void routes() {
    // The service lock only while copying what the page shows (the capture drain needs it);
    // the page is rendered and sent from the copies, in pieces, after the handler returned.
    http.get("/metrics", [this](const std::string&) {
      exporter::SelfMetrics self;
      std::string budgets_text;
      exporter::MetricsOptions options;
      {
        std::lock_guard lock(mutex);
        self = self_metrics();
        budgets_text = budget_metrics();
        options.currency = currency;
      }
      auto snap = take_snapshot();
      exporter::HttpResponse r{200, "text/plain; version=0.0.4", {}, {}};
      r.stream = [snap, self = std::move(self), budgets_text = std::move(budgets_text),
                  options = std::move(options)](const exporter::TextSink& sink) {
        exporter::render_prometheus(*snap, self, options, sink);
        sink(budgets_text);
      };
      return r;
    });
    http.get("/healthz", [](const std::string&) {
      return exporter::HttpResponse{200, "text/plain", "ok\n"};
    });
    http.get("/readyz", [this](const std::string&) {
      std::lock_guard lock(mutex);
      const bool ready = !capture_status.targets.empty();
      return exporter::HttpResponse{ready ? 200 : 503, "text/plain",
                                    ready ? "ready\n" : "no broker process watched yet\n"};
    });
    http.get("/api/v1/clients", [this](const std::string&) {
      std::string head;
      {
        std::lock_guard lock(mutex);
        nlohmann::json doc{{"currency", currency},
                           {"latency_buckets_seconds", sensors.config().latency_buckets_seconds},
                           {"budgets", budgets_json()}};
        head = doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      }
      head.pop_back();  // the closing brace: the sensors follow
      auto snap = take_snapshot();
      exporter::HttpResponse r{200, "application/json", {}, {}};
      r.stream = [snap, head = std::move(head)](const exporter::TextSink& sink) {
        stream_clients_json(*snap, head, sink);
      };
      return r;
    });
    http.get("/api/v1/status", [this](const std::string&) {
      std::lock_guard lock(mutex);
      nlohmann::json targets = nlohmann::json::array();
      for (const auto& t : capture_status.targets) {
        nlohmann::json libs = nlohmann::json::array();
        for (const auto& l : t.tls)
          libs.push_back({{"path", l.path},
                          {"flavour", l.flavour},
                          {"functions", l.functions},
                          {"skipped", l.skipped},
                          {"error", l.error}});
        targets.push_back({{"pid", t.pid},
                           {"comm", t.comm},
                           {"tls", libs},
                           {"existing_connections", t.existing_connections}});
      }
      nlohmann::json drops = nlohmann::json::array();
      for (const auto& c : capture_status.per_cpu) drops.push_back(c.drops);
      const auto m = self_metrics();
      nlohmann::json doc{{"variant", capture::variant_name(capture_status.variant)},
                         {"targets", targets},
                         {"events", capture_status.totals.events},
                         {"drops_per_cpu", drops},
                         {"attribution_enabled", enabled.load()},
                         {"attribution_complete", !incomplete()},
                         {"reads",
                          {{"exact", m.reads_exact},
                           {"estimated", m.reads_estimated},
                           {"unattributed", m.reads_unattributed}}},
                         {"price_table", config.price_table},
                         {"listen", config.listen}};
      doc["version"] = kVersion;
      doc["currency"] = currency;
      nlohmann::json programs = nlohmann::json::array();
      for (const auto& p : capture_status.programs)
        programs.push_back({{"name", p.name},
                            {"run_count", p.run_count},
                            {"run_time_ns", p.run_time_ns},
                            {"verified_insns", p.verified_insns}});
      doc["programs"] = programs;
      doc["program_stats"] = {{"requested", config.program_stats},
                              {"kernel_timing", capture_status.program_stats.kernel_timing},
                              {"held", capture_status.program_stats.held},
                              {"error", capture_status.program_stats.error}};
      doc["programs_load_seconds"] = capture_status.load_seconds;
      doc["probes_attached"] = m.probes_attached;
      doc["ring_bytes_per_cpu"] = capture_status.ring_bytes_per_cpu;
      doc["ring_reader"] = {{"realtime", capture_status.reader_realtime},
                            {"error", capture_status.reader_priority_error},
                            {"spool_bytes", capture_status.spool_bytes},
                            {"spool_peak_bytes", capture_status.spool_peak_bytes},
                            {"spool_limit_bytes", capture_status.spool_limit_bytes},
                            {"passes", capture_status.reader_passes},
                            {"pass_max_seconds", capture_status.reader_pass_max_seconds},
                            {"idle_polls", capture_status.idle_polls},
                            {"wakeup_bytes", capture_status.wakeup_bytes},
                            {"wakeups", capture_status.totals.wakeups}};
      nlohmann::json events_per_cpu = nlohmann::json::array();
      for (const auto& c : capture_status.per_cpu) events_per_cpu.push_back(c.events);
      doc["events_per_cpu"] = events_per_cpu;
      // The counters in this document were read then (refreshed about once a second).
      doc["counters_read_unix_ns"] = capture_status.counters_read_unix_ns;
      doc["drops"] = capture_status.totals.drops;
      doc["tls_events"] = capture_status.totals.tls_events;
      doc["folded_calls"] = capture_status.totals.folded;
      doc["folded_read_pieces"] = capture_status.folded_read_pieces;
      doc["folded_by_hint"] = capture_status.totals.folded_by_hint;
      doc["tls_ciphertext_calls_skipped"] = capture_status.totals.ciphertext_skipped;
      doc["responses_not_gathered"] = capture_status.totals.gather_no_slot;
      doc["quiet_fetches"] = {
          {"enabled", config.skip_quiet_fetches &&
                          capture_status.variant == capture::Variant::kSockTracepoints},
          {"left_out", capture_status.totals.quiet_fetches},
          {"pauses", capture_status.totals.hold_pauses}};
      doc["handled_events"] = events.load(std::memory_order_relaxed);
      doc["drain"] = {{"wait_seconds_total", static_cast<double>(drain_wait_ns) / 1e9},
                      {"wait_max_seconds", static_cast<double>(drain_wait_max_ns) / 1e9},
                      {"tick_max_seconds", static_cast<double>(tick_max_ns) / 1e9},
                      {"yields", capture_status.drain_yields},
                      {"idle_now", capture_status.drain_idle},
                      {"promotions", capture_status.drain_promotions},
                      {"error", capture_status.drain_priority_error}};
      doc["ledger_save"] = {{"last_seconds", static_cast<double>(save_last_ns.load()) / 1e9},
                            {"max_seconds", static_cast<double>(save_max_ns.load()) / 1e9},
                            {"errors", save_errors.load()}};
      doc["parse_errors"] = m.parse_errors;
      if (pipe) {  // what the capture's holes cost the decoder, and what the bounds left out
        const auto s = pipe->stats();
        doc["kafka_decoder"] = {{"frames_truncated", s.kafka_frames_truncated},
                                {"requests_truncated", s.kafka_requests_truncated},
                                {"resyncs", s.kafka_resyncs},
                                {"session_misses", s.kafka_session_misses},
                                {"session_partitions_capped", s.kafka_session_partitions_capped}};
        // What the object-store connections' holes cost: GETs whose request or response the
        // capture missed go unattributed (orphan responses) or count as failed (unanswered).
        doc["object_store_http"] = {{"requests", s.http.requests},
                                    {"responses", s.http.responses},
                                    {"resyncs", s.http.resyncs},
                                    {"orphan_responses", s.http.orphan_responses},
                                    {"unanswered", s.http.unanswered},
                                    {"retried_requests", s.http.retried_requests},
                                    {"dropped_requests", s.http.dropped_requests}};
        const auto& a = pipe->attribution_counters();
        doc["attribution"] = {{"fetches_tracked", a.fetches_tracked},
                              {"pending_evicted", a.pending_evicted}};
      }
      const auto ts = tier_map->stats();
      doc["local_tier"] = {
          {"log_dirs", tier_map->log_dirs()},
          {"origin", log_dirs_origin},
          {"error", !log_dirs_error.empty() || !config.log_dirs.empty() ? log_dirs_error
                                                                        : broker_settings_error},
          {"partitions", ts.partitions},
          {"log_dirs_missing", ts.log_dirs_missing}};
      doc["target_search"] = {{"sweeps", target_sweeps},
                              {"processes_read", target_processes_read},
                              {"exec_hook_error", capture_status.exec_hook_error}};
      doc["broker_settings"] = {{"unread", broker_settings_unread},
                                {"error", broker_settings_error}};
      const auto st = sensors.stats();
      doc["sensors"] = {{"live", st.live_sensors},
                        {"other", st.other_sensors},
                        {"evictions", st.evictions},
                        {"expirations", st.expirations},
                        {"approx_memory_bytes", st.approx_memory_bytes}};
      doc["budgets"] = budgets_json();
      doc["budget_actions"] = {{"ok", actions->ok.load()},
                               {"failed", actions->failed.load()},
                               {"skipped", actions->skipped.load()}};
      doc["ledger"] = ledger->path();
      doc["ledger_buckets"] = ledger->size();
      doc["config"] = config_json(config);
      return exporter::HttpResponse{
          200, "application/json",
          doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
    });
    // The newest attributed object reads (metadata only), for top's drill-down.
    http.get_with_query("/api/v1/recent", [this](const std::map<std::string, std::string>& q) {
      std::size_t limit = 50;
      if (auto it = q.find("limit"); it != q.end()) {
        try {
          limit =
              std::min<std::size_t>(std::stoul(it->second), exporter::AuditLog::kRecentCapacity);
        } catch (const std::exception&) {
          return exporter::HttpResponse{400, "application/json",
                                        R"({"error":"limit must be a number, e.g. ?limit=20"})"};
        }
      }
      const auto client = q.count("client") ? q.at("client") : std::string();
      nlohmann::json rows = nlohmann::json::array();
      std::lock_guard lock(mutex);
      for (const auto& r : audit->recent(client, limit))
        rows.push_back({{"ts_ms", r.unix_ms},
                        {"client_id", r.client_id},
                        {"group_id", r.group_id},
                        {"topic", r.topic},
                        {"partition", r.partition},
                        {"object_key", r.object_key},
                        {"bytes", r.bytes},
                        {"status", r.status},
                        {"method", r.method}});
      nlohmann::json doc{{"capacity", exporter::AuditLog::kRecentCapacity}, {"reads", rows}};
      return exporter::HttpResponse{
          200, "application/json",
          doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
    });
    // Chargeback ledger buckets overlapping [from, to) (unix seconds; hourly buckets, and daily
    // ones ("hours": 24) for days older than ledger.hourly_days).
    http.get_with_query("/api/v1/report", [this](const std::map<std::string, std::string>& q) {
      std::int64_t from = 0, to = std::numeric_limits<std::int64_t>::max();
      try {
        if (q.count("from")) from = std::stoll(q.at("from"));
        if (q.count("to")) to = std::stoll(q.at("to"));
      } catch (const std::exception&) {
        return exporter::HttpResponse{
            400, "application/json",
            R"({"error":"from and to are unix seconds, e.g. ?from=1767225600"})"};
      }
      nlohmann::json rows = nlohmann::json::array();
      for (const auto& [k, v] : ledger->query(from, to))
        rows.push_back({{"hour", k.hour},
                        {"hours", k.hours},
                        {"client_id", k.client_id},
                        {"group_id", k.group_id},
                        {"topic", k.topic},
                        {"method", k.method},
                        {"bytes", v.bytes},
                        {"requests", v.requests},
                        {"errors", v.errors},
                        {"cost_api", v.cost_api},
                        {"cost_egress", v.cost_egress}});
      nlohmann::json doc{{"version", 1}, {"currency", currency}, {"buckets", rows}};
      return exporter::HttpResponse{
          200, "application/json",
          doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
    });
    http.post("/api/v1/attribution", [this](const std::string& body) {
      try {
        enabled = nlohmann::json::parse(body).at("enabled").get<bool>();
      } catch (const std::exception&) {
        return exporter::HttpResponse{400, "application/json",
                                      R"({"error":"send {\"enabled\": true|false}"})"};
      }
      return exporter::HttpResponse{200, "application/json",
                                    nlohmann::json{{"enabled", enabled.load()}}.dump()};
    });
  }
};

Result<std::unique_ptr<Service>> Service::create(const Config& config) {
  auto impl = std::make_unique<Impl>(config);
  auto prices = cost::load_price_table(config.price_table);
  if (!prices) return make_error("price_table: " + prices.error().message);
  impl->currency = prices->currency;
  // Without log_dirs in the config the map starts empty and takes the broker's own log dirs
  // once a broker process is watched (use_broker_log_dirs).
  impl->tier_map = std::make_unique<tier::LocalTierMap>(
      tier::Options{.log_dirs = config.log_dirs,
                    .rescan_interval = std::chrono::milliseconds(
                        static_cast<std::int64_t>(config.log_dirs_rescan_seconds * 1000)),
                    .use_inotify = config.log_dirs_inotify});
  if (auto r = impl->tier_map->start(); !r) return make_error("log_dirs: " + r.error().message);
  impl->tier_view = std::make_unique<pipeline::TierView>(*impl->tier_map);
  if (!config.log_dirs.empty()) impl->log_dirs_origin = "config";
  auto ledger = exporter::Ledger::open(
      config.state_dir, exporter::LedgerRetention{.retention_days = config.ledger_retention_days,
                                                  .hourly_days = config.ledger_hourly_days});
  if (!ledger) return ledger.error();
  impl->ledger = std::move(*ledger);
  {
    // Without a path the audit log only keeps the in-memory ring behind /api/v1/recent.
    auto audit = exporter::AuditLog::open(config.audit_log_path, config.audit_log_max_bytes,
                                          config.audit_log_keep);
    if (!audit) return audit.error();
    impl->audit = std::move(*audit);
  }
  pipeline::PipelineConfig pc;
  pc.kafka_ports = config.kafka_ports;
  pc.object_store_ports = config.object_store_ports;
  for (const auto& cidr : config.object_store_cidrs)
    pc.object_store_cidrs.push_back(*pipeline::parse_cidr(cidr));
  pc.object_store_hosts = config.object_store_hosts;
  pc.key_layout = config.key_layout;
  pc.virtual_host_suffixes = config.virtual_host_suffixes;
  auto pipe =
      pipeline::Pipeline::create(pc, std::move(*prices), impl->sensors, impl->tier_view.get(),
                                 impl->ledger.get(), impl->audit.get());
  if (!pipe) return pipe.error();
  impl->pipe = std::move(*pipe);
  impl->feed = std::make_unique<pipeline::CaptureFeed>(*impl->pipe);
  impl->enabled = config.attribution_enabled;
  impl->routes();
  auto port = impl->http.start(config.listen);
  if (!port) return port.error();
  impl->port = *port;
  impl->start_saver();
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Service::~Service() {
  impl_->http.stop();
  impl_->stop_saver();
}

void Service::on_event(const capture::EventView& event) {
  // No lock: the held records belong to the capture thread (see Impl::window).
  // One writer (this thread): a plain store, not a locked read-modify-write per record.
  impl_->events.store(impl_->events.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  if (impl_->enabled) impl_->window.hold(event);
}

bool Service::tick(std::uint64_t now_ns, std::uint64_t handed_through_ns) {
  const auto wait_start = std::chrono::steady_clock::now();
  std::lock_guard lock(impl_->mutex);
  const auto locked = std::chrono::steady_clock::now();
  const auto waited = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(locked - wait_start).count());
  impl_->drain_wait_ns += waited;
  impl_->drain_wait_max_ns = std::max(impl_->drain_wait_max_ns, waited);
  // Not "now": a record stamped before it may still be in a ring (a decoding pass took longer
  // than the window, or the reader was late); handed on after later ones, an object-store
  // response would find no request, and a GET no fetch. At most kMaxSettleLagNs behind, though:
  // rings that never empty (an overload that drops records anyway) must not hold records here
  // without bound.
  const std::uint64_t settled = std::max(std::min(now_ns, handed_through_ns),
                                         now_ns > kMaxSettleLagNs ? now_ns - kMaxSettleLagNs : 0);
  const bool behind =
      impl_->release(settled > kReorderWindowNs ? settled - kReorderWindowNs : 0, true);
  // Behind, the window still holds records that may fill the gaps a sweep would close.
  if (!behind && now_ns >= impl_->next_sweep_ns) {
    const auto sweep_start = std::chrono::steady_clock::now();
    impl_->pipe->tick(settled);
    const auto swept =
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                       std::chrono::steady_clock::now() - sweep_start)
                                       .count());
    impl_->next_sweep_ns = now_ns + std::max(kSweepMinIntervalNs, kSweepRestFactor * swept);
  }
  if (now_ns - impl_->last_budget_ns >= kBudgetIntervalNs) {
    impl_->evaluate_budgets(now_ns);
    impl_->last_budget_ns = now_ns;
  }
  if (now_ns - impl_->last_save_ns >= kLedgerSaveIntervalNs) {
    impl_->request_save();
    impl_->last_save_ns = now_ns;
  }
  const auto took = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                   std::chrono::steady_clock::now() - locked)
                                                   .count());
  impl_->tick_max_ns = std::max(impl_->tick_max_ns, took);
  return behind;
}

void Service::set_capture_status(const capture::Status& status) {
  std::lock_guard lock(impl_->mutex);
  // An empty status means the capture was closed: keep its drops for attribution_complete.
  if (status.per_cpu.empty()) impl_->drops_before += impl_->capture_status.totals.drops;
  impl_->capture_status = status;
}

bool Service::attribution_enabled() const {
  return impl_->enabled;
}

Result<void> Service::reload(const Config& config) {
  auto prices = cost::load_price_table(config.price_table);
  if (!prices) {
    count_config_error();
    return make_error("price_table: " + prices.error().message);
  }
  std::lock_guard lock(impl_->mutex);
  impl_->currency = prices->currency;
  impl_->pipe->set_price_table(std::move(*prices));
  impl_->config.price_table = config.price_table;
  impl_->enabled = config.attribution_enabled;
  return {};
}

Result<bool> Service::use_broker_log_dirs(std::vector<std::string> dirs, std::string origin) {
  if (!impl_->config.log_dirs.empty()) return false;  // the config's (set at create, never after)
  // A restarted broker names the same dirs: only where they came from changes.
  const bool other = dirs != impl_->tier_map->log_dirs();
  const auto switched = other ? impl_->tier_map->set_log_dirs(std::move(dirs)) : Result<void>();
  std::lock_guard lock(impl_->mutex);
  impl_->log_dirs_origin = std::move(origin);
  impl_->log_dirs_error = switched ? std::string() : switched.error().message;
  if (!switched) return switched.error();
  return other;
}

void Service::set_target_search(std::uint64_t sweeps, std::uint64_t processes_read) {
  std::lock_guard lock(impl_->mutex);
  impl_->target_sweeps = sweeps;
  impl_->target_processes_read = processes_read;
}

void Service::set_broker_settings_unread(std::size_t brokers, std::string error) {
  std::lock_guard lock(impl_->mutex);
  impl_->broker_settings_unread = brokers;
  impl_->broker_settings_error = std::move(error);
}

std::vector<std::uint16_t> Service::add_kafka_ports(const std::vector<std::uint16_t>& ports) {
  std::lock_guard lock(impl_->mutex);
  auto& known = impl_->config.kafka_ports;
  std::vector<std::uint16_t> fresh;
  for (std::uint16_t port : ports)
    if (std::find(known.begin(), known.end(), port) == known.end()) fresh.push_back(port);
  known.insert(known.end(), fresh.begin(), fresh.end());
  impl_->pipe->add_kafka_ports(fresh);
  return fresh;
}

std::vector<std::uint16_t> Service::kafka_ports() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->config.kafka_ports;
}

void Service::count_config_error() {
  std::lock_guard lock(impl_->mutex);
  ++impl_->config_errors;
}
int Service::port() const {
  return impl_->port;
}

void Service::shutdown() {
  std::lock_guard lock(impl_->mutex);
  impl_->release(~0ull, false);
  impl_->pipe->finish(monotonic_ns());
  impl_->stop_saver();
  impl_->save_ledger();
}

}  // namespace fc::daemon
