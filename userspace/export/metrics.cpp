// Prometheus text exposition format (version 0.0.4), streamed from a sensor snapshot.
//
// Written directly rather than through prometheus-cpp's TextSerializer: that one needs every
// series built as a MetricFamily first (a vector of label strings per series and family, ~60
// allocations per sensor), so a scrape of 10,000 sensors allocated tens of megabytes and held
// the sensors' lock while building them. Here the page goes out in 64 KiB pieces from a snapshot:
// the memory a scrape needs does not grow with the number of sensors beyond the snapshot itself.
// The format's escaping rules are small (label values: \ " and newline; HELP: \ and newline);
// promtool and Prometheus check the output in the unit and e2e tests.
#include <charconv>
#include <cmath>
#include <limits>

#include "export/export.h"

namespace fc::exporter {

ChunkWriter::ChunkWriter(const TextSink& sink, std::size_t piece) : sink_(sink), piece_(piece) {
  buffer_.reserve(piece + 4096);
}

void ChunkWriter::flush() {
  if (ok_ && !buffer_.empty()) ok_ = sink_(buffer_);
  buffer_.clear();
}

void ChunkWriter::maybe_flush() {
  if (buffer_.size() >= piece_) flush();
}

ChunkWriter& ChunkWriter::text(std::string_view s) {
  buffer_.append(s);
  return *this;
}

ChunkWriter& ChunkWriter::number(std::uint64_t v) {
  char digits[24];
  auto r = std::to_chars(digits, digits + sizeof digits, v);
  buffer_.append(digits, r.ptr);
  return *this;
}

ChunkWriter& ChunkWriter::number(std::int64_t v) {
  char digits[24];
  auto r = std::to_chars(digits, digits + sizeof digits, v);
  buffer_.append(digits, r.ptr);
  return *this;
}

ChunkWriter& ChunkWriter::number(double v) {
  if (std::isnan(v)) return text("NaN");
  if (std::isinf(v)) return text(v > 0 ? "+Inf" : "-Inf");
  char digits[32];
  auto r = std::to_chars(digits, digits + sizeof digits, v);  // shortest exact round trip
  buffer_.append(digits, r.ptr);
  return *this;
}

ChunkWriter& ChunkWriter::label_value(std::string_view v) {
  for (char ch : v) {
    if (ch == '\\')
      buffer_ += "\\\\";
    else if (ch == '"')
      buffer_ += "\\\"";
    else if (ch == '\n')
      buffer_ += "\\n";
    else
      buffer_.push_back(ch);
  }
  return *this;
}

namespace {

enum class Type { kCounter, kGauge, kHistogram };

void header(ChunkWriter& w, std::string_view name, std::string_view help, Type type) {
  // The HELP texts are constants without backslashes or newlines: nothing to escape.
  w.text("# HELP ").text(name).text(" ").text(help).text("\n# TYPE ").text(name);
  w.text(type == Type::kCounter ? " counter\n"
         : type == Type::kGauge ? " gauge\n"
                                : " histogram\n");
}

// `{client_id="…",peer_ip="…",topic="…",partition="…",method="…"` without the closing brace, so
// callers can append labels (le, component).
void sensor_labels(ChunkWriter& w, const sensors::SensorView& s) {
  w.text("{client_id=\"").label_value(s.client_id).text("\"");
  // peer_ip on every client series whose address is known: joins with kube_pod_info{pod_ip}.
  if (!s.peer_ip.empty()) w.text(",peer_ip=\"").label_value(s.peer_ip).text("\"");
  w.text(",topic=\"").label_value(s.topic).text("\"");
  if (s.partition != sensors::kNoPartition)
    w.text(",partition=\"").number(std::int64_t{s.partition}).text("\"");
  w.text(",method=\"").text(sensors::method_name(s.method)).text("\"");
}

// One family with a sample per sensor; `sample` writes the value (after the labels).
template <typename Sample>
void per_sensor(ChunkWriter& w, const sensors::Snapshot& snap, std::string_view name,
                std::string_view help, Type type, Sample&& sample) {
  header(w, name, help, type);
  for (const auto& row : snap.rows) {
    if (!w.ok()) return;
    const sensors::SensorView s = snap.view(row);
    sample(s);
    w.maybe_flush();
  }
}

template <typename Value>
void single(ChunkWriter& w, std::string_view name, std::string_view help, Type type, Value v) {
  header(w, name, help, type);
  w.text(name).text(" ").number(v).text("\n");
}

}  // namespace

void render_prometheus(const sensors::Snapshot& snap, const SelfMetrics& self,
                       const MetricsOptions& options, const TextSink& sink) {
  ChunkWriter w(sink);
  auto counter_family = [&](std::string_view name, std::string_view help, auto field) {
    per_sensor(w, snap, name, help, Type::kCounter, [&](const sensors::SensorView& s) {
      w.text(name);
      sensor_labels(w, s);
      w.text("} ").number(field(s.counters)).text("\n");
    });
  };
  counter_family("kafka_server_remote_fetch_bytes_total",
                 "Bytes the broker read from remote storage for this client's fetches",
                 [](const sensors::Counters& c) { return c.remote_bytes; });
  counter_family("kafka_server_remote_fetch_requests_total",
                 "Remote storage GET requests caused by this client's fetches",
                 [](const sensors::Counters& c) { return c.requests; });
  counter_family("fetchcost_remote_fetch_errors_total",
                 "Failed remote storage GETs caused by this client's fetches",
                 [](const sensors::Counters& c) { return c.errors; });

  const auto& bounds = snap.latency_buckets_seconds;
  constexpr std::string_view kLatency = "kafka_server_remote_fetch_latency_seconds";
  per_sensor(w, snap, kLatency, "Remote read time of a fetch (first GET start to last GET end)",
             Type::kHistogram, [&](const sensors::SensorView& s) {
               const auto& c = s.counters;
               w.text(kLatency).text("_count");
               sensor_labels(w, s);
               w.text("} ").number(c.latency_count).text("\n");
               w.text(kLatency).text("_sum");
               sensor_labels(w, s);
               w.text("} ").number(c.latency_sum_seconds).text("\n");
               std::uint64_t cumulative = 0;
               for (std::size_t i = 0; i <= bounds.size(); ++i) {
                 cumulative += c.latency_buckets[i];
                 w.text(kLatency).text("_bucket");
                 sensor_labels(w, s);
                 w.text(",le=\"");
                 if (i < bounds.size())
                   w.number(bounds[i]);
                 else
                   w.text("+Inf");
                 w.text("\"} ").number(cumulative).text("\n");
               }
             });

  constexpr std::string_view kCost = "fetchcost_remote_fetch_cost_total";
  per_sensor(w, snap, kCost,
             "Money the remote reads of this client cost under the price table in force",
             Type::kCounter, [&](const sensors::SensorView& s) {
               for (auto [component, value] :
                    {std::pair<std::string_view, double>{"api", s.counters.cost_api},
                     {"egress", s.counters.cost_egress}}) {
                 w.text(kCost);
                 sensor_labels(w, s);
                 w.text(",component=\"").text(component).text("\",currency=\"");
                 w.label_value(options.currency).text("\"} ").number(value).text("\n");
               }
             });
  counter_family("fetchcost_remote_fetch_object_bytes_total",
                 "Object bytes read for fetches that were answered",
                 [](const sensors::Counters& c) { return c.object_bytes_read; });
  counter_family("fetchcost_remote_fetch_delivered_bytes_total",
                 "Bytes of remote data the broker delivered to the client",
                 [](const sensors::Counters& c) { return c.bytes_delivered; });
  constexpr std::string_view kAmplification = "fetchcost_read_amplification";
  per_sensor(w, snap, kAmplification, "Object bytes read / bytes delivered to the client",
             Type::kGauge, [&](const sensors::SensorView& s) {
               w.text(kAmplification);
               sensor_labels(w, s);
               w.text("} ").number(s.counters.read_amplification()).text("\n");
             });

  header(w, "fetchcost_client_group_info", "Consumer group of a client id (value 1)", Type::kGauge);
  for (const auto& g : snap.groups) {
    w.text("fetchcost_client_group_info{client_id=\"").label_value(snap.group_client(g));
    w.text("\",group_id=\"").label_value(snap.group_id(g)).text("\"} 1\n");
    w.maybe_flush();
  }

  const auto& stats = snap.stats;
  header(w, "fetchcost_sensors", "Sensors held (live, or __other__ folds)", Type::kGauge);
  w.text("fetchcost_sensors{state=\"live\"} ").number(std::uint64_t{stats.live_sensors}).text("\n");
  w.text("fetchcost_sensors{state=\"other\"} ")
      .number(std::uint64_t{stats.other_sensors})
      .text("\n");
  header(w, "fetchcost_sensor_evictions_total", "Sensors folded into __other__ (reason=lru|idle)",
         Type::kCounter);
  w.text("fetchcost_sensor_evictions_total{reason=\"lru\"} ").number(stats.evictions).text("\n");
  w.text("fetchcost_sensor_evictions_total{reason=\"idle\"} ").number(stats.expirations).text("\n");
  single(w, "fetchcost_sensor_memory_bytes", "Approximate memory of the sensors", Type::kGauge,
         std::uint64_t{stats.approx_memory_bytes});
  single(w, "fetchcost_events_total", "Capture events handled", Type::kCounter, self.events);
  single(w, "fetchcost_quiet_fetches_total",
         "Fetches the capture left out whole (capture.skip_quiet_fetches): sessionless, or "
         "incremental and changing no fetch session, answered while the broker made no "
         "object-store call, so no remote read can belong to them",
         Type::kCounter, self.quiet_fetches);
  single(w, "fetchcost_quiet_fetch_pauses_total",
         "Times a connection's requests stopped waiting for the quiet-fetch test: object-store "
         "calls reported 8 of them in a row (a consumer reading from the remote tier), so its "
         "next 128 requests were recorded as they arrived, all but every 16th (a probe: a quiet "
         "one ends the pause)",
         Type::kCounter, self.quiet_fetch_pauses);
  header(w, "fetchcost_ring_drops_total",
         "Capture events lost because a CPU's ring buffer was full", Type::kCounter);
  for (std::size_t cpu = 0; cpu < self.ring_drops_per_cpu.size(); ++cpu)
    w.text("fetchcost_ring_drops_total{cpu=\"")
        .number(std::uint64_t{cpu})
        .text("\"} ")
        .number(self.ring_drops_per_cpu[cpu])
        .text("\n");
  single(w, "fetchcost_drain_wait_seconds_total",
         "Time the capture drain waited for the service lock (held by a scrape, an API request "
         "or a reload): long waits cause ring drops",
         Type::kCounter, self.drain_wait_seconds);
  single(w, "fetchcost_spool_bytes",
         "Captured records waiting for the drain to decode them: its backlog. At "
         "fetchcost_spool_limit_bytes the rings fill, then drop",
         Type::kGauge, self.spool_bytes);
  single(w, "fetchcost_spool_peak_bytes", "The largest drain backlog since start", Type::kGauge,
         self.spool_peak_bytes);
  single(w, "fetchcost_spool_limit_bytes", "The most the drain's backlog may hold", Type::kGauge,
         self.spool_limit_bytes);
  header(w, "fetchcost_parse_errors_total", "Malformed input skipped, by decoder", Type::kCounter);
  for (const auto& [decoder, n] : self.parse_errors)
    w.text("fetchcost_parse_errors_total{decoder=\"")
        .label_value(decoder)
        .text("\"} ")
        .number(n)
        .text("\n");
  single(w, "fetchcost_kafka_requests_truncated_total",
         "Kafka requests decoded with part of their body not captured: a Fetch request over "
         "16 KiB (over about 550 partitions on one broker), whose partitions past the cut "
         "attribution does not know, or bytes lost to a ring drop",
         Type::kCounter, self.kafka_requests_truncated);
  header(w, "fetchcost_object_reads_total", "Object reads seen, by attribution outcome",
         Type::kCounter);
  w.text("fetchcost_object_reads_total{outcome=\"exact\"} ").number(self.reads_exact).text("\n");
  w.text("fetchcost_object_reads_total{outcome=\"estimated\"} ")
      .number(self.reads_estimated)
      .text("\n");
  w.text("fetchcost_object_reads_total{outcome=\"unattributed\"} ")
      .number(self.reads_unattributed)
      .text("\n");
  single(w, "fetchcost_probes_attached", "BPF programs and uprobes attached", Type::kGauge,
         self.probes_attached);
  single(w, "fetchcost_targets", "Broker processes watched", Type::kGauge, self.targets);
  single(w, "fetchcost_attribution_enabled", "1 when attribution is on", Type::kGauge,
         std::uint64_t{self.attribution_enabled ? 1u : 0u});
  single(w, "fetchcost_config_errors_total", "Config reloads refused (the running config was kept)",
         Type::kCounter, self.config_errors);
  single(w, "fetchcost_local_tier_partitions",
         "Partitions whose local log start offset fetchcostd knows, from the broker's log dirs: "
         "0 while a broker is watched means every fetch is a candidate for its partitions' GETs",
         Type::kGauge, self.local_tier_partitions);
  single(w, "fetchcost_broker_settings_unread",
         "Watched broker processes whose settings (listener ports, log dirs) could not be read; "
         "retried every 10 s",
         Type::kGauge, self.broker_settings_unread);
  single(w, "fetchcost_sanitized_labels_total",
         "Client ids and topics changed to be label values (invalid UTF-8, control characters, "
         "over 255 bytes)",
         Type::kCounter, stats.sanitized_labels);
  single(w, "fetchcost_attribution_incomplete",
         "1 when capture events were lost (ring buffer drops): figures since then may miss reads",
         Type::kGauge, std::uint64_t{self.attribution_incomplete ? 1u : 0u});
  single(w, "fetchcost_bpf_program_stats_enabled",
         "1 while the kernel times the BPF programs' runs (capture.program_stats, or "
         "kernel.bpf_stats_enabled): the fetchcost_bpf_program_run* series are listed only then",
         Type::kGauge, std::uint64_t{self.programs_timed ? 1u : 0u});
  auto per_program = [&](std::string_view name, std::string_view help, auto field) {
    header(w, name, help, Type::kCounter);
    for (const auto& p : self.programs)
      w.text(name)
          .text("{program=\"")
          .label_value(p.program)
          .text("\"} ")
          .number(field(p))
          .text("\n");
  };
  per_program("fetchcost_bpf_program_runs_total",
              "Runs of each BPF program, for every process's calls (the kernel's count)",
              [](const SelfMetrics::ProgramRuns& p) { return p.runs; });
  per_program("fetchcost_bpf_program_run_seconds_total",
              "CPU time in each BPF program, taken from the threads whose calls ran it (mostly "
              "the broker's)",
              [](const SelfMetrics::ProgramRuns& p) { return p.run_seconds; });
  header(w, "fetchcost_build_info", "fetchcostd version", Type::kGauge);
  w.text("fetchcost_build_info{version=\"").label_value(self.version).text("\"} 1\n");
  w.flush();
}

std::string render_prometheus(const sensors::SensorTable& sensors, const SelfMetrics& self,
                              const MetricsOptions& options) {
  sensors::Snapshot snap;
  sensors.snapshot(snap);
  std::string out;
  render_prometheus(snap, self, options, [&](std::string_view piece) {
    out.append(piece);
    return true;
  });
  return out;
}

}  // namespace fc::exporter
