#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "api_client.h"
#include "top_model.h"

using namespace fc::cli;

namespace {

SensorRow sensor(std::string client, std::string topic, std::uint64_t bytes, std::uint64_t gets,
                 double cost, std::string group = "", std::string method = "exact") {
  SensorRow r;
  r.client_id = std::move(client);
  r.group_id = std::move(group);
  r.topic = std::move(topic);
  r.method = std::move(method);
  r.bytes = bytes;
  r.requests = gets;
  r.object_bytes = bytes;
  r.delivered_bytes = bytes;
  r.cost = cost;
  return r;
}

const ClientRow& find(const std::vector<ClientRow>& rows, const std::string& client) {
  for (const auto& r : rows)
    if (r.client_id == client) return r;
  FAIL("no row for " << client);
  return rows.front();
}

}  // namespace

TEST_CASE("rates are differences between two samples, per client over its topics") {
  Snapshot a, b;
  a.time_seconds = 100;
  b.time_seconds = 102;
  a.sensors = {sensor("scanner", "t1", 1000, 2, 0.001), sensor("scanner", "t2", 0, 0, 0),
               sensor("tail", "t1", 50, 1, 0.0001)};
  b.sensors = {sensor("scanner", "t1", 5000, 6, 0.003), sensor("scanner", "t2", 2000, 2, 0.001),
               sensor("tail", "t1", 50, 1, 0.0001)};
  TopModel model;
  model.update(nullptr, a);
  const auto rows = model.update(&a, b);
  const auto& s = find(rows, "scanner");
  CHECK(s.bytes_per_second == doctest::Approx(3000.0));  // (7000 - 1000) / 2 s
  CHECK(s.gets_per_second == doctest::Approx(3.0));
  CHECK(s.bytes_per_get == doctest::Approx(1000.0));  // 6000 bytes / 6 GETs in the interval
  CHECK(s.cost_per_hour == doctest::Approx(0.003 / 2 * 3600));
  CHECK(s.total_cost == doctest::Approx(0.004));
  CHECK(s.topics == std::vector<std::string>{"t1", "t2"});
  const auto& t = find(rows, "tail");
  CHECK(t.bytes_per_second == 0);
  CHECK(t.cost_per_hour == 0);
  CHECK(t.bytes_per_get == doctest::Approx(50.0));  // idle: falls back to the cumulative ratio
}

