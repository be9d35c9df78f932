#include <doctest/doctest.h>

#include <atomic>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "heap.h"
#include "sensors/sensors.h"

using fc::sensors::Counters;
using fc::sensors::Method;
using fc::sensors::Observation;
using fc::sensors::SensorTable;
using fc::sensors::SensorView;

namespace {

constexpr std::uint64_t kSecond = 1'000'000'000ull;

Observation get(std::string_view client, std::string_view topic, std::uint64_t bytes,
                std::uint64_t now_ns, std::int32_t partition = 0) {
  Observation o;
  o.client_id = client;
  o.topic = topic;
  o.partition = partition;
  o.remote_bytes = bytes;
  o.object_bytes_read = bytes;
  o.requests = 1;
  o.now_ns = now_ns;
  return o;
}

// Snapshot keyed "client|topic|partition|method" for easy assertions.
std::map<std::string, Counters> snapshot(const SensorTable& table) {
  std::map<std::string, Counters> out;
  table.for_each([&](const SensorView& v) {
    std::string key = std::string(v.client_id) + "|" + std::string(v.topic) + "|" +
                      std::to_string(v.partition) + "|" + std::string(method_name(v.method));
    out[key].add(v.counters);
  });
  return out;
}

}  // namespace

TEST_CASE("sanitize: clean ids pass through untouched, bad bytes are replaced") {
  CHECK(fc::sensors::sanitize_label("consumer-1") == "consumer-1");
  CHECK(fc::sensors::sanitize_label("caf\xC3\xA9") == "caf\xC3\xA9");            // é stays
  CHECK(fc::sensors::sanitize_label("a\nb\tc\x7F") == "a_b_c_");                 // C0 and DEL
  CHECK(fc::sensors::sanitize_label("x\xC2\x85y") == "x_y");                     // C1 (NEL)
  CHECK(fc::sensors::sanitize_label("\xFF\xFEok") == "??ok");                    // not UTF-8
  CHECK(fc::sensors::sanitize_label("\xC0\xAF") == "??");                        // overlong '/'
  CHECK(fc::sensors::sanitize_label("\xED\xA0\x80") == "???");                   // surrogate
  CHECK(fc::sensors::sanitize_label("\xE2\x82") == "??");                        // truncated €
  CHECK(fc::sensors::sanitize_label("\xF0\x9F\x98\x80") == "\xF0\x9F\x98\x80");  // emoji
  std::string scratch;
  const std::string clean = "producer-7";
  CHECK(fc::sensors::sanitize_label_into(clean, scratch).data() == clean.data());
}

TEST_CASE("sanitize: capped at 255 bytes without splitting a character") {
  CHECK(fc::sensors::sanitize_label(std::string(300, 'a')).size() == 255);
  std::string euros;
  for (int i = 0; i < 100; ++i) euros += "\xE2\x82\xAC";  // 3 bytes each
  const std::string capped = fc::sensors::sanitize_label(euros);
  CHECK(capped.size() == 255);  // 85 whole characters
  const std::string capped_254 = fc::sensors::sanitize_label("a" + euros);
  CHECK(capped_254.size() == 253);  // 'a' + 84 whole characters; a split one is dropped
  CHECK(capped_254.substr(capped_254.size() - 3) == "\xE2\x82\xAC");
}

TEST_CASE("observations add up per (client, topic); partitions are summed by default") {
  SensorTable table;
  table.record(get("c1", "orders", 100, 1, 0));
  table.record(get("c1", "orders", 50, 2, 3));
  table.record(get("c2", "orders", 7, 3, 0));
  Observation failed = get("c1", "orders", 0, 4);
  failed.errors = 1;
  table.record(failed);
  auto s = snapshot(table);
  REQUIRE(s.size() == 2);
  CHECK(s["c1|orders|-1|exact"].remote_bytes == 150);
  CHECK(s["c1|orders|-1|exact"].requests == 3);
  CHECK(s["c1|orders|-1|exact"].errors == 1);
  CHECK(s["c2|orders|-1|exact"].remote_bytes == 7);
  CHECK(table.stats().live_sensors == 2);
}

TEST_CASE("partition label on: one sensor per partition; methods are separate series") {
  fc::sensors::Config config;
  config.partition_label = true;
  SensorTable table(config);
  table.record(get("c1", "t", 10, 1, 0));
  table.record(get("c1", "t", 20, 2, 1));
  Observation estimated = get("c1", "t", 30, 3, 1);
  estimated.method = Method::kEstimated;
  table.record(estimated);
  auto s = snapshot(table);
  REQUIRE(s.size() == 3);
  CHECK(s["c1|t|0|exact"].remote_bytes == 10);
  CHECK(s["c1|t|1|exact"].remote_bytes == 20);
  CHECK(s["c1|t|1|estimated"].remote_bytes == 30);
}

