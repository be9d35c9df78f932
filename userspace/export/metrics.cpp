// Prometheus text format through prometheus-cpp's MetricFamily and TextSerializer (which escape
// label values); the sensor table is walked once per scrape.
#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <map>
#include <sstream>

#include "export/export.h"

namespace fc::exporter {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

ClientMetric counter(std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  m.counter.value = value;
  return m;
}

ClientMetric gauge(std::vector<ClientMetric::Label> labels, double value) {
  ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  return m;
}

}  // namespace

std::string render_prometheus(const sensors::SensorTable& sensors, const SelfMetrics& self,
                              const MetricsOptions& options) {
  auto bytes = family("kafka_server_remote_fetch_bytes_total",
                      "Bytes the broker read from remote storage for this client's fetches",
                      MetricType::Counter);
  auto requests = family("kafka_server_remote_fetch_requests_total",
                         "Remote storage GET requests caused by this client's fetches",
                         MetricType::Counter);
  auto errors = family("fetchcost_remote_fetch_errors_total",
                       "Failed remote storage GETs caused by this client's fetches",
                       MetricType::Counter);
  auto latency = family("kafka_server_remote_fetch_latency_seconds",
                        "Remote read time of a fetch (first GET start to last GET end)",
                        MetricType::Histogram);
  auto cost = family("fetchcost_remote_fetch_cost_total",
                     "Money the remote reads of this client cost under the price table in force",
                     MetricType::Counter);
  auto object_bytes = family("fetchcost_remote_fetch_object_bytes_total",
                             "Object bytes read for fetches that were answered",
                             MetricType::Counter);
  auto delivered = family("fetchcost_remote_fetch_delivered_bytes_total",
                          "Bytes of remote data the broker delivered to the client",
                          MetricType::Counter);
  auto amplification = family("fetchcost_read_amplification",
                              "Object bytes read / bytes delivered to the client",
                              MetricType::Gauge);
  const auto& bounds = sensors.config().latency_buckets_seconds;

  sensors.for_each([&](const sensors::SensorView& s) {
    // peer_ip on every client series whose address is known: joins with kube_pod_info{pod_ip}.
    std::vector<ClientMetric::Label> labels{{"client_id", std::string(s.client_id)}};
    if (!s.peer_ip.empty()) labels.push_back({"peer_ip", std::string(s.peer_ip)});
    labels.push_back({"topic", std::string(s.topic)});
    if (s.partition != sensors::kNoPartition)
      labels.push_back({"partition", std::to_string(s.partition)});
    labels.push_back({"method", std::string(sensors::method_name(s.method))});
    const auto& c = s.counters;
    bytes.metric.push_back(counter(labels, static_cast<double>(c.remote_bytes)));
    requests.metric.push_back(counter(labels, static_cast<double>(c.requests)));
    errors.metric.push_back(counter(labels, static_cast<double>(c.errors)));
    object_bytes.metric.push_back(counter(labels, static_cast<double>(c.object_bytes_read)));
    delivered.metric.push_back(counter(labels, static_cast<double>(c.bytes_delivered)));
    amplification.metric.push_back(gauge(labels, c.read_amplification()));

    ClientMetric h;
    h.label = labels;
    h.histogram.sample_count = c.latency_count;
    h.histogram.sample_sum = c.latency_sum_seconds;
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < bounds.size(); ++i) {
      cumulative += c.latency_buckets[i];
      h.histogram.bucket.push_back({cumulative, bounds[i]});
    }
    cumulative += c.latency_buckets[bounds.size()];
    h.histogram.bucket.push_back({cumulative, std::numeric_limits<double>::infinity()});
    latency.metric.push_back(std::move(h));

    for (auto [component, value] : {std::pair{"api", c.cost_api}, std::pair{"egress", c.cost_egress}}) {
      auto with = labels;
      with.push_back({"component", component});
      with.push_back({"currency", options.currency});
      cost.metric.push_back(counter(std::move(with), value));
    }
  });

  auto groups = family("fetchcost_client_group_info", "Consumer group of a client id (value 1)",
                       MetricType::Gauge);
  sensors.for_each_group([&](std::string_view client, std::string_view group) {
    groups.metric.push_back(gauge({{"client_id", std::string(client)}, {"group_id", std::string(group)}}, 1));
  });

  const auto stats = sensors.stats();
  auto sensor_count = family("fetchcost_sensors", "Sensors held (live, or __other__ folds)",
                             MetricType::Gauge);
  sensor_count.metric.push_back(gauge({{"state", "live"}}, static_cast<double>(stats.live_sensors)));
  sensor_count.metric.push_back(gauge({{"state", "other"}}, static_cast<double>(stats.other_sensors)));
  auto evictions = family("fetchcost_sensor_evictions_total",
                          "Sensors folded into __other__ (reason=lru|idle)", MetricType::Counter);
  evictions.metric.push_back(counter({{"reason", "lru"}}, static_cast<double>(stats.evictions)));
  evictions.metric.push_back(counter({{"reason", "idle"}}, static_cast<double>(stats.expirations)));
  auto sensor_memory = family("fetchcost_sensor_memory_bytes", "Approximate memory of the sensors",
                              MetricType::Gauge);
  sensor_memory.metric.push_back(gauge({}, static_cast<double>(stats.approx_memory_bytes)));

  auto events = family("fetchcost_events_total", "Capture events handled", MetricType::Counter);
  events.metric.push_back(counter({}, static_cast<double>(self.events)));
  auto drops = family("fetchcost_ring_drops_total",
                      "Capture events lost because a CPU's ring buffer was full",
                      MetricType::Counter);
  for (std::size_t cpu = 0; cpu < self.ring_drops_per_cpu.size(); ++cpu)
    drops.metric.push_back(counter({{"cpu", std::to_string(cpu)}},
                                   static_cast<double>(self.ring_drops_per_cpu[cpu])));
  auto parse = family("fetchcost_parse_errors_total", "Malformed input skipped, by decoder",
                      MetricType::Counter);
  for (const auto& [decoder, n] : self.parse_errors)
    parse.metric.push_back(counter({{"decoder", decoder}}, static_cast<double>(n)));
  auto reads = family("fetchcost_object_reads_total",
                      "Object reads seen, by attribution outcome", MetricType::Counter);
  reads.metric.push_back(counter({{"outcome", "exact"}}, static_cast<double>(self.reads_exact)));
  reads.metric.push_back(counter({{"outcome", "estimated"}}, static_cast<double>(self.reads_estimated)));
  reads.metric.push_back(counter({{"outcome", "unattributed"}}, static_cast<double>(self.reads_unattributed)));
  auto probes = family("fetchcost_probes_attached", "BPF programs and uprobes attached",
                       MetricType::Gauge);
  probes.metric.push_back(gauge({}, static_cast<double>(self.probes_attached)));
  auto targets = family("fetchcost_targets", "Broker processes watched", MetricType::Gauge);
  targets.metric.push_back(gauge({}, static_cast<double>(self.targets)));
  auto enabled = family("fetchcost_attribution_enabled", "1 when attribution is on",
                        MetricType::Gauge);
  enabled.metric.push_back(gauge({}, self.attribution_enabled ? 1 : 0));
  auto config_errors = family("fetchcost_config_errors_total",
                              "Config reloads refused (the running config was kept)",
                              MetricType::Counter);
  config_errors.metric.push_back(counter({}, static_cast<double>(self.config_errors)));
  auto sanitized = family("fetchcost_sanitized_labels_total",
                          "Client ids and topics changed to be label values (invalid UTF-8, "
                          "control characters, over 255 bytes)",
                          MetricType::Counter);
  sanitized.metric.push_back(counter({}, static_cast<double>(stats.sanitized_labels)));
  auto incomplete = family("fetchcost_attribution_incomplete",
                           "1 when capture events were lost (ring buffer drops): figures since "
                           "then may miss reads",
                           MetricType::Gauge);
  incomplete.metric.push_back(gauge({}, self.attribution_incomplete ? 1 : 0));
  auto info = family("fetchcost_build_info", "fetchcostd version", MetricType::Gauge);
  info.metric.push_back(gauge({{"version", self.version}}, 1));

  std::vector<MetricFamily> all{bytes,  requests,  errors,        latency,   cost,
                                object_bytes, delivered, amplification, groups, sensor_count,
                                evictions, sensor_memory, events, drops,  parse,
                                reads,  probes,    targets,       enabled,   config_errors,
                                sanitized, incomplete, info};
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, all);
  return out.str();
}

}  // namespace fc::exporter
