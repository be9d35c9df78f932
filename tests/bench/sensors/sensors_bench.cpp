// Sensors benchmark: memory per sensor and resident memory with 10,000 live sensors and after
// 1 million distinct client ids have churned through, plus record() throughput on the hot path.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "heap.h"
#include "sensors/sensors.h"

namespace {

long rss_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

std::string client_name(std::uint64_t i) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "consumer-app-%07llu-instance-a1b2c3",
                static_cast<unsigned long long>(i));
  return buffer;
}

fc::sensors::Observation observation(std::string_view client, std::string_view topic,
                                     std::uint64_t now_ns) {
  fc::sensors::Observation o;
  o.client_id = client;
  o.topic = topic;
  o.remote_bytes = 4 << 20;
  o.object_bytes_read = 4 << 20;
  o.bytes_delivered = 1 << 20;
  o.requests = 1;
  o.latency_seconds = 0.042;
  o.cost_api = 0.0000004;
  o.now_ns = now_ns;
  return o;
}

}  // namespace

TEST_CASE("sensors: memory and throughput figures") {
  const char* topics[] = {"payments.events.v1", "orders", "clickstream-raw", "audit.log"};
  std::vector<std::string> clients;
  for (std::uint64_t i = 0; i < 1'000'000; ++i) clients.push_back(client_name(i));

  // Baseline after the 1M client-id strings above (~80 MB) exist: deltas are the table's.
  const long rss_start = rss_kib();
  const std::size_t heap_start = fc::testing::heap_in_use();
  fc::sensors::SensorTable table;  // max_sensors 10,000 (default)
  for (std::uint64_t i = 0; i < 10'000; ++i) {
    table.record(observation(clients[i], topics[i % 4], i));
  }
  const std::size_t heap_live = fc::testing::heap_growth(heap_start);
  const long rss_live = rss_kib();
  std::printf(
      "sensors_bench: 10,000 live sensors: %.0f heap bytes/sensor (table estimate %.0f), "
      "RSS %ld KiB (+%ld KiB)\n",
      heap_live / 10'000.0, table.stats().approx_memory_bytes / 10'000.0, rss_live,
      rss_live - rss_start);

  // Hot path: updates of existing sensors (no allocation).
  auto start = std::chrono::steady_clock::now();
  constexpr std::uint64_t kUpdates = 5'000'000;
  for (std::uint64_t i = 0; i < kUpdates; ++i) {
    const std::uint64_t c = (i * 7919) % 10'000;
    table.record(observation(clients[c], topics[c % 4], 10'000 + i));
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("sensors_bench: record() on live sensors: %.2f M/s (%.0f ns each)\n",
              kUpdates / seconds / 1e6, seconds * 1e9 / kUpdates);

  // Churn: 1 million distinct client ids through the 10,000-sensor table.
  start = std::chrono::steady_clock::now();
  for (std::uint64_t i = 0; i < 1'000'000; ++i) {
    table.record(observation(clients[i], topics[i % 4], 10'000'000 + i));
  }
  seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto stats = table.stats();
  std::printf(
      "sensors_bench: after 1,000,000 distinct client ids: live %zu, __other__ %zu, "
      "evictions %llu, heap %.0f bytes/live sensor, RSS %ld KiB (+%ld KiB); churn %.2f M/s\n",
      stats.live_sensors, stats.other_sensors, static_cast<unsigned long long>(stats.evictions),
      fc::testing::heap_growth(heap_start) / static_cast<double>(stats.live_sensors), rss_kib(),
      rss_kib() - rss_start, 1.0 / seconds);
  CHECK(stats.live_sensors == 10'000);
  CHECK(table.totals().requests == 10'000 + kUpdates + 1'000'000);
}
