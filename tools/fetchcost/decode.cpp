// fetchcost decode --pcap FILE: one JSON line per Kafka request/response pair.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "kafka/kafka.h"
#include "pcap_source.h"

namespace {

struct DecodeOptions {
  std::string pcap;
  std::uint16_t port = 9092;
  bool all_apis = true;
  bool stats = false;
};

class JsonSink : public fc::kafka::Sink {
 public:
  explicit JsonSink(const fc::tools::PcapSource& source) : source_(source) {}
  void on_exchange(const fc::kafka::Exchange& ex) override {
    using nlohmann::json;
    json j;
    j["connection"] = source_.describe(ex.connection);
    j["client_id"] = ex.client_id_null ? json(nullptr) : json(ex.client_id);
    j["api"] = fc::kafka::api_name(ex.api_key);
    j["api_key"] = ex.api_key;
    j["version"] = ex.api_version;
    j["correlation_id"] = ex.correlation_id;
    j["request_time_ns"] = ex.request_time_ns;
    j["request_size"] = ex.request_size;
    j["decoded"] = ex.body_decoded;
    if (ex.request_truncated) j["request_truncated"] = true;
    if (ex.response_seen) {
      j["response_size"] = ex.response_size;
      j["latency_ms"] =
          (static_cast<double>(ex.response_end_ns) - static_cast<double>(ex.request_time_ns)) / 1e6;
      j["error_code"] = ex.response_error_code;
      if (ex.response_truncated) j["response_truncated"] = true;
    } else {
      j["response"] = nullptr;
    }
    if (!ex.group_id.empty()) j["group_id"] = ex.group_id;
    if (!ex.member_id.empty()) j["member_id"] = ex.member_id;
    if (!ex.client_software_name.empty()) {
      j["client_software"] = ex.client_software_name + "/" + ex.client_software_version;
    }
    if (ex.api_key == fc::kafka::api::kMetadata && ex.response_seen && ex.api_version >= 10) {
      j["metadata_topics"] = ex.metadata_topics;
    }
    if (ex.api_key == fc::kafka::api::kFetch && ex.body_decoded) j["fetch"] = fetch_json(ex.fetch);
    std::cout << j.dump() << '\n';
  }

 private:
  static nlohmann::json fetch_json(const fc::kafka::FetchExchange& f) {
    using nlohmann::json;
    json j;
    j["replica_id"] = f.replica_id;
    j["max_wait_ms"] = f.max_wait_ms;
    j["min_bytes"] = f.min_bytes;
    j["max_bytes"] = f.max_bytes;
    j["isolation_level"] = f.isolation_level;
    j["session"] = {{"id", f.session_id},
                    {"epoch", f.session_epoch},
                    {"kind", fc::kafka::to_string(f.session_kind)},
                    {"response_id", f.response_session_id}};
    if (!f.rack_id.empty()) j["rack_id"] = f.rack_id;
    j["records_bytes"] = f.records_bytes;
    json topics = json::array();
    for (std::uint32_t t = 0; t < f.topics.size(); ++t) {
      json partitions = json::array();
      for (const auto& p : f.partitions) {
        if (p.topic_index != t) continue;
        json jp = {{"partition", p.partition},
                   {"fetch_offset", p.fetch_offset},
                   {"partition_max_bytes", p.partition_max_bytes}};
        if (p.from_session) jp["from_session"] = true;
        if (p.added_to_session) jp["added_to_session"] = true;
        if (p.in_response) {
          jp["error_code"] = p.error_code;
          jp["high_watermark"] = p.high_watermark;
          jp["log_start_offset"] = p.log_start_offset;
          jp["records_size"] = p.records_size;
        }
        partitions.push_back(std::move(jp));
      }
      json forgotten = json::array();
      for (const auto& p : f.forgotten) {
        if (p.topic_index == t) forgotten.push_back(p.partition);
      }
      if (partitions.empty() && forgotten.empty()) continue;
      const auto& topic = f.topics[t];
      json jt;
      jt["topic"] = topic.name.empty() ? json(nullptr) : json(topic.name);
      if (!topic.id.is_zero()) jt["topic_id"] = topic.id.to_base64();
      if (!partitions.empty()) jt["partitions"] = std::move(partitions);
      if (!forgotten.empty()) jt["forgotten"] = std::move(forgotten);
      topics.push_back(std::move(jt));
    }
    j["topics"] = std::move(topics);
    return j;
  }

  const fc::tools::PcapSource& source_;
};

int run_decode(const DecodeOptions& options) {
  fc::tools::PcapSource source({options.pcap, options.port});
  JsonSink sink(source);
  fc::kafka::Decoder decoder(sink);
  auto stats = source.run(decoder);
  std::cout.flush();
  if (!stats) {
    std::fprintf(stderr, "fetchcost decode: %s\n", stats.error().message.c_str());
    return 1;
  }
  if (options.stats) {
    const auto& c = decoder.counters();
    nlohmann::json j;
    j["packets"] = stats->packets;
    j["tcp_segments"] = stats->tcp_segments;
    j["payload_bytes"] = stats->payload_bytes;
    j["truncated_segments"] = stats->truncated_segments;
    j["connections"] = c.connections;
    j["request_frames"] = c.request_frames;
    j["response_frames"] = c.response_frames;
    j["exchanges"] = c.exchanges;
    j["responses_unmatched"] = c.responses_unmatched;
    j["requests_unanswered"] = c.requests_unanswered;
    j["resyncs"] = c.resyncs;
    j["frames_truncated"] = c.frames_truncated;
    j["parse_errors"] = c.parse_errors;
    j["sasl_frames"] = c.sasl_frames;
    j["opaque_frames"] = c.opaque_frames;
    nlohmann::json apis = nlohmann::json::array();
    for (const auto& a : decoder.api_counts()) {
      apis.push_back({{"api_key", a.api_key},
                      {"version", a.api_version},
                      {"requests", a.requests},
                      {"decoded", a.decoded},
                      {"skipped", a.skipped}});
    }
    j["apis"] = std::move(apis);
    std::cerr << j.dump() << '\n';
  }
  return 0;
}

}  // namespace

void add_decode_command(CLI::App& app) {
  auto options = std::make_shared<DecodeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "decode", "Decode Kafka requests/responses from a pcap file: one JSON line per pair");
  cmd->add_option("--pcap", options->pcap, "pcap or pcapng file")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--port", options->port,
                  "broker port (0: every TCP connection, the server side taken from its SYN)")
      ->capture_default_str();
  cmd->add_flag("--stats", options->stats, "print decoder counters as JSON on stderr at the end");
  cmd->callback([options]() {
    int rc = run_decode(*options);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}