TEST_CASE("latency histogram uses Prometheus 'le' buckets; amplification and cost add up") {
  SensorTable table;
  for (double latency : {0.004, 0.005, 0.0051, 0.3, 42.0}) {
    Observation o = get("c", "t", 4 << 20, 1);
    o.bytes_delivered = 1 << 20;
    o.latency_seconds = latency;
    o.cost_api = 0.0000004;
    table.record(o);
  }
  Observation no_sample = get("c", "t", 0, 2);
  table.record(no_sample);  // latency < 0: counted as a request, no histogram sample
  const Counters c = table.totals();
  CHECK(c.latency_count == 5);
  CHECK(c.latency_sum_seconds == doctest::Approx(42.3141));
  CHECK(c.latency_buckets[0] == 2);   // le=0.005 holds 0.004 and exactly 0.005
  CHECK(c.latency_buckets[1] == 1);   // le=0.01
  CHECK(c.latency_buckets[6] == 1);   // le=0.5
  CHECK(c.latency_buckets[11] == 1);  // +Inf
  CHECK(c.read_amplification() == doctest::Approx(4.0));
  CHECK(c.cost_api == doctest::Approx(0.000002));
  CHECK(c.requests == 6);
}

TEST_CASE("LRU eviction folds the least recently used sensor into __other__ of its topic") {
  fc::sensors::Config config;
  config.max_sensors = 3;
  SensorTable table(config);
  table.record(get("a", "t1", 1, 1));
  table.record(get("b", "t2", 2, 2));
  table.record(get("c", "t1", 4, 3));
  table.record(get("a", "t1", 8, 4));   // a is now the most recent; b is the LRU
  table.record(get("d", "t1", 16, 5));  // evicts b
  auto s = snapshot(table);
  CHECK(s.count("b|t2|-1|exact") == 0);
  CHECK(s["__other__|t2|-1|exact"].remote_bytes == 2);
  CHECK(s["a|t1|-1|exact"].remote_bytes == 9);
  CHECK(table.stats().live_sensors == 3);
  CHECK(table.stats().evictions == 1);
  CHECK(table.totals().remote_bytes == 31);
}

TEST_CASE("idle sensors expire into __other__ and come back fresh") {
  fc::sensors::Config config;
  config.idle_expiry = std::chrono::seconds(60);
  SensorTable table(config);
  table.record(get("old", "t", 5, 10 * kSecond));
  table.record(get("new", "t", 6, 65 * kSecond));
  CHECK(table.expire_idle(71 * kSecond) == 1);
  auto s = snapshot(table);
  CHECK(s.count("old|t|-1|exact") == 0);
  CHECK(s["__other__|t|-1|exact"].remote_bytes == 5);
  CHECK(s["new|t|-1|exact"].remote_bytes == 6);
  table.record(get("old", "t", 1, 72 * kSecond));
  CHECK(snapshot(table)["old|t|-1|exact"].remote_bytes == 1);
  CHECK(table.stats().expirations == 1);
}

TEST_CASE("one million random client ids churned through 100 sensors: totals stay exact") {
  fc::sensors::Config config;
  config.max_sensors = 100;
  config.max_other_topics = 3;
  SensorTable table(config);
  std::mt19937_64 rng(42);
  std::uint64_t expected_bytes = 0, expected_requests = 0, expected_errors = 0;
  std::string client;
  const char* topics[] = {"a", "b", "c", "d", "e"};
  for (int i = 0; i < 1'000'000; ++i) {
    client.clear();
    const int length = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < length; ++k) client.push_back(static_cast<char>(rng() & 0xFF));
    Observation o = get(client, topics[rng() % 5], rng() % 5000, static_cast<std::uint64_t>(i));
    o.errors = rng() % 2;
    expected_bytes += o.remote_bytes;
    expected_requests += o.requests;
    expected_errors += o.errors;
    table.record(o);
  }
  const Counters totals = table.totals();
  CHECK(totals.remote_bytes == expected_bytes);
  CHECK(totals.requests == expected_requests);
  CHECK(totals.errors == expected_errors);
  const auto stats = table.stats();
  CHECK(stats.live_sensors == 100);
  CHECK(stats.other_sensors == 4);  // 3 topics + the "__other__" topic overflow
  CHECK(stats.sanitized_labels > 0);
  table.for_each([](const SensorView& v) {
    CHECK(v.client_id.size() <= 255);
    CHECK(fc::sensors::sanitize_label(v.client_id) == v.client_id);
  });
}

TEST_CASE("group info is kept per client id and bounded") {
  fc::sensors::Config config;
  config.max_groups = 2;
  SensorTable table(config);
  table.set_group("c1", "g1");
  table.set_group("c2", "g2");
  table.set_group("c1", "g1b");
  table.set_group("c3", "g\n3");
  std::map<std::string, std::string> groups;
  table.for_each_group([&](std::string_view c, std::string_view g) { groups[std::string(c)] = g; });
  CHECK(groups.size() == 2);
  CHECK(groups.count("c1") == 0);  // oldest insertion dropped
  CHECK(groups["c2"] == "g2");
  CHECK(groups["c3"] == "g_3");
}

