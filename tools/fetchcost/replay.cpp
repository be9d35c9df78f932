// fetchcost replay: the whole attribution pipeline over a pcap of a broker's traffic (its client
// connections and its object-store connections), exact mode — what fetchcostd would have
// counted, without eBPF. TLS connections in a pcap are opaque and estimated.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "cost/cost.h"
#include "export/export.h"
#include "pcap_source.h"
#include "pipeline/pipeline.h"
#include "pipeline/tier_view.h"
#include "pipeline_flows.h"
#include "sensors/sensors.h"
#include "tier/tier.h"

namespace {

struct ReplayOptions {
  std::string pcap;
  std::vector<std::string> log_dirs;
  std::vector<std::uint16_t> kafka_ports{9092};
  std::vector<std::uint16_t> object_store_ports{443};
  std::string key_layout = "aiven";
  std::string price_table = "aws-s3-standard-same-region";
  std::string state_dir;
  std::string audit_log;
  bool partition_label = false;
};

int run_replay(const ReplayOptions& o) {
  auto prices = fc::cost::load_price_table(o.price_table);
  if (!prices) {
    std::fprintf(stderr, "fetchcost replay: --price-table: %s\n", prices.error().message.c_str());
    return 2;
  }
  const std::string currency = prices->currency;
  fc::sensors::SensorTable sensors(fc::sensors::Config{.partition_label = o.partition_label});
  std::unique_ptr<fc::tier::LocalTierMap> tier;
  std::unique_ptr<fc::pipeline::TierView> tier_view;
  if (!o.log_dirs.empty()) {
    tier = std::make_unique<fc::tier::LocalTierMap>(
        fc::tier::Options{.log_dirs = o.log_dirs, .use_inotify = false});
    tier->rescan();
    tier_view = std::make_unique<fc::pipeline::TierView>(*tier);
  }
  std::unique_ptr<fc::exporter::Ledger> ledger;
  if (!o.state_dir.empty()) {
    auto opened = fc::exporter::Ledger::open(o.state_dir);
    if (!opened) {
      std::fprintf(stderr, "fetchcost replay: %s\n", opened.error().message.c_str());
      return 2;
    }
    ledger = std::move(*opened);
  }
  std::unique_ptr<fc::exporter::AuditLog> audit;
  if (!o.audit_log.empty()) {
    auto opened = fc::exporter::AuditLog::open(o.audit_log, 1ull << 30, 1);
    if (!opened) {
      std::fprintf(stderr, "fetchcost replay: %s\n", opened.error().message.c_str());
      return 2;
    }
    audit = std::move(*opened);
  }
  fc::pipeline::PipelineConfig config;
  config.kafka_ports = o.kafka_ports;
  config.object_store_ports = o.object_store_ports;
  config.key_layout = o.key_layout;
  config.unix_timestamps = true;
  auto pipeline = fc::pipeline::Pipeline::create(config, std::move(*prices), sensors,
                                                 tier_view.get(), ledger.get(), audit.get());
  if (!pipeline) {
    std::fprintf(stderr, "fetchcost replay: %s\n", pipeline.error().message.c_str());
    return 2;
  }
  fc::tools::PipelineFlows sink(**pipeline, o.kafka_ports);
  std::vector<std::uint16_t> server_ports = o.kafka_ports;
  server_ports.insert(server_ports.end(), o.object_store_ports.begin(), o.object_store_ports.end());
  fc::tools::PcapSource source(
      {.path = o.pcap, .broker_port = 0, .server_ports = std::move(server_ports)});
  auto stats = source.run(sink);
  if (!stats) {
    std::fprintf(stderr, "fetchcost replay: %s\n", stats.error().message.c_str());
    return 2;
  }
  if (ledger) {
    if (auto saved = ledger->save(); !saved) {
      std::fprintf(stderr, "fetchcost replay: %s\n", saved.error().message.c_str());
      return 1;
    }
  }
  std::map<std::string, std::string> groups;
  sensors.for_each_group(
      [&](std::string_view c, std::string_view g) { groups[std::string(c)] = std::string(g); });
  sensors.for_each([&](const fc::sensors::SensorView& s) {
    const auto& c = s.counters;
    nlohmann::json row{{"client_id", s.client_id},
                       {"group_id", groups[std::string(s.client_id)]},
                       {"topic", s.topic},
                       {"method", fc::sensors::method_name(s.method)},
                       {"bytes", c.remote_bytes},
                       {"requests", c.requests},
                       {"errors", c.errors},
                       {"bytes_delivered", c.bytes_delivered},
                       {"cost", c.cost_api + c.cost_egress},
                       {"currency", currency}};
    if (s.partition != fc::sensors::kNoPartition) row["partition"] = s.partition;
    std::cout << row.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  });
  const auto& a = (*pipeline)->attribution_counters();
  std::fprintf(stderr,
               "fetchcost replay: %llu packets, %llu object reads (%llu exact, %llu estimated, "
               "%llu unattributed)\n",
               static_cast<unsigned long long>(stats->packets),
               static_cast<unsigned long long>((*pipeline)->stats().object_reads),
               static_cast<unsigned long long>(a.reads_exact),
               static_cast<unsigned long long>(a.reads_estimated),
               static_cast<unsigned long long>(a.reads_unattributed));
  return 0;
}

}  // namespace

void add_replay_command(CLI::App& app) {
  auto options = std::make_shared<ReplayOptions>();
  CLI::App* cmd = app.add_subcommand(
      "replay",
      "Run the attribution pipeline over a pcap of a broker's client and object-store traffic; "
      "prints one JSON line per (client_id, topic, method)");
  cmd->add_option("--pcap", options->pcap, "pcap or pcapng file")->required();
  cmd->add_option("--log-dirs", options->log_dirs,
                  "The broker's log dirs (local log start offsets, topic ids)");
  cmd->add_option("--kafka-port", options->kafka_ports, "Broker listener ports")
      ->capture_default_str();
  cmd->add_option("--object-store-port", options->object_store_ports, "Object-store endpoint ports")
      ->capture_default_str();
  cmd->add_option("--key-layout", options->key_layout,
                  "aiven, or regex:<pattern with named groups>")
      ->capture_default_str();
  cmd->add_option("--price-table", options->price_table, "Preset name or JSON file")
      ->capture_default_str();
  cmd->add_option("--state-dir", options->state_dir, "Also write the chargeback ledger here");
  cmd->add_option("--audit-log", options->audit_log, "Also write the audit log (JSON lines) here");
  cmd->add_flag("--partition-label", options->partition_label, "One row per partition");
  cmd->callback([options] { std::exit(run_replay(*options)); });
}
