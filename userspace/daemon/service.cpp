#include "daemon/service.h"

#include <algorithm>
#include <ctime>
#include <atomic>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <vector>

#include "export/export.h"
#include "pipeline/capture_feed.h"
#include "pipeline/pipeline.h"
#include "tier/tier.h"

namespace fc::daemon {
namespace {

constexpr std::uint64_t kReorderWindowNs = 5'000'000;  // records older than this are settled
constexpr std::uint64_t kLedgerSaveIntervalNs = 10'000'000'000;

// An owned copy of one capture record (the ring buffer slot is reused after the callback).
struct HeldRecord {
  std::uint64_t time_ns = 0;
  std::uint64_t sequence = 0;
  fc_event_common common{};
  fc_data_event data{};
  fc_conn_event conn{};
  bool is_data = false;
  std::vector<std::uint8_t> payload;
  std::vector<fc_segment> segments;
};

// The tier map as the attribution stage wants it.
class TierAdapter : public attribution::LocalTier {
 public:
  explicit TierAdapter(const tier::LocalTierMap& map) : map_(map) {}
  std::optional<std::int64_t> local_log_start(std::string_view topic,
                                              std::int32_t partition) const override {
    return map_.local_log_start(topic, partition);
  }
  std::optional<std::string> topic_name(std::string_view topic_id) const override {
    return map_.topic_name(topic_id);
  }

 private:
  const tier::LocalTierMap& map_;
};

}  // namespace

struct Service::Impl {
  Config config;
  sensors::SensorTable sensors;
  std::unique_ptr<tier::LocalTierMap> tier_map;
  std::unique_ptr<TierAdapter> tier_adapter;
  std::unique_ptr<exporter::Ledger> ledger;
  std::unique_ptr<exporter::AuditLog> audit;
  std::unique_ptr<pipeline::Pipeline> pipe;
  std::unique_ptr<pipeline::CaptureFeed> feed;
  exporter::HttpServer http;
  int port = 0;
  std::string currency;

  std::mutex mutex;  // guards the pipeline and status against the HTTP thread
  std::vector<HeldRecord> held;
  std::uint64_t sequence = 0;
  std::uint64_t last_save_ns = 0;
  std::atomic<bool> enabled{true};
  capture::Status capture_status;
  std::uint64_t events = 0;

  explicit Impl(const Config& c)
      : config(c),
        sensors(sensors::Config{.max_sensors = c.max_sensors,
                                .idle_expiry = std::chrono::nanoseconds(
                                    static_cast<std::int64_t>(c.idle_expiry_seconds * 1e9)),
                                .partition_label = c.partition_label}) {}

  exporter::SelfMetrics self_metrics() {
    exporter::SelfMetrics m;
    m.version = "0.1.0";
    m.attribution_enabled = enabled;
    m.events = events;
    for (const auto& cpu : capture_status.per_cpu) m.ring_drops_per_cpu.push_back(cpu.drops);
    m.probes_attached = capture_status.programs.size();
    for (const auto& t : capture_status.targets)
      for (const auto& l : t.tls) m.probes_attached += l.skipped ? 0 : l.functions.size();
    m.targets = capture_status.targets.size();
    if (pipe) {
      const auto& a = pipe->attribution_counters();
      m.reads_exact = a.reads_exact;
      m.reads_estimated = a.reads_estimated;
      m.reads_unattributed = a.reads_unattributed;
      const auto s = pipe->stats();
      m.parse_errors["kafka"] = s.kafka_parse_errors;
      m.parse_errors["http"] = s.http_resyncs;
    }
    return m;
  }

  void release(std::uint64_t before_ns) {
    std::sort(held.begin(), held.end(), [](const HeldRecord& a, const HeldRecord& b) {
      return a.time_ns != b.time_ns ? a.time_ns < b.time_ns : a.sequence < b.sequence;
    });
    std::size_t n = 0;
    while (n < held.size() && held[n].time_ns < before_ns) ++n;
    for (std::size_t i = 0; i < n; ++i) {
      HeldRecord& r = held[i];
      capture::EventView view{r.common};
      if (r.is_data) view.data = &r.data;
      else view.conn = &r.conn;
      view.payload = r.payload;
      view.segments = r.segments;
      feed->on_event(view);
    }
    held.erase(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(n));
  }

  nlohmann::json clients_json() {
    nlohmann::json rows = nlohmann::json::array();
    std::map<std::string, std::string> groups;
    sensors.for_each_group([&](std::string_view c, std::string_view g) {
      groups[std::string(c)] = std::string(g);
    });
    sensors.for_each([&](const sensors::SensorView& s) {
      const auto& c = s.counters;
      rows.push_back({{"client_id", s.client_id},
                      {"group_id", groups.count(std::string(s.client_id)) ? groups[std::string(s.client_id)] : ""},
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
                      {"cost_api", c.cost_api},
                      {"cost_egress", c.cost_egress},
                      {"folded", s.folded}});
    });
    return rows;
  }

