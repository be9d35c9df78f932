#include "report_model.h"

#include "base/json_count.h"
#include "identity.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

namespace fc::cli {

Result<std::vector<LedgerBucket>> parse_ledger(const nlohmann::json& doc) {
  std::vector<LedgerBucket> out;
  try {
    for (const auto& r : doc.at("buckets")) {
      LedgerBucket b;
      b.hour = json_count_at<std::int64_t>(r, "hour");
      b.hours = r.contains("hours") ? json_count_at<int>(r, "hours") : 1;
      b.client_id = r.at("client_id").get<std::string>();
      b.group_id = r.value("group_id", std::string());
      b.topic = r.at("topic").get<std::string>();
      b.method = r.value("method", std::string());
      b.bytes = json_count_at<std::uint64_t>(r, "bytes");
      b.requests = json_count_at<std::uint64_t>(r, "requests");
      b.errors = r.contains("errors") ? json_count_at<std::uint64_t>(r, "errors") : 0;
      b.cost_api = r.value("cost_api", 0.0);
      b.cost_egress = r.value("cost_egress", 0.0);
      out.push_back(std::move(b));
    }
  } catch (const std::exception& e) {
    return make_error(std::string("the ledger has an unexpected shape (") + e.what() +
                      "); it should be fetchcostd's ledger.json or /api/v1/report");
  }
  return out;
}

Report aggregate(const std::vector<LedgerBucket>& buckets, std::int64_t from, std::int64_t to,
                 std::string currency) {
  Report report;
  report.from = from;
  report.to = to;
  report.currency = std::move(currency);
  std::map<std::tuple<std::string, std::string, std::string>, ReportLine> lines;
  report.total.client_id = "TOTAL";
  for (const auto& b : buckets) {
    const std::int64_t start = b.hour * 3600;
    if (!(start + std::int64_t{b.hours} * 3600 > from && start < to)) continue;
    ReportLine& line = lines[{b.client_id, b.group_id, b.topic}];
    line.client_id = b.client_id;
    line.identity = identity_kind(b.client_id);
    line.group_id = b.group_id;
    line.topic = b.topic;
    for (ReportLine* l : {&line, &report.total}) {
      l->bytes += b.bytes;
      l->requests += b.requests;
      l->errors += b.errors;
      l->cost += b.cost_api + b.cost_egress;
    }
  }
  for (auto& [k, l] : lines) report.lines.push_back(l);
  std::stable_sort(report.lines.begin(), report.lines.end(),
                   [](const ReportLine& a, const ReportLine& b) {
                     if (a.cost != b.cost) return a.cost > b.cost;
                     return std::tie(a.client_id, a.group_id, a.topic) <
                            std::tie(b.client_id, b.group_id, b.topic);
                   });
  return report;
}

Result<ReportFormat> parse_report_format(const std::string& text) {
  if (text == "table") return ReportFormat::kTable;
  if (text == "csv") return ReportFormat::kCsv;
  if (text == "json") return ReportFormat::kJson;
  return make_error("--format must be table, csv or json, got \"" + text + "\"");
}

namespace {
std::string money(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6f", v);
  return buf;
}
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"') out += '"';
    out += ch;
  }
  return out + "\"";
}
}  // namespace

