// Export: Prometheus text validated by Prometheus' own promtool; ledger persistence; audit log.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "export/export.h"
#include "report_model.h"  // fetchcost report's own reading of the ledger

using namespace fc;

namespace {

// A fresh directory under the system's temp dir, removed with everything in it when the test
// case ends.
class TempDir {
 public:
  explicit TempDir(const char* name)
      : path_(std::filesystem::temp_directory_path() /
              (std::string("fc-export-") + name + "-" + std::to_string(getpid()))) {
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  operator std::string() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("the metrics page is valid Prometheus text with the KIP's names and escaped labels") {
  sensors::SensorTable table;
  sensors::Observation o;
  o.client_id = "scanner";
  o.topic = "orders";
  o.remote_bytes = 4 << 20;
  o.requests = 2;
  o.object_bytes_read = 4 << 20;
  o.bytes_delivered = 1 << 20;
  o.latency_seconds = 0.03;
  o.cost_api = 0.0000008;
  o.now_ns = 1;
  table.record(o);
  o.client_id = "evil\"client\\\n";
  o.requests = 1;
  o.errors = 1;
  o.remote_bytes = 0;
  table.record(o);
  table.set_group("scanner", "analytics");

  exporter::SelfMetrics self;
  self.ring_drops_per_cpu = {0, 3};
  self.version = "test";
  self.programs_timed = true;
  self.programs = {{"sock_send_length", 12345, 0.0025}, {"sock_recv_length", 7, 1.5e-6}};
  self.quiet_fetches = 4242;
  self.quiet_fetch_pauses = 17;
  self.kafka_requests_truncated = 23;
  const std::string text = exporter::render_prometheus(table, self, {.currency = "USD"});

  CHECK(text.find("kafka_server_remote_fetch_bytes_total{client_id=\"scanner\",topic=\"orders\","
                  "method=\"exact\"} 4194304") != std::string::npos);
  CHECK(text.find("kafka_server_remote_fetch_requests_total{client_id=\"scanner\",topic=\"orders\","
                  "method=\"exact\"} 2") != std::string::npos);
  CHECK(text.find("fetchcost_client_group_info{client_id=\"scanner\",group_id=\"analytics\"} 1") !=
        std::string::npos);
  CHECK(text.find("fetchcost_ring_drops_total{cpu=\"1\"} 3") != std::string::npos);
  CHECK(text.find("fetchcost_quiet_fetches_total 4242\n") != std::string::npos);
  CHECK(text.find("fetchcost_quiet_fetch_pauses_total 17\n") != std::string::npos);
  CHECK(text.find("fetchcost_kafka_requests_truncated_total 23\n") != std::string::npos);
  CHECK(text.find("fetchcost_bpf_program_stats_enabled 1\n") != std::string::npos);
  CHECK(text.find("fetchcost_bpf_program_runs_total{program=\"sock_send_length\"} 12345\n") !=
        std::string::npos);
  CHECK(text.find("fetchcost_bpf_program_run_seconds_total{program=\"sock_recv_length\"} "
                  "1.5e-06\n") != std::string::npos);
  CHECK(text.find("fetchcost_read_amplification{client_id=\"scanner\",topic=\"orders\",method="
                  "\"exact\"} 4") != std::string::npos);
  CHECK(text.find("component=\"api\",currency=\"USD\"") != std::string::npos);
  CHECK(text.find("kafka_server_remote_fetch_latency_seconds_bucket{client_id=\"scanner\",topic="
                  "\"orders\",method=\"exact\",le=\"0.05\"} 1") != std::string::npos);

  // Independent check: Prometheus' own linter parses the page.
  const TempDir temp("promtool");
  const std::string dir = temp;
  const std::string file = dir + "/metrics.txt";
  std::ofstream(file) << text;
  const int rc =
      std::system(("promtool check metrics < " + file + " > " + dir + "/out.txt 2>&1").c_str());
  INFO(read_all(dir + "/out.txt"));
  CHECK(rc == 0);
}

TEST_CASE("the programs' run-time series are listed only while the kernel times the runs") {
  sensors::SensorTable table;
  exporter::SelfMetrics self;
  self.version = "test";
  const std::string untimed = exporter::render_prometheus(table, self, {});
  CHECK(untimed.find("fetchcost_bpf_program_stats_enabled 0\n") != std::string::npos);
  CHECK(untimed.find("fetchcost_bpf_program_runs_total{") == std::string::npos);
  CHECK(untimed.find("fetchcost_bpf_program_run_seconds_total{") == std::string::npos);
  self.programs_timed = true;
  self.programs = {{"sc_ret", 3, 0.000001}};
  const std::string timed = exporter::render_prometheus(table, self, {});
  CHECK(timed.find("fetchcost_bpf_program_stats_enabled 1\n") != std::string::npos);
  CHECK(timed.find("fetchcost_bpf_program_runs_total{program=\"sc_ret\"} 3\n") !=
        std::string::npos);
  CHECK(timed.find("fetchcost_bpf_program_run_seconds_total{program=\"sc_ret\"} 1e-06\n") !=
        std::string::npos);
}

TEST_CASE("the ledger survives a restart and answers time-window queries") {
  const TempDir temp("ledger");
  const std::string dir = temp;
  {
    auto ledger = exporter::Ledger::open(dir);
    REQUIRE(ledger.ok());
    (*ledger)->add(7200 + 10, {0, "a", "g", "t", "exact"}, {100, 1, 0, 0.5, 0.25});
    (*ledger)->add(7200 + 20, {0, "a", "g", "t", "exact"}, {50, 1, 1, 0.5, 0});
    (*ledger)->add(3 * 3600 + 5, {0, "b", "", "t", "estimated"}, {7, 1, 0, 0, 0});
    REQUIRE((*ledger)->save().ok());
  }
  auto reopened = exporter::Ledger::open(dir);
  REQUIRE(reopened.ok());
  auto all = (*reopened)->query(0, 1 << 30);
  REQUIRE(all.size() == 2);
  CHECK(all[0].first.client_id == "a");
  CHECK(all[0].second.bytes == 150);
  CHECK(all[0].second.requests == 2);
  CHECK(all[0].second.errors == 1);
  CHECK(all[0].second.cost_api == doctest::Approx(1.0));
  CHECK((*reopened)->query(3 * 3600, 4 * 3600).size() == 1);

  std::ofstream(dir + "/ledger.json") << "{not json";
  auto broken = exporter::Ledger::open(dir);
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.error().message.find("move it away") != std::string::npos);
  // A bucket whose count would wrap (-1 bytes read as 2^64 - 1) is refused the same way.
  std::ofstream(dir + "/ledger.json")
      << R"({"version":1,"buckets":[{"hour":7200,"client_id":"a","group_id":"","topic":"t",
            "method":"exact","bytes":-1,"requests":1,"errors":0,"cost_api":0,"cost_egress":0}]})";
  auto wrapped = exporter::Ledger::open(dir);
  REQUIRE_FALSE(wrapped.ok());
  CHECK(wrapped.error().message.find("\"bytes\" is not a whole number") != std::string::npos);
}

