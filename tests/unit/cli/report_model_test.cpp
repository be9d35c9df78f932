#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "report_model.h"

using namespace fc::cli;

namespace {
LedgerBucket bucket(std::int64_t hour, std::string client, std::string group, std::string topic,
                    std::string method, std::uint64_t bytes, std::uint64_t requests, double api,
                    double egress) {
  LedgerBucket b;
  b.hour = hour;
  b.client_id = std::move(client);
  b.group_id = std::move(group);
  b.topic = std::move(topic);
  b.method = std::move(method);
  b.bytes = bytes;
  b.requests = requests;
  b.cost_api = api;
  b.cost_egress = egress;
  return b;
}
}  // namespace

TEST_CASE("report: hours overlapping [from, to), summed per client/group/topic over methods") {
  const std::int64_t h = 490'000;  // some hour
  std::vector<LedgerBucket> buckets = {
      bucket(h, "scanner", "", "scan", "exact", 1000, 2, 0.1, 0.2),
      bucket(h, "scanner", "", "scan", "estimated", 500, 1, 0.05, 0.05),
      bucket(h + 1, "scanner", "", "scan", "exact", 100, 1, 0.01, 0.0),
      bucket(h, "analytics-1", "analytics", "scan", "exact", 10, 1, 0.001, 0.0),
      bucket(h - 5, "old", "", "scan", "exact", 7, 1, 9, 9),
  };
  const Report r = aggregate(buckets, h * 3600 + 1800, (h + 2) * 3600, "USD");
  REQUIRE(r.lines.size() == 2);
  CHECK(r.lines[0].client_id == "scanner");  // most expensive first
  CHECK(r.lines[0].bytes == 1600);
  CHECK(r.lines[0].requests == 4);
  CHECK(r.lines[0].cost == doctest::Approx(0.41));
  CHECK(r.total.bytes == 1610);
  CHECK(r.total.requests == 5);
  CHECK(r.total.cost == doctest::Approx(0.411));

  const auto csv = render_report(r, ReportFormat::kCsv);
  CHECK(
      csv.starts_with("client_id,group_id,topic,bytes,requests,errors,cost_USD,identity\n"
                      "scanner,,scan,1600,4,0,0.410000,client-id\n"));
  CHECK(csv.find("TOTAL,,,1610,5,0,0.411000,\n") != std::string::npos);
  const auto json = nlohmann::json::parse(render_report(r, ReportFormat::kJson));
  CHECK(json["total"]["bytes"] == 1610);
  CHECK(json["lines"].size() == 2);
  CHECK(json["lines"][1]["group_id"] == "analytics");
  const auto table = render_report(r, ReportFormat::kTable);
  CHECK(table.find("TOTAL") != std::string::npos);
  CHECK(table.find("analytics-1") != std::string::npos);
}

TEST_CASE("report: each row says what its client is — a client-id, a peer address, or nobody") {
  const std::int64_t h = 490'000;
  std::vector<LedgerBucket> buckets = {
      bucket(h, "analytics-1", "analytics", "scan", "exact", 300, 3, 0.3, 0.0),
      bucket(h, "peer:10.77.0.11", "", "scan", "estimated", 200, 2, 0.2, 0.0),
      bucket(h, "__unattributed__", "", "scan", "exact", 100, 1, 0.1, 0.0),
  };
  const Report r = aggregate(buckets, h * 3600, (h + 1) * 3600, "USD");
  REQUIRE(r.lines.size() == 3);
  CHECK(r.lines[0].identity == "client-id");
  CHECK(r.lines[1].identity == "peer");
  CHECK(r.lines[2].identity == "-");
  const auto csv = render_report(r, ReportFormat::kCsv);
  CHECK(csv.find("peer:10.77.0.11,,scan,200,2,0,0.200000,peer\n") != std::string::npos);
  const auto json = nlohmann::json::parse(render_report(r, ReportFormat::kJson));
  CHECK(json["lines"][1]["identity"] == "peer");
  CHECK_FALSE(json["total"].contains("identity"));
  const auto table = render_report(r, ReportFormat::kTable);
  CHECK(table.find(" BY") != std::string::npos);
  CHECK(table.find("peer") != std::string::npos);
}