std::string render_report(const Report& r, ReportFormat format) {
  std::string out;
  if (format == ReportFormat::kJson) {
    nlohmann::json lines = nlohmann::json::array();
    auto to_json = [](const ReportLine& l) {
      return nlohmann::json{{"client_id", l.client_id}, {"group_id", l.group_id},
                            {"topic", l.topic},         {"bytes", l.bytes},
                            {"requests", l.requests},   {"errors", l.errors},
                            {"cost", l.cost},           {"identity", l.identity}};
    };
    for (const auto& l : r.lines) lines.push_back(to_json(l));
    nlohmann::json total = to_json(r.total);
    total.erase("client_id");
    total.erase("group_id");
    total.erase("topic");
    total.erase("identity");
    nlohmann::json doc{{"from", format_time(r.from)},
                       {"to", format_time(r.to)},
                       {"currency", r.currency},
                       {"lines", lines},
                       {"total", total}};
    return doc.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  if (format == ReportFormat::kCsv) {
    out = "client_id,group_id,topic,bytes,requests,errors,cost_" + r.currency + ",identity\n";
    for (const auto& l : r.lines)
      out += csv_field(l.client_id) + "," + csv_field(l.group_id) + "," + csv_field(l.topic) + "," +
             std::to_string(l.bytes) + "," + std::to_string(l.requests) + "," +
             std::to_string(l.errors) + "," + money(l.cost) + "," + l.identity + "\n";
    out += "TOTAL,,," + std::to_string(r.total.bytes) + "," + std::to_string(r.total.requests) +
           "," + std::to_string(r.total.errors) + "," + money(r.total.cost) + ",\n";
    return out;
  }
  std::vector<std::vector<std::string>> table{
      {"CLIENT", "GROUP", "TOPIC", "BYTES", "REQUESTS", "ERRORS", "COST_" + r.currency, "BY"}};
  for (const auto& l : r.lines)
    table.push_back({l.client_id, l.group_id.empty() ? "-" : l.group_id, l.topic,
                     std::to_string(l.bytes), std::to_string(l.requests), std::to_string(l.errors),
                     money(l.cost), l.identity});
  table.push_back({"TOTAL", "", "", std::to_string(r.total.bytes), std::to_string(r.total.requests),
                   std::to_string(r.total.errors), money(r.total.cost), ""});
  std::vector<std::size_t> width(table[0].size(), 0);
  for (const auto& row : table)
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  out =
      "chargeback " + format_time(r.from) + " .. " + format_time(r.to) + " (" + r.currency + ")\n";
  for (const auto& row : table) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      const bool numeric = i >= 3;
      const std::string pad(width[i] - row[i].size(), ' ');
      line += numeric ? pad + row[i] : row[i] + pad;
      if (i + 1 < row.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

Result<std::int64_t> parse_time(const std::string& text, std::int64_t now) {
  const std::string usage =
      " (use now, unix seconds, -2h/-30m/-7d, or UTC like 2026-11-29T16:00:00Z)";
  if (text.empty()) return make_error("empty time" + usage);
  if (text == "now") return now;
  if (text[0] == '-' && text.size() >= 3) {
    const char unit = text.back();
    const long long mult = unit == 's'   ? 1
                           : unit == 'm' ? 60
                           : unit == 'h' ? 3600
                           : unit == 'd' ? 86400
                                         : 0;
    try {
      std::size_t used = 0;
      const long long n = std::stoll(text.substr(1, text.size() - 2), &used);
      if (mult && used == text.size() - 2 && n >= 0) return now - n * mult;
    } catch (const std::exception&) {
    }
    return make_error("cannot read the time \"" + text + "\"" + usage);
  }
  if (text.find_first_not_of("0123456789") == std::string::npos) return std::stoll(text);
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  char tail[8] = {0};
  const int n =
      std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%7s", &y, &mo, &d, &h, &mi, &s, tail);
  const bool ok = (n == 3 && text.size() == 10) || n >= 5;
  if (!ok || (n == 7 && std::string(tail) != "Z") || mo < 1 || mo > 12 || d < 1 || d > 31)
    return make_error("cannot read the time \"" + text + "\"" + usage);
  if (n == 5 && text.size() > 16 && text.substr(16) != "Z")
    return make_error("cannot read the time \"" + text + "\"" + usage);
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  return static_cast<std::int64_t>(timegm(&tm));
}

std::string format_time(std::int64_t t) {
  if (t <= 0) return "beginning";
  if (t >= 253402300799) return "end";
  const std::time_t tt = static_cast<std::time_t>(t);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace fc::cli