TEST_CASE("the audit log writes JSON lines and rotates by size") {
  const TempDir temp("audit");
  const std::string dir = temp;
  const std::string path = dir + "/audit.jsonl";
  auto log = exporter::AuditLog::open(path, 600, 2);
  REQUIRE(log.ok());
  for (int i = 0; i < 20; ++i) {
    exporter::AuditRecord r;
    r.unix_ms = i;
    r.client_id = "client\xff";
    r.topic = "t";
    r.object_key = "t-id/0/00000000000000000000-seg.log";
    r.bytes = 10;
    r.method = "exact";
    (*log)->write(r);
  }
  CHECK((*log)->records_written() == 20);
  CHECK(std::filesystem::exists(path + ".1"));
  CHECK(std::filesystem::exists(path + ".2"));
  CHECK_FALSE(std::filesystem::exists(path + ".3"));
  CHECK(std::filesystem::file_size(path) <= 600);
  const std::string text = read_all(path);
  CHECK(text.find("\"object_key\":\"t-id/0/00000000000000000000-seg.log\"") != std::string::npos);
}

TEST_CASE("client series carry the peer's address as peer_ip, one series per client and peer") {
  sensors::SensorTable table;
  sensors::Observation o;
  o.client_id = "scanner";
  o.peer_ip = "10.77.1.11";
  o.topic = "orders";
  o.remote_bytes = 100;
  o.requests = 1;
  o.now_ns = 1;
  table.record(o);
  o.peer_ip = "10.77.1.12";  // the same client-id from another pod
  o.remote_bytes = 50;
  table.record(o);
  o.client_id = "peer:10.77.1.13";  // an opaque connection: the peer is the identity
  o.peer_ip = "10.77.1.13";
  o.method = sensors::Method::kEstimated;
  o.remote_bytes = 70;
  table.record(o);
  const std::string text = exporter::render_prometheus(table, {}, {.currency = "USD"});
  CHECK(text.find("kafka_server_remote_fetch_bytes_total{client_id=\"scanner\",peer_ip=\"10.77.1."
                  "11\",topic=\"orders\",method=\"exact\"} 100") != std::string::npos);
  CHECK(text.find("kafka_server_remote_fetch_bytes_total{client_id=\"scanner\",peer_ip=\"10.77.1."
                  "12\",topic=\"orders\",method=\"exact\"} 50") != std::string::npos);
  CHECK(text.find("kafka_server_remote_fetch_bytes_total{client_id=\"peer:10.77.1.13\",peer_ip="
                  "\"10.77.1.13\",topic=\"orders\",method=\"estimated\"} 70") != std::string::npos);
}