TEST_CASE("a counter that goes down (daemon restart) counts from zero, never negative") {
  Snapshot a, b;
  a.time_seconds = 0;
  b.time_seconds = 1;
  a.sensors = {sensor("c", "t", 10'000, 10, 1.0)};
  b.sensors = {sensor("c", "t", 300, 1, 0.01)};
  TopModel model;
  const auto rows = model.update(&a, b);
  CHECK(rows[0].bytes_per_second == doctest::Approx(300.0));
  CHECK(rows[0].cost_per_hour == doctest::Approx(0.01 * 3600));
}

TEST_CASE("each row says what its client is: a client-id, a peer address, or nobody") {
  Snapshot b;
  b.sensors = {sensor("analytics-1", "t", 10, 1, 0.1), sensor("peer:10.77.0.11", "t", 20, 2, 0.2),
               sensor("__unattributed__", "t", 5, 1, 0.05)};
  TopModel model;
  auto rows = model.update(nullptr, b);
  REQUIRE(rows.size() == 3);
  sort_rows(rows, Column::kIdentity, false);
  CHECK(rows[0].identity == "-");
  CHECK(rows[1].identity == "client-id");
  CHECK(rows[1].client_id == "analytics-1");
  CHECK(rows[2].identity == "peer");
  CHECK(rows[2].client_id == "peer:10.77.0.11");
  CHECK(*parse_column("identity") == Column::kIdentity);
  CHECK(std::string(column_title(Column::kIdentity)) == "BY");
}

TEST_CASE("p99 from per-bucket counts, as Prometheus' histogram_quantile") {
  const std::vector<double> bounds = {0.01, 0.1, 1.0};
  // 100 samples: 90 in (0, 0.01], 9 in (0.01, 0.1], 1 in (0.1, 1]
  CHECK(histogram_quantile(0.99, bounds, {90, 9, 1, 0}) == doctest::Approx(0.1));
  // rank 50 of 100 inside the first bucket: linear from 0
  CHECK(histogram_quantile(0.5, bounds, {100, 0, 0, 0}) == doctest::Approx(0.005));
  // rank 99 of 100 in (0.1, 1], 50 there, 50 before: 0.1 + 0.9 * 49/50
  CHECK(histogram_quantile(0.99, bounds, {50, 0, 50, 0}) == doctest::Approx(0.1 + 0.9 * 49 / 50.0));
  // in +Inf: the last finite bound
  CHECK(histogram_quantile(0.99, bounds, {1, 0, 0, 99}) == doctest::Approx(1.0));
  CHECK(histogram_quantile(0.99, bounds, {0, 0, 0, 0}) < 0);
}

TEST_CASE("p99 uses the interval's buckets when the interval saw reads") {
  Snapshot a, b;
  a.time_seconds = 0;
  b.time_seconds = 1;
  a.latency_bounds = b.latency_bounds = {0.01, 0.1, 1.0};
  auto s = sensor("c", "t", 10, 1, 0);
  s.latency_buckets = {1000, 0, 0, 0};  // long ago: fast
  a.sensors = {s};
  s.latency_buckets = {1000, 0, 10, 0};  // now: slow
  b.sensors = {s};
  TopModel model;
  const auto rows = model.update(&a, b);
  CHECK(rows[0].p99_seconds > 0.1);
  TopModel fresh;
  CHECK(fresh.update(nullptr, b)[0].p99_seconds < 0.1);  // first sample: since start
}

TEST_CASE(
    "flags: SCAN after a streak, SMALL, ERR in the interval, EST, BUDGET by client or group") {
  TopModel model({.scan_streak = 3, .small_amplification = 2.0});
  Snapshot prev;
  prev.time_seconds = 0;
  prev.sensors = {sensor("scanner", "t", 0, 0, 0)};
  std::vector<ClientRow> rows;
  for (int i = 1; i <= 3; ++i) {
    Snapshot next;
    next.time_seconds = i;
    next.sensors = {sensor("scanner", "t", 1000u * i, 1u * i, 0)};
    rows = model.update(&prev, next);
    CHECK(static_cast<bool>(rows[0].flags & kFlagScan) == (i >= 3));
    prev = next;
  }
  Snapshot idle = prev;
  idle.time_seconds = 10;
  CHECK((model.update(&prev, idle)[0].flags & kFlagScan) == 0u);  // the streak breaks

  Snapshot a, b;
  a.time_seconds = 0;
  b.time_seconds = 1;
  auto small = sensor("small", "t", 100, 1, 0, "g-small");
  small.object_bytes = 400;  // 4 object bytes per delivered byte
  auto erring = sensor("erring", "t", 0, 1, 0);
  auto est = sensor("est", "t", 10, 1, 0, "", "estimated");
  auto member = sensor("member", "t", 10, 1, 0, "analytics");
  a.sensors = {small, erring, est, member};
  erring.errors = 1;
  erring.requests = 2;
  b.sensors = {small, erring, est, member};
  b.budgets = {{"", "analytics", 1.0, 2.0, true}, {"small", "", 1.0, 0.5, false}};
  rows = TopModel().update(&a, b);
  CHECK(find(rows, "small").flags == kFlagSmall);
  CHECK(find(rows, "erring").flags == kFlagErr);
  CHECK(find(rows, "est").flags == kFlagEst);
  CHECK(find(rows, "member").flags == kFlagBudget);
  CHECK(flag_names(kFlagScan | kFlagErr | kFlagBudget, ",") == "SCAN,ERR,BUDGET");
  CHECK(flag_names(0, ",") == "-");
  CHECK(flag_letters(kFlagScan | kFlagEst) == "S..T.");
}

TEST_CASE("sorting by any column is stable; filter matches client, group, topic or flag") {
  std::vector<ClientRow> rows(3);
  rows[0].client_id = "b";
  rows[0].cost_per_hour = 1;
  rows[0].total_cost = 5;
  rows[1].client_id = "a";
  rows[1].cost_per_hour = 1;
  rows[1].total_cost = 9;
  rows[1].group_id = "analytics";
  rows[2].client_id = "c";
  rows[2].cost_per_hour = 3;
  rows[2].topics = {"payments"};
  rows[2].flags = kFlagScan;
  sort_rows(rows, Column::kCostRate, true);
  CHECK(rows[0].client_id == "c");
  CHECK(rows[1].client_id == "a");  // tie on $/h: higher total cost first
  CHECK(rows[2].client_id == "b");
  sort_rows(rows, Column::kClient, false);
  CHECK(rows[0].client_id == "a");
  CHECK(rows[2].client_id == "c");
  CHECK(filter_rows(rows, "ANALY").size() == 1);
  CHECK(filter_rows(rows, "pay")[0].client_id == "c");
  CHECK(filter_rows(rows, "scan")[0].client_id == "c");
  CHECK(filter_rows(rows, "").size() == 3);
  CHECK(parse_column("p99_s").ok());
  CHECK(parse_column("$/h").ok());
  CHECK_FALSE(parse_column("nope").ok());
  CHECK(parse_column("nope").error().message.find("cost_per_hour") != std::string::npos);
}

TEST_CASE("--once output: comments, a fixed header, whitespace-free fields") {
  Snapshot s;
  s.source = "endpoint http://x";
  s.currency = "USD";
  std::vector<ClientRow> rows(2);
  rows[0].client_id = "has space";
  rows[0].cost_per_hour = 0.5;
  rows[0].topics = {"t1", "t2"};
  rows[0].flags = kFlagScan | kFlagErr;
  rows[0].identity = "client-id";
  rows[1].client_id = "__unattributed__";
  rows[1].identity = "-";
  rows[1].bytes = 100;
  rows[0].bytes = 300;
  const std::string text = render_once(rows, s, 2.0);
  std::istringstream in(text);
  std::string line;
  std::vector<std::vector<std::string>> table;
  while (std::getline(in, line)) {
    if (line.starts_with("#")) {
      if (line.starts_with("# totals"))
        CHECK(line.find("unattributed_share=0.2500") != std::string::npos);
      continue;
    }
    std::istringstream fields(line);
    std::vector<std::string> f;
    for (std::string x; fields >> x;) f.push_back(x);
    table.push_back(f);
  }
  REQUIRE(table.size() == 3);
  CHECK(table[0] == std::vector<std::string>{"client_id", "group_id", "cost_per_hour", "total_cost",
                                             "bytes_per_s", "gets_per_s", "bytes_per_get",
                                             "read_amp", "p99_s", "topics", "flags", "identity"});
  CHECK(table[1] == std::vector<std::string>{"has_space", "-", "0.500000", "0.000000", "0", "0.00",
                                             "0", "0.00", "-", "t1,t2", "SCAN,ERR", "client-id"});
  CHECK(table[2][0] == "__unattributed__");
}

TEST_CASE("the clients API document parses, including latency buckets and budgets") {
  const auto doc = nlohmann::json::parse(R"({"currency":"EUR","latency_buckets_seconds":[0.1,1],
    "budgets":[{"client_id":"x","group_id":"","per_hour":1,"cost_per_hour":2,"exceeded":true}],
    "sensors":[{"client_id":"x","group_id":"g","topic":"t","partition":-1,"method":"exact",
      "bytes":10,"requests":1,"errors":0,"object_bytes":20,"delivered_bytes":10,
      "read_amplification":2,"latency_count":1,"latency_sum_seconds":0.05,
      "latency_buckets":[1,0,0],"cost_api":0.5,"cost_egress":0.25,"folded":false}]})");
  auto s = parse_clients(doc);
  REQUIRE(s.ok());
  CHECK(s->currency == "EUR");
  CHECK(s->sensors[0].cost == doctest::Approx(0.75));
  CHECK(s->sensors[0].latency_buckets == std::vector<std::uint64_t>{1, 0, 0});
  CHECK(s->budgets[0].exceeded);
  CHECK_FALSE(parse_clients(nlohmann::json::parse(R"({"sensors":[{"topic":"t"}]})")).ok());
}

TEST_CASE("PromQL results become the same snapshot (cumulative le buckets → per bucket)") {
  auto r = [](std::map<std::string, std::string> labels, double v) {
    return nlohmann::json{{"metric", labels}, {"value", {1.0, std::to_string(v)}}};
  };
  std::map<std::string, nlohmann::json> results;
  const std::map<std::string, std::string> k{
      {"client_id", "c"}, {"topic", "t"}, {"method", "exact"}};
  results["bytes"] = {r(k, 1000)};
  results["requests"] = {r(k, 4)};
  results["cost"] = {
      r({{"client_id", "c"}, {"topic", "t"}, {"method", "exact"}, {"currency", "USD"}}, 0.25)};
  auto with_le = [&](const char* le) {
    auto l = k;
    l["le"] = le;
    return l;
  };
  results["buckets"] = {r(with_le("0.1"), 1), r(with_le("1"), 3), r(with_le("+Inf"), 4)};
  results["groups"] = {r({{"client_id", "c"}, {"group_id", "g"}}, 1)};
  results["budgets"] = {r({{"group_id", "g"}}, 1)};
  results["drops"] = {r({}, 7)};
  const Snapshot s = snapshot_from_promql(results);
  REQUIRE(s.sensors.size() == 1);
  CHECK(s.sensors[0].bytes == 1000);
  CHECK(s.sensors[0].requests == 4);
  CHECK(s.sensors[0].group_id == "g");
  CHECK(s.sensors[0].cost == doctest::Approx(0.25));
  CHECK(s.latency_bounds == std::vector<double>{0.1, 1});
  CHECK(s.sensors[0].latency_buckets == std::vector<std::uint64_t>{1, 2, 1});
  CHECK(s.drops == 7);
  CHECK(s.budgets[0].exceeded);
}