TEST_CASE("memory per live sensor stays under 1 KiB") {
  const auto heap_before = fc::testing::heap_in_use();
  {
    SensorTable table;
    char client[64];
    for (int i = 0; i < 10'000; ++i) {
      std::snprintf(client, sizeof client, "consumer-app-%05d-instance-a1b2c3", i);
      table.record(get(client, "payments.events.v1", 1, 1));
    }
    const double per_sensor = static_cast<double>(fc::testing::heap_growth(heap_before)) / 10'000;
    MESSAGE("heap bytes per sensor: " << per_sensor << ", table's estimate: "
                                      << table.stats().approx_memory_bytes / 10'000.0);
    CHECK(table.stats().approx_memory_bytes / 10'000.0 <= 1024);
#ifndef __SANITIZE_ADDRESS__  // ASan's allocator does not report through mallinfo2
    CHECK(per_sensor <= 1024);
    CHECK(table.stats().approx_memory_bytes / 10'000.0 == doctest::Approx(per_sensor).epsilon(0.3));
#endif
  }
}

TEST_CASE("concurrent record, expiry and export keep totals exact") {
  fc::sensors::Config config;
  config.max_sensors = 50;
  config.idle_expiry = std::chrono::nanoseconds(1000);
  SensorTable table(config);
  std::atomic<bool> done{false};
  std::thread exporter([&] {
    while (!done) {
      std::uint64_t sum = 0;
      table.for_each([&](const SensorView& v) { sum += v.counters.remote_bytes; });
      table.expire_idle(1'000'000'000);
      (void)sum;
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < 2; ++w) {
    writers.emplace_back([&, w] {
      std::string client;
      for (int i = 0; i < 100'000; ++i) {
        client = "client-" + std::to_string((i * 7 + w) % 500);
        table.record(get(client, "t", 3, static_cast<std::uint64_t>(i)));
      }
    });
  }
  for (auto& writer : writers) writer.join();
  done = true;
  exporter.join();
  CHECK(table.totals().remote_bytes == 2ull * 100'000 * 3);
  CHECK(table.totals().requests == 2ull * 100'000);
  CHECK(table.stats().live_sensors <= 50);
}

TEST_CASE("the peer address is part of a sensor's identity and survives in its view") {
  SensorTable table;
  auto o = get("c", "t", 10, 1);
  o.peer_ip = "10.0.0.1";
  table.record(o);
  o.peer_ip = "10.0.0.2";
  table.record(o);
  table.record(o);
  std::map<std::string, std::uint64_t> by_peer;
  table.for_each([&](const SensorView& v) {
    CHECK(v.client_id == "c");
    CHECK(v.topic == "t");
    by_peer[std::string(v.peer_ip)] += v.counters.remote_bytes;
  });
  CHECK(by_peer.size() == 2);
  CHECK(by_peer["10.0.0.1"] == 10);
  CHECK(by_peer["10.0.0.2"] == 20);
}

TEST_CASE("a snapshot holds every sensor and group as the table does, and can be refilled") {
  fc::sensors::Config config;
  config.max_sensors = 3;
  SensorTable table(config);
  table.record(get("a", "t", 10, 1 * kSecond));
  Observation with_peer = get("b", "t", 20, 2 * kSecond);
  with_peer.peer_ip = "10.0.0.7";
  with_peer.latency_seconds = 0.02;
  table.record(with_peer);
  table.record(get("c", "u", 30, 3 * kSecond));
  table.record(get("d", "u", 40, 4 * kSecond));  // evicts "a" into __other__ (topic t)
  table.set_group("b", "g1");
  table.set_group("d", "g2");

  std::map<std::string, std::pair<Counters, bool>> expected;
  table.for_each([&](const SensorView& v) {
    expected[std::string(v.client_id) + "|" + std::string(v.peer_ip) + "|" + std::string(v.topic)] =
        {v.counters, v.folded};
  });
  fc::sensors::Snapshot snap;
  for (int round = 0; round < 2; ++round) {  // the second fill reuses the first one's buffers
    table.snapshot(snap);
    REQUIRE(snap.rows.size() == expected.size());
    CHECK(snap.view(snap.rows.front()).client_id == "d");  // most recently updated first
    for (const auto& row : snap.rows) {
      const SensorView v = snap.view(row);
      const auto it = expected.find(std::string(v.client_id) + "|" + std::string(v.peer_ip) + "|" +
                                    std::string(v.topic));
      REQUIRE(it != expected.end());
      CHECK(v.counters.remote_bytes == it->second.first.remote_bytes);
      CHECK(v.counters.latency_count == it->second.first.latency_count);
      CHECK(v.folded == it->second.second);
    }
    std::map<std::string, std::string> groups;
    for (const auto& g : snap.groups) groups[std::string(snap.group_client(g))] = snap.group_id(g);
    CHECK(groups == std::map<std::string, std::string>{{"b", "g1"}, {"d", "g2"}});
    CHECK(snap.stats.live_sensors == 3);
    CHECK(snap.stats.evictions == 1);
    CHECK(snap.latency_buckets_seconds == table.config().latency_buckets_seconds);
  }
  // A copy: later records do not change it.
  table.record(get("d", "u", 1000, 5 * kSecond));
  CHECK(snap.view(snap.rows.front()).counters.remote_bytes == 40);
}