TEST_CASE("the metrics page streams in pieces: the same text, bounded pieces, stops when refused") {
  sensors::SensorTable table(sensors::Config{.max_sensors = 3000});
  for (int i = 0; i < 3000; ++i) {
    const std::string client = "client-" + std::to_string(i) + (i % 7 == 0 ? "\"q\\" : "");
    sensors::Observation o;
    o.client_id = client;
    o.peer_ip = i % 2 ? "10.1.2.3" : "";
    o.topic = "orders";
    o.remote_bytes = 1000 + i;
    o.requests = 1;
    o.latency_seconds = 0.001 * (i % 100);
    o.cost_api = 4e-7;
    o.now_ns = 1 + i;
    table.record(o);
    if (i % 10 == 0) table.set_group(client, "group-" + std::to_string(i));
  }
  exporter::SelfMetrics self;
  self.version = "test";
  self.ring_drops_per_cpu = {1, 2};
  const std::string whole = exporter::render_prometheus(table, self, {.currency = "EUR"});

  sensors::Snapshot snap;
  table.snapshot(snap);
  std::string joined;
  std::size_t pieces = 0, largest = 0;
  exporter::render_prometheus(snap, self, {.currency = "EUR"}, [&](std::string_view piece) {
    joined.append(piece);
    ++pieces;
    largest = std::max(largest, piece.size());
    return true;
  });
  CHECK(joined == whole);
  CHECK(pieces > 10);                      // megabytes of text …
  CHECK(largest < 64 * 1024 + 64 * 1024);  // … handed over in ~64 KiB pieces

  // Every sensor's series is there once per family.
  std::size_t bytes_series = 0;
  for (std::size_t at = 0;
       (at = whole.find("\nkafka_server_remote_fetch_bytes_total{", at)) != std::string::npos; ++at)
    ++bytes_series;
  CHECK(bytes_series == 3000);
  CHECK(whole.find("kafka_server_remote_fetch_bytes_total{client_id=\"client-7\\\"q\\\\\",peer_ip="
                   "\"10.1.2.3\",topic=\"orders\",method=\"exact\"} 1007\n") != std::string::npos);
  CHECK(whole.find(
            "fetchcost_client_group_info{client_id=\"client-10\",group_id=\"group-10\"} 1\n") !=
        std::string::npos);

  std::size_t calls = 0;
  exporter::render_prometheus(snap, self, {}, [&](std::string_view) { return ++calls < 2; });
  CHECK(calls == 2);  // the client went away: nothing rendered after the refused piece

  const TempDir temp("promtool-large");
  const std::string dir = temp;
  const std::string file = dir + "/metrics.txt";
  std::ofstream(file) << whole;
  const int rc =
      std::system(("promtool check metrics < " + file + " > " + dir + "/out.txt 2>&1").c_str());
  INFO(read_all(dir + "/out.txt").substr(0, 2000));
  CHECK(rc == 0);
}