TEST_CASE("ledger documents parse (ledger.json and /api/v1/report have the same buckets)") {
  auto doc = nlohmann::json::parse(R"({"version":1,"buckets":[{"hour":5,"client_id":"c",
     "group_id":"g","topic":"t","method":"exact","bytes":3,"requests":1,"errors":0,
     "cost_api":0.1,"cost_egress":0.2}]})");
  auto b = parse_ledger(doc);
  REQUIRE(b.ok());
  CHECK((*b)[0].bytes == 3);
  CHECK_FALSE(parse_ledger(nlohmann::json::parse(R"({"buckets":[{"hour":1}]})")).ok());
  // A count that would wrap (-1 bytes read as 2^64 - 1) or be cut (2.5 requests) is refused,
  // naming the field.
  for (const char* bad : {R"("bytes":-1,"requests":1)", R"("bytes":3,"requests":2.5)",
                          R"("bytes":3,"requests":1,"errors":1e300)"}) {
    const auto r = parse_ledger(nlohmann::json::parse(
        std::string(R"({"buckets":[{"hour":5,"client_id":"c","topic":"t",)") + bad + "}]}"));
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("is not a whole number") != std::string::npos);
  }
}

TEST_CASE("times: now, unix, relative, ISO-8601 UTC; errors say what is accepted") {
  const std::int64_t now = 1'800'000'000;
  CHECK(*parse_time("now", now) == now);
  CHECK(*parse_time("1767225600", now) == 1767225600);
  CHECK(*parse_time("-2h", now) == now - 7200);
  CHECK(*parse_time("-30m", now) == now - 1800);
  CHECK(*parse_time("-7d", now) == now - 7 * 86400);
  CHECK(*parse_time("2026-01-01", now) == 1767225600);
  CHECK(*parse_time("2026-01-01T01:00", now) == 1767225600 + 3600);
  CHECK(*parse_time("2026-01-01T01:00:30Z", now) == 1767225600 + 3630);
  for (const char* bad : {"", "yesterday", "-2x", "2026-13-01", "2026-01-01T01:00+02"}) {
    auto t = parse_time(bad, now);
    CHECK_FALSE(t.ok());
    if (!t.ok()) CHECK(t.error().message.find("unix seconds") != std::string::npos);
  }
  CHECK(format_time(1767225600) == "2026-01-01T00:00:00Z");
  CHECK_FALSE(parse_report_format("xml").ok());
}

TEST_CASE("report: a day folded by the ledger's retention counts when the day overlaps") {
  const std::int64_t day = 20'000 * 24;  // the first hour of some UTC day
  LedgerBucket folded = bucket(day, "scanner", "", "scan", "exact", 5000, 50, 1, 1);
  folded.hours = 24;
  const std::vector<LedgerBucket> buckets = {folded};
  // An hour in the middle of that day: the daily bucket (not only its first hour) overlaps it.
  CHECK(aggregate(buckets, (day + 12) * 3600, (day + 13) * 3600, "USD").total.bytes == 5000);
  CHECK(aggregate(buckets, (day + 24) * 3600, (day + 48) * 3600, "USD").total.bytes == 0);
  CHECK(aggregate(buckets, (day - 24) * 3600, day * 3600, "USD").total.bytes == 0);
  auto parsed = parse_ledger(nlohmann::json::parse(
      R"({"buckets":[{"hour":1,"hours":24,"client_id":"c","topic":"t","bytes":1,"requests":1}]})"));
  REQUIRE(parsed);
  CHECK(parsed->at(0).hours == 24);
}