  void routes() {
    http.get("/metrics", [this](const std::string&) {
      std::lock_guard lock(mutex);
      return exporter::HttpResponse{200, "text/plain; version=0.0.4",
                                    exporter::render_prometheus(sensors, self_metrics(), {currency})};
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
      std::lock_guard lock(mutex);
      nlohmann::json doc{{"currency", currency}, {"sensors", clients_json()}};
      return exporter::HttpResponse{200, "application/json", doc.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)};
    });
    http.get("/api/v1/status", [this](const std::string&) {
      std::lock_guard lock(mutex);
      nlohmann::json targets = nlohmann::json::array();
      for (const auto& t : capture_status.targets) {
        nlohmann::json libs = nlohmann::json::array();
        for (const auto& l : t.tls)
          libs.push_back({{"path", l.path}, {"flavour", l.flavour}, {"functions", l.functions},
                          {"skipped", l.skipped}, {"error", l.error}});
        targets.push_back({{"pid", t.pid}, {"comm", t.comm}, {"tls", libs},
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
                         {"reads", {{"exact", m.reads_exact}, {"estimated", m.reads_estimated},
                                    {"unattributed", m.reads_unattributed}}},
                         {"price_table", config.price_table},
                         {"listen", config.listen}};
      return exporter::HttpResponse{200, "application/json", doc.dump()};
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
  if (!config.log_dirs.empty()) {
    impl->tier_map = std::make_unique<tier::LocalTierMap>(tier::Options{.log_dirs = config.log_dirs});
    if (auto r = impl->tier_map->start(); !r) return make_error("log_dirs: " + r.error().message);
    impl->tier_adapter = std::make_unique<TierAdapter>(*impl->tier_map);
  }
  auto ledger = exporter::Ledger::open(config.state_dir);
  if (!ledger) return ledger.error();
  impl->ledger = std::move(*ledger);
  if (!config.audit_log_path.empty()) {
    auto audit = exporter::AuditLog::open(config.audit_log_path, config.audit_log_max_bytes,
                                          config.audit_log_keep);
    if (!audit) return audit.error();
    impl->audit = std::move(*audit);
  }
  pipeline::PipelineConfig pc;
  pc.kafka_ports = config.kafka_ports;
  pc.object_store_ports = config.object_store_ports;
  pc.key_layout = config.key_layout;
  pc.virtual_host_suffixes = config.virtual_host_suffixes;
  auto pipe = pipeline::Pipeline::create(pc, std::move(*prices), impl->sensors,
                                         impl->tier_adapter.get(), impl->ledger.get(),
                                         impl->audit.get());
  if (!pipe) return pipe.error();
  impl->pipe = std::move(*pipe);
  impl->feed = std::make_unique<pipeline::CaptureFeed>(*impl->pipe);
  impl->enabled = config.attribution_enabled;
  impl->routes();
  auto port = impl->http.start(config.listen);
  if (!port) return port.error();
  impl->port = *port;
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Service::~Service() { impl_->http.stop(); }

void Service::on_event(const capture::EventView& event) {
  std::lock_guard lock(impl_->mutex);
  ++impl_->events;
  if (!impl_->enabled) return;
  HeldRecord r;
  r.time_ns = event.common.timestamp_ns;
  r.sequence = impl_->sequence++;
  r.common = event.common;
  if (event.data) {
    r.is_data = true;
    r.data = *event.data;
    r.payload.assign(event.payload.begin(), event.payload.end());
    r.segments.assign(event.segments.begin(), event.segments.end());
  } else if (event.conn) {
    r.conn = *event.conn;
  } else {
    return;
  }
  impl_->held.push_back(std::move(r));
}

void Service::tick(std::uint64_t now_ns) {
  std::lock_guard lock(impl_->mutex);
  impl_->release(now_ns > kReorderWindowNs ? now_ns - kReorderWindowNs : 0);
  impl_->pipe->tick(now_ns);
  if (now_ns - impl_->last_save_ns >= kLedgerSaveIntervalNs) {
    (void)impl_->ledger->save();
    impl_->last_save_ns = now_ns;
  }
}

void Service::set_capture_status(const capture::Status& status) {
  std::lock_guard lock(impl_->mutex);
  impl_->capture_status = status;
}

bool Service::attribution_enabled() const { return impl_->enabled; }
int Service::port() const { return impl_->port; }

void Service::shutdown() {
  std::lock_guard lock(impl_->mutex);
  impl_->release(~0ull);
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  impl_->pipe->finish(static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<std::uint64_t>(ts.tv_nsec));
  (void)impl_->ledger->save();
}

}  // namespace fc::daemon