TEST_CASE("ledger retention: old hours fold into days, the oldest days go, reports still add up") {
  constexpr std::int64_t kDay = 86400, kHour = 3600;
  const std::int64_t now = 20'000 * kDay + 12 * kHour + 600;  // 12:10 UTC on day 20,000
  const TempDir temp("retention");
  const std::string dir = temp;
  // What was counted, kept independently of the ledger: per hour and per UTC day.
  std::map<std::int64_t, std::uint64_t> bytes_per_hour, bytes_per_day;
  {
    auto ledger = exporter::Ledger::open(dir, {.retention_days = 400, .hourly_days = 35});
    REQUIRE(ledger.ok());
    // 500 days of reads, every 7 hours, from three clients on two methods.
    for (std::int64_t t = now - 500 * kDay; t <= now; t += 7 * kHour + 13) {
      const std::uint64_t bytes = 1 + static_cast<std::uint64_t>(t % 997);
      const std::string client = "client-" + std::to_string(t % 3);
      (*ledger)->add(t, {0, client, "g", "orders", t % 2 ? "exact" : "estimated"},
                     {bytes, 1, 0, 0.25, 0.5});
      bytes_per_hour[t / kHour] += bytes;
      bytes_per_day[t / kDay] += bytes;
    }
    const std::size_t before = (*ledger)->size();
    const auto done = (*ledger)->compact(now);
    CHECK(done.dropped > 0);
    CHECK(done.folded > 0);
    CHECK((*ledger)->size() < before);
    REQUIRE((*ledger)->save().ok());
  }
  // The saved file is what a restart (and `fetchcost report --state-dir`) reads.
  auto ledger = exporter::Ledger::open(dir, {.retention_days = 400, .hourly_days = 35});
  REQUIRE(ledger.ok());
  const auto all = (*ledger)->query(std::numeric_limits<std::int64_t>::min() / 4,
                                    std::numeric_limits<std::int64_t>::max() / 4);
  const std::int64_t drop_before = now - 400 * kDay, fold_before = now - 35 * kDay;
  for (const auto& [k, v] : all) {
    const std::int64_t start = k.hour * kHour, end = start + k.hours * kHour;
    CHECK(end > drop_before);  // nothing beyond the retention
    if (k.hours == 24) {
      CHECK(start % kDay == 0);            // a UTC day …
      CHECK(start + kDay <= fold_before);  // … that ended before the hourly window
    } else {
      CHECK(k.hours == 1);
      CHECK(start > fold_before - kDay);  // hourly only in days that reach into the window
    }
  }
  auto sum = [](const std::vector<std::pair<exporter::LedgerKey, exporter::LedgerValue>>& rows) {
    std::uint64_t b = 0;
    for (const auto& [k, v] : rows) b += v.bytes;
    return b;
  };
  // Every whole UTC day inside the retention, folded or not, adds up to what was counted.
  const std::int64_t first_day = drop_before / kDay + 1, last_day = now / kDay;
  std::uint64_t expected_total = 0;
  for (std::int64_t d = first_day; d <= last_day; ++d) {
    const std::uint64_t want = bytes_per_day.count(d) ? bytes_per_day[d] : 0;
    expected_total += want;
    CHECK_MESSAGE(sum((*ledger)->query(d * kDay, (d + 1) * kDay)) == want, "day " << d);
  }
  CHECK(sum((*ledger)->query(first_day * kDay, now + kHour)) == expected_total);
  // Inside the hourly window every hour is still exact.
  for (std::int64_t h = fold_before / kHour + 24; h <= now / kHour; ++h) {
    const std::uint64_t want = bytes_per_hour.count(h) ? bytes_per_hour[h] : 0;
    CHECK_MESSAGE(sum((*ledger)->query(h * kHour, (h + 1) * kHour)) == want, "hour " << h);
  }

  // fetchcost report reads the same file: its totals for day-aligned periods reconcile.
  std::ifstream in(dir + "/ledger.json");
  const auto doc = nlohmann::json::parse(in);
  auto buckets = cli::parse_ledger(doc);
  REQUIRE(buckets.ok());
  for (const auto& [from_day, to_day] : {std::pair{first_day, last_day + 1},
                                         std::pair{first_day + 10, first_day + 40},  // daily part
                                         std::pair{last_day - 20, last_day + 1}}) {  // hourly part
    std::uint64_t want = 0;
    for (std::int64_t d = from_day; d < to_day; ++d)
      want += bytes_per_day.count(d) ? bytes_per_day[d] : 0;
    const auto report = cli::aggregate(*buckets, from_day * kDay, to_day * kDay, "USD");
    CHECK_MESSAGE(report.total.bytes == want, "days " << from_day << ".." << to_day);
  }
}

