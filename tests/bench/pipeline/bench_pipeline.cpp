// Pipeline throughput: capture pieces per second per core through stream + Kafka/HTTP decoding +
// attribution + cost + sensors, from a recorded event stream (a pcap of tiered-broker serving real
// clients, made by tests/bench/pipeline/run: the traffic fetchcostd sees, both directions of every
// Kafka and S3 connection), each piece cut to the capture cap as the BPF side would copy it. The
// pieces are loaded into memory first; only feeding is timed, on this thread's CPU clock, best of N
// rounds. Prints figures; asserts nothing.
#include <time.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <vector>

#include "pcap_source.h"
#include "pipeline/pipeline.h"
#include "pipeline/tier_view.h"
#include "pipeline_flows.h"
#include "tier/tier.h"

namespace {

struct Recorded {
  enum Kind { kOpen, kData, kClose } kind;
  std::uint64_t connection;
  bool from_client;
  std::uint64_t time_ns;
  std::uint64_t position;
  std::uint64_t length;
  std::vector<std::uint8_t> bytes;
  fc::tools::FlowEnds ends;
  bool from_start;
};

struct Recorder : fc::tools::FlowSink {
  std::vector<Recorded> events;
  void open(std::uint64_t c, std::uint64_t t, const fc::tools::FlowEnds& e, bool s) override {
    events.push_back({Recorded::kOpen, c, false, t, 0, 0, {}, e, s});
  }
  void data(std::uint64_t c, bool fc_, std::uint64_t t, std::uint64_t p, std::uint64_t l,
            std::span<const std::uint8_t> b) override {
    events.push_back({Recorded::kData, c, fc_, t, p, l, {b.begin(), b.end()}, {}, false});
  }
  void close(std::uint64_t c, std::uint64_t t) override {
    events.push_back({Recorded::kClose, c, false, t, 0, 0, {}, {}, false});
  }
  void end(std::uint64_t) override {}
};

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_pipeline: capture pieces/s/core through the whole attribution pipeline"};
  std::string pcap;
  std::vector<std::string> log_dirs;
  std::uint16_t kafka_port = 9092, store_port = 443;
  int rounds = 5, copies = 20;
  std::size_t capture_bytes = 4096;
  app.add_option("--pcap", pcap, "recorded traffic (tests/bench/pipeline/run makes one)")
      ->required();
  app.add_option("--log-dirs", log_dirs, "the broker's log dirs at recording time");
  app.add_option("--kafka-port", kafka_port);
  app.add_option("--object-store-port", store_port);
  app.add_option("--rounds", rounds, "timed rounds (best is reported)");
  app.add_option("--copies", copies, "replays of the recording per round (distinct connections)");
  app.add_option("--capture-bytes", capture_bytes,
                 "bytes of each piece kept, as fetchcostd's capture cap would (0: all)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  Recorder recorder;
  fc::tools::PcapSource source(
      {.path = pcap, .broker_port = 0, .server_ports = {kafka_port, store_port}});
  if (auto r = source.run(recorder); !r) {
    std::fprintf(stderr, "%s\n", r.error().message.c_str());
    return 2;
  }
  std::unique_ptr<fc::tier::LocalTierMap> map;
  std::unique_ptr<fc::pipeline::TierView> tier;
  if (!log_dirs.empty()) {
    map = std::make_unique<fc::tier::LocalTierMap>(
        fc::tier::Options{.log_dirs = log_dirs, .use_inotify = false});
    map->rescan();
    tier = std::make_unique<fc::pipeline::TierView>(*map);
  }
  std::size_t data_events = 0, bytes = 0;
  for (auto& e : recorder.events) {
    if (capture_bytes && e.bytes.size() > capture_bytes) e.bytes.resize(capture_bytes);
    if (e.kind == Recorded::kData) {
      ++data_events;
      bytes += e.length;
    }
  }

  double best = 1e30;
  std::uint64_t reads = 0;
  for (int round = 0; round < rounds; ++round) {
    fc::sensors::SensorTable sensors;
    fc::pipeline::PipelineConfig config;
    config.kafka_ports = {kafka_port};
    config.object_store_ports = {store_port};
    config.unix_timestamps = true;
    auto pipeline =
        fc::pipeline::Pipeline::create(config, *fc::cost::preset("aws-s3-standard-same-region"),
                                       sensors, tier.get(), nullptr, nullptr);
    if (!pipeline) return 2;
    fc::tools::PipelineFlows flows(**pipeline, {kafka_port});
    const double start = thread_seconds();
    for (int copy = 0; copy < copies; ++copy) {
      const std::uint64_t base = static_cast<std::uint64_t>(copy) << 32;
      const std::uint64_t shift = static_cast<std::uint64_t>(copy) * 60'000'000'000ull;
      for (const auto& e : recorder.events) {
        const std::uint64_t id = base | e.connection;
        switch (e.kind) {
          case Recorded::kOpen:
            flows.open(id, e.time_ns + shift, e.ends, false);
            break;
          case Recorded::kData:
            flows.data(id, e.from_client, e.time_ns + shift, e.position, e.length, e.bytes);
            break;
          case Recorded::kClose:
            flows.close(id, e.time_ns + shift);
            break;
        }
      }
    }
    (*pipeline)->finish(~0ull >> 4);
    const double elapsed = thread_seconds() - start;
    best = std::min(best, elapsed);
    reads = (*pipeline)->stats().object_reads;
  }
  const double pieces = static_cast<double>(data_events) * copies;
  std::printf("recording: %zu pieces, %.1f MB, %llu object reads per round (x%d copies)\n",
              data_events, bytes / 1e6,
              static_cast<unsigned long long>(reads / std::max(copies, 1)), copies);
  std::printf(
      "pipeline: %.2f M pieces/s/core, %.0f ns/piece, %.2f GB/s of socket traffic per core\n",
      pieces / best / 1e6, best / pieces * 1e9, static_cast<double>(bytes) * copies / best / 1e9);
  return 0;
}
