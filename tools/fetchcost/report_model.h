// report_model: chargeback reports from the persisted ledger (hourly buckets per client, group,
// topic and attribution method): selection by time, aggregation, CSV/JSON/table rendering.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/result.h"

namespace fc::cli {

struct LedgerBucket {
  std::int64_t hour = 0;  // unix seconds / 3600 of its start
  int hours = 1;  // 1, or 24 for a day folded by the ledger's retention (ledger.hourly_days)
  std::string client_id, group_id, topic, method;
  std::uint64_t bytes = 0, requests = 0, errors = 0;
  double cost_api = 0, cost_egress = 0;
};

// Reads <state_dir>/ledger.json or the /api/v1/report answer (same bucket fields).
Result<std::vector<LedgerBucket>> parse_ledger(const nlohmann::json& doc);

struct ReportLine {
  std::string client_id, group_id, topic;
  std::string identity;  // identity_kind(client_id): "client-id", "peer" or "-"
  std::uint64_t bytes = 0, requests = 0, errors = 0;
  double cost = 0;
};

struct Report {
  std::int64_t from = 0, to = 0;  // unix seconds, [from, to)
  std::string currency = "USD";
  std::vector<ReportLine> lines;  // by cost (descending), then client, group, topic
  ReportLine total;               // client_id "TOTAL"
};

// Buckets whose hour overlaps [from, to), summed per (client, group, topic) over methods.
Report aggregate(const std::vector<LedgerBucket>& buckets, std::int64_t from, std::int64_t to,
                 std::string currency);

enum class ReportFormat { kTable, kCsv, kJson };
Result<ReportFormat> parse_report_format(const std::string& text);
std::string render_report(const Report& report, ReportFormat format);

// "now", unix seconds ("1767225600"), relative ("-2h", "-30m", "-7d"), or UTC ISO-8601
// ("2026-11-29", "2026-11-29T16:00", "2026-11-29T16:00:00Z").
Result<std::int64_t> parse_time(const std::string& text, std::int64_t now_unix);
std::string format_time(std::int64_t unix_seconds);  // "2026-11-29T16:00:00Z"

}  // namespace fc::cli