TEST_CASE("a ledger.json written before retention existed loads and folds like a new one") {
  const TempDir temp("ledger-v1");
  const std::string dir = temp;
  // The format as fetchcostd 0.1 wrote it: hourly rows, no "hours" field.
  std::ofstream(dir + "/ledger.json")
      << R"({"buckets":[{"bytes":100,"client_id":"a","cost_api":0.5,"cost_egress":0.25,"errors":0,)"
      << R"("group_id":"g","hour":10,"method":"exact","requests":1,"topic":"t"},)"
      << R"({"bytes":50,"client_id":"a","cost_api":0.5,"cost_egress":0,"errors":1,)"
      << R"("group_id":"g","hour":11,"method":"exact","requests":1,"topic":"t"},)"
      << R"({"bytes":7,"client_id":"b","cost_api":0,"cost_egress":0,"errors":0,)"
      << R"("group_id":"","hour":900000,"method":"estimated","requests":1,"topic":"t"}],"version":1})";
  auto ledger = exporter::Ledger::open(dir, {.retention_days = 0, .hourly_days = 1});
  REQUIRE(ledger.ok());
  CHECK((*ledger)->size() == 3);
  // Hours 10 and 11 (day 0) fold into one day; hour 900,000 is within a day of "now".
  const auto done = (*ledger)->compact(900'000LL * 3600 + 1800);
  CHECK(done.folded == 2);
  CHECK(done.dropped == 0);
  const auto all = (*ledger)->query(0, 1'000'000 * 3600LL);
  REQUIRE(all.size() == 2);
  CHECK(all[0].first.hour == 0);
  CHECK(all[0].first.hours == 24);
  CHECK(all[0].second.bytes == 150);
  CHECK(all[0].second.requests == 2);
  CHECK(all[0].second.errors == 1);
  CHECK(all[1].first.hours == 1);
  REQUIRE((*ledger)->save().ok());
  CHECK(read_all(dir + "/ledger.json").find("\"hours\":24") != std::string::npos);
  auto again = exporter::Ledger::open(dir);
  REQUIRE(again.ok());
  CHECK((*again)->query(0, 3600).size() == 1);  // the daily bucket overlaps its first hour
}
