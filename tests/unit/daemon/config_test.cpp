#include <doctest/doctest.h>

#include "daemon/config.h"

using fc::daemon::parse_config;

TEST_CASE("an empty config gives the documented defaults") {
  auto c = parse_config("{}");
  REQUIRE(c.ok());
  CHECK(c->listen == "127.0.0.1:9464");
  CHECK(c->cmdline_match == "kafka.Kafka");
  CHECK(c->max_sensors == 10000);
  CHECK_FALSE(c->partition_label);
  CHECK(c->drain_nice == 0);
  CHECK(c->realtime_reader);
  CHECK(c->pass_interval_ms == 100);
  CHECK(c->drain_yields);
  CHECK_FALSE(c->program_stats);
  CHECK(c->skip_quiet_fetches);
  CHECK(c->object_store_head_bytes == 2048);
  CHECK(c->ring_kib_per_cpu == 1024);
  CHECK(c->wakeup_kib == 0);
  CHECK(c->log_dirs_inotify);
  CHECK(c->log_dirs_rescan_seconds == 30);
}

TEST_CASE("fields are read, and every error names its field") {
  auto c = parse_config(R"({"kafka_ports":[9092,9093],"object_store":{"ports":[9000]},
      "sensors":{"max_sensors":5,"partition_label":true},"audit_log":{"path":"/tmp/a"},
      "capture":{"drain_nice":-5,"realtime_reader":false,"pass_interval_ms":25,
                  "drain_yields":false,"program_stats":true,"skip_quiet_fetches":false,
                  "object_store_head_bytes":0,"ring_kib_per_cpu":1024,"wakeup_kib":512},
      "log_dirs_inotify":false,"log_dirs_rescan_seconds":5})");
  REQUIRE(c.ok());
  CHECK(c->kafka_ports == std::vector<std::uint16_t>{9092, 9093});
  CHECK(c->object_store_ports == std::vector<std::uint16_t>{9000});
  CHECK(c->max_sensors == 5);
  CHECK(c->partition_label);
  CHECK(c->audit_log_path == "/tmp/a");
  CHECK(c->drain_nice == -5);
  CHECK_FALSE(c->realtime_reader);
  CHECK(c->pass_interval_ms == 25);
  CHECK_FALSE(c->drain_yields);
  CHECK(c->program_stats);
  CHECK_FALSE(c->skip_quiet_fetches);
  CHECK(c->object_store_head_bytes == 0);
  CHECK(c->ring_kib_per_cpu == 1024);
  CHECK(c->wakeup_kib == 512);
  CHECK_FALSE(c->log_dirs_inotify);
  CHECK(c->log_dirs_rescan_seconds == 5);

  struct Bad {
    const char* text;
    const char* mentions;
  } cases[] = {
      {"{", "not valid JSON"},
      {R"({"listn":"x"})", "\"listn\": unknown key"},
      {R"({"kafka_ports":[0]})", "\"kafka_ports\""},
      {R"({"kafka_ports":"9092"})", "\"kafka_ports\""},
      {R"({"sensors":{"max_sensors":"many"}})", "\"sensors.max_sensors\": expected a whole number"},
      {R"({"sensors":{"max_sensors":0}})", "sensors.max_sensors"},
      {R"({"object_store":{"prots":[1]}})", "object_store.prots"},
      {R"({"capture":{"tls_libraries":["wolfssl"]}})", "wolfssl"},
      {R"({"capture":{"drain_nice":-30}})", "capture.drain_nice"},
      {R"({"capture":{"realtime_reader":"yes"}})", "capture.realtime_reader"},
      {R"({"capture":{"pass_interval_ms":0}})", "capture.pass_interval_ms"},
      {R"({"capture":{"pass_interval_ms":500}})", "capture.pass_interval_ms"},
      {R"({"capture":{"drain_yields":1}})", "capture.drain_yields"},
      {R"({"capture":{"wakeup_kib":4096}})", "capture.wakeup_kib"},
      {R"({"capture":{"ring_kib_per_cpu":1024,"wakeup_kib":2048}})", "capture.wakeup_kib"},
      {R"({"capture":{"wakeup_kib":-1}})", "capture.wakeup_kib"},
      {R"({"capture":{"program_stats":"on"}})", "capture.program_stats"},
      {R"({"capture":{"skip_quiet_fetches":"yes"}})", "capture.skip_quiet_fetches"},
      {R"({"capture":{"object_store_head_bytes":20000}})", "capture.object_store_head_bytes"},
      {R"({"capture":{"object_store_head_bytes":-1}})", "capture.object_store_head_bytes"},
      {R"({"log_dirs_inotify":"no"})", "log_dirs_inotify"},
      {R"({"log_dirs_rescan_seconds":0})", "log_dirs_rescan_seconds"},
      {R"({"listen":"9464"})", "\"listen\""},
      {R"({"object_store":{"cidrs":["10.0.0.0/40"]}})", "object_store.cidrs"},
      {R"({"object_store":{"hosts":".amazonaws.com"}})", "object_store.hosts"},
      {R"([1,2])", "expected an object"},
  };
  for (const auto& bad : cases) {
    auto r = parse_config(bad.text);
    INFO(bad.text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find(bad.mentions) != std::string::npos);
  }
}

TEST_CASE("budgets: limits per client or group, actions, and errors naming the field") {
  auto c = parse_config(R"({"budgets":{"limits":[{"client_id":"scanner","per_hour":0.5},
      {"group_id":"analytics","per_hour":2}],"window_seconds":60,"command":"echo hi",
      "webhook":"http://127.0.0.1:8080/hook"}})");
  REQUIRE(c.ok());
  REQUIRE(c->budgets.limits.size() == 2);
  CHECK(c->budgets.limits[0].client_id == "scanner");
  CHECK(c->budgets.limits[0].per_hour == 0.5);
  CHECK(c->budgets.limits[1].group_id == "analytics");
  CHECK(c->budgets.window_seconds == 60);
  CHECK(c->budgets.command == "echo hi");

  struct Bad {
    const char* text;
    const char* mentions;
  } cases[] = {
      {R"({"budgets":{"limit":[]}})", "budgets.limit"},
      {R"({"budgets":{"limits":{}}})", "budgets.limits"},
      {R"({"budgets":{"limits":[{"per_hour":1}]}})", "budgets.limits[0]"},
      {R"({"budgets":{"limits":[{"client_id":"a","group_id":"b","per_hour":1}]}})",
       "exactly one of client_id or group_id"},
      {R"({"budgets":{"limits":[{"client_id":"a","per_hour":0}]}})", "budgets.limits[0].per_hour"},
      {R"({"budgets":{"limits":[{"client_id":"a","per_hour":"1"}]}})",
       "budgets.limits[0].per_hour"},
      {R"({"budgets":{"limits":[{"client_id":"a","per_hour":1},{"client":"b"}]}})",
       "budgets.limits[1].client"},
      {R"({"budgets":{"window_seconds":0}})", "budgets.window_seconds"},
      {R"({"budgets":{"webhook":"https://x"}})", "budgets.webhook"},
  };
  for (const auto& bad : cases) {
    auto r = parse_config(bad.text);
    CHECK_FALSE(r.ok());
    if (!r.ok())
      CHECK_MESSAGE(r.error().message.find(bad.mentions) != std::string::npos, r.error().message);
  }
}

TEST_CASE("ledger retention: defaults, values, and errors naming the field") {
  auto d = parse_config("{}");
  REQUIRE(d.ok());
  CHECK(d->ledger_retention_days == 400);
  CHECK(d->ledger_hourly_days == 35);
  auto c = parse_config(R"({"ledger":{"retention_days":0,"hourly_days":7}})");
  REQUIRE(c.ok());
  CHECK(c->ledger_retention_days == 0);
  CHECK(c->ledger_hourly_days == 7);
  for (const auto& [text, mentions] :
       {std::pair{R"({"ledger":{"retention_days":-1}})", "ledger.retention_days"},
        std::pair{R"({"ledger":{"hourly_days":"a week"}})", "ledger.hourly_days"},
        std::pair{R"({"ledger":{"retention":400}})", "ledger.retention"}}) {
    auto r = parse_config(text);
    INFO(text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find(mentions) != std::string::npos);
  }
}

// A count read into a narrower or unsigned type wrapped (4294967296 bytes became 0, a zero cap
// that captures nothing; -1 became 2^64 - 1), and a fraction or a float out of range was cut or
// undefined. Each is an error naming the field, with the range it takes.
TEST_CASE("a whole-number field takes a whole number in its range, never a wrapped or cut one") {
  struct Bad {
    const char* text;
    const char* mentions;
  } cases[] = {
      {R"({"capture":{"capture_bytes":4294967296}})",
       "\"capture.capture_bytes\": expected a whole number"},
      {R"({"capture":{"capture_bytes":-1}})", "\"capture.capture_bytes\""},
      {R"({"capture":{"pass_interval_ms":4294967396}})",
       "\"capture.pass_interval_ms\": expected a whole number"},
      {R"({"capture":{"drain_nice":1e300}})", "\"capture.drain_nice\": expected a whole number"},
      {R"({"capture":{"ring_kib_per_cpu":18446744073709551616}})", "\"capture.ring_kib_per_cpu\""},
      {R"({"sensors":{"max_sensors":2.5}})", "\"sensors.max_sensors\": expected a whole number"},
      {R"({"ledger":{"retention_days":1.5}})",
       "\"ledger.retention_days\": expected a whole number"},
      {R"({"audit_log":{"max_bytes":-1}})", "\"audit_log.max_bytes\": expected a whole number"},
      {R"({"audit_log":{"keep":2147483648}})", "\"audit_log.keep\": expected a whole number"},
      {R"({"targets":{"pids":[1e20]}})", "\"targets.pids\": expected"},
      {R"({"targets":{"pids":[12, 3.5]}})", "\"targets.pids\": expected"},
      {R"({"targets":{"pids":[12, 0]}})", "\"targets.pids\": process ids start at 1, got 0"},
      {R"({"capture":{"capture_bytes":1e999}})", "config is not valid JSON"},  // threw, uncaught
      {R"({"capture":{"pass_interval_ms":50.0}})",
       "\"capture.pass_interval_ms\": expected a whole number"},
  };
  for (const auto& bad : cases) {
    auto r = parse_config(bad.text);
    INFO(bad.text);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find(bad.mentions) != std::string::npos);
  }
  // The edges of each range still read. (A whole number written as a float, 50.0, is refused
  // above: counts are written as integers, as Helm's toJson writes them too.)
  auto c = parse_config(R"({"capture":{"capture_bytes":16384,"drain_nice":-20},
      "audit_log":{"max_bytes":18446744073709551615},"targets":{"pids":[1,2147483647]}})");
  REQUIRE(c.ok());
  CHECK(c->capture_bytes == 16384);
  CHECK(c->drain_nice == -20);
  CHECK(c->audit_log_max_bytes == 18446744073709551615ull);
  CHECK(c->pids == std::vector<int>{1, 2147483647});
}
