#include "top_model.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

namespace fc::cli {
namespace {

std::string lower(std::string s) {
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return s;
}

// Per-client sums of the sensor counters of one snapshot.
struct ClientSums {
  std::string group_id;
  std::uint64_t bytes = 0, requests = 0, errors = 0, object_bytes = 0, delivered = 0;
  double cost = 0;
  std::vector<std::uint64_t> buckets;
  std::set<std::string> topics;
  bool estimated = false;
};

std::map<std::string, ClientSums> sum_by_client(const Snapshot& s) {
  std::map<std::string, ClientSums> out;
  for (const auto& row : s.sensors) {
    ClientSums& c = out[row.client_id];
    if (!row.group_id.empty()) c.group_id = row.group_id;
    c.bytes += row.bytes;
    c.requests += row.requests;
    c.errors += row.errors;
    c.object_bytes += row.object_bytes;
    c.delivered += row.delivered_bytes;
    c.cost += row.cost;
    if (c.buckets.size() < row.latency_buckets.size()) c.buckets.resize(row.latency_buckets.size());
    for (std::size_t i = 0; i < row.latency_buckets.size(); ++i)
      c.buckets[i] += row.latency_buckets[i];
    c.topics.insert(row.topic);
    if (row.method == "estimated" && (row.bytes > 0 || row.requests > 0)) c.estimated = true;
  }
  return out;
}

// Counter difference; a counter that went down (daemon restart, sensor expiry) counts from 0.
std::uint64_t delta(std::uint64_t now, std::uint64_t before) {
  return now >= before ? now - before : now;
}
double delta(double now, double before) {
  return now >= before ? now - before : now;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

std::string no_space(std::string s) {
  if (s.empty()) return "-";
  for (auto& ch : s)
    if (std::isspace(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

}  // namespace

Result<Snapshot> parse_clients(const nlohmann::json& doc) {
  Snapshot s;
  try {
    s.currency = doc.value("currency", std::string("USD"));
    if (doc.contains("latency_buckets_seconds"))
      s.latency_bounds = doc.at("latency_buckets_seconds").get<std::vector<double>>();
    for (const auto& r : doc.at("sensors")) {
      SensorRow row;
      row.client_id = r.at("client_id").get<std::string>();
      row.group_id = r.value("group_id", std::string());
      row.topic = r.at("topic").get<std::string>();
      row.partition = r.value("partition", -1);
      row.method = r.value("method", std::string("exact"));
      row.bytes = r.at("bytes").get<std::uint64_t>();
      row.requests = r.at("requests").get<std::uint64_t>();
      row.errors = r.value("errors", std::uint64_t{0});
      row.object_bytes = r.value("object_bytes", std::uint64_t{0});
      row.delivered_bytes = r.value("delivered_bytes", std::uint64_t{0});
      row.latency_count = r.value("latency_count", std::uint64_t{0});
      if (r.contains("latency_buckets"))
        row.latency_buckets = r.at("latency_buckets").get<std::vector<std::uint64_t>>();
      row.cost = r.value("cost_api", 0.0) + r.value("cost_egress", 0.0);
      s.sensors.push_back(std::move(row));
    }
    if (doc.contains("budgets")) {
      for (const auto& b : doc.at("budgets"))
        s.budgets.push_back({b.value("client_id", std::string()),
                             b.value("group_id", std::string()), b.value("per_hour", 0.0),
                             b.value("cost_per_hour", 0.0), b.value("exceeded", false)});
    }
  } catch (const std::exception& e) {
    return make_error(std::string("the clients API answered an unexpected document (") + e.what() +
                      "); is the endpoint a fetchcostd of the same version?");
  }
  return s;
}

void apply_status(const nlohmann::json& st, Snapshot& s) {
  try {
    s.price_table = st.value("price_table", s.price_table);
    std::uint64_t drops = 0;
    if (st.contains("drops_per_cpu"))
      for (const auto& d : st.at("drops_per_cpu")) drops += d.get<std::uint64_t>();
    s.drops = drops;
    const auto targets = st.contains("targets") ? st.at("targets").size() : 0;
    const auto probes = st.value("probes_attached", std::uint64_t{0});
    s.probe_status = st.value("variant", std::string("?")) + " " + std::to_string(targets) +
                     (targets == 1 ? " target " : " targets ") + std::to_string(probes) + " probes";
    if (!st.value("attribution_enabled", true)) s.probe_status += " PAUSED";
  } catch (const std::exception&) {
    s.probe_status = "status unreadable";
  }
}

double histogram_quantile(double q, const std::vector<double>& bounds,
                          const std::vector<std::uint64_t>& counts) {
  std::uint64_t total = 0;
  for (auto c : counts) total += c;
  if (total == 0) return -1;
  const double rank = q * static_cast<double>(total);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const std::uint64_t before = cumulative;
    cumulative += counts[i];
    if (static_cast<double>(cumulative) >= rank && counts[i] > 0) {
      if (i >= bounds.size()) return bounds.empty() ? -1 : bounds.back();  // in +Inf
      const double lower = i == 0 ? 0.0 : bounds[i - 1];
      const double upper = bounds[i];
      const double within = (rank - static_cast<double>(before)) / static_cast<double>(counts[i]);
      return lower + (upper - lower) * std::clamp(within, 0.0, 1.0);
    }
  }
  return bounds.empty() ? -1 : bounds.back();
}

std::string flag_names(unsigned flags, const char* sep) {
  static const std::pair<unsigned, const char*> names[] = {{kFlagScan, "SCAN"},
                                                           {kFlagSmall, "SMALL"},
                                                           {kFlagErr, "ERR"},
                                                           {kFlagEst, "EST"},
                                                           {kFlagBudget, "BUDGET"}};
  std::string out;
  for (const auto& [bit, name] : names)
    if (flags & bit) out += (out.empty() ? "" : sep) + std::string(name);
  return out.empty() ? "-" : out;
}

std::string flag_letters(unsigned flags) {
  std::string out = ".....";
  if (flags & kFlagScan) out[0] = 'S';
  if (flags & kFlagSmall) out[1] = 'M';
  if (flags & kFlagErr) out[2] = 'E';
  if (flags & kFlagEst) out[3] = 'T';
  if (flags & kFlagBudget) out[4] = 'B';
  return out;
}

std::vector<ClientRow> TopModel::update(const Snapshot* previous, const Snapshot& current) {
  const auto now = sum_by_client(current);
  std::map<std::string, ClientSums> before;
  if (previous) before = sum_by_client(*previous);
  const double dt = previous ? current.time_seconds - previous->time_seconds : 0;
  std::vector<ClientRow> rows;
  for (const auto& [client, c] : now) {
    ClientRow row;
    row.client_id = client;
    row.identity = identity_kind(client);
    row.group_id = c.group_id;
    row.total_cost = c.cost;
    row.bytes = c.bytes;
    row.requests = c.requests;
    row.errors = c.errors;
    row.topics.assign(c.topics.begin(), c.topics.end());
    const ClientSums* b = nullptr;
    if (auto it = before.find(client); it != before.end()) b = &it->second;
    static const ClientSums kZero;
    const ClientSums& base = b ? *b : kZero;
    const std::uint64_t d_bytes = delta(c.bytes, base.bytes);
    const std::uint64_t d_requests = delta(c.requests, base.requests);
    const std::uint64_t d_errors = delta(c.errors, base.errors);
    const std::uint64_t d_object = delta(c.object_bytes, base.object_bytes);
    const std::uint64_t d_delivered = delta(c.delivered, base.delivered);
    if (previous && dt > 0) {
      row.cost_per_hour = delta(c.cost, base.cost) / dt * 3600.0;
      row.bytes_per_second = static_cast<double>(d_bytes) / dt;
      row.gets_per_second = static_cast<double>(d_requests) / dt;
    }
    const bool moved = previous && d_requests > 0;
    // Per-GET size and amplification over the interval when it saw traffic, else since start.
    row.bytes_per_get = moved ? static_cast<double>(d_bytes) / static_cast<double>(d_requests)
                        : c.requests
                            ? static_cast<double>(c.bytes) / static_cast<double>(c.requests)
                            : 0;
    if (moved && d_delivered > 0)
      row.read_amplification = static_cast<double>(d_object) / static_cast<double>(d_delivered);
    else if (c.delivered > 0)
      row.read_amplification =
          static_cast<double>(c.object_bytes) / static_cast<double>(c.delivered);
    std::vector<std::uint64_t> window = c.buckets;
    std::uint64_t window_count = 0;
    for (std::size_t i = 0; i < window.size(); ++i) {
      window[i] = delta(window[i], i < base.buckets.size() ? base.buckets[i] : 0);
      window_count += window[i];
    }
    row.p99_seconds = histogram_quantile(0.99, current.latency_bounds,
                                         previous && window_count > 0 ? window : c.buckets);
    int& streak = remote_streak_[client];
    streak = moved ? streak + 1 : 0;
    if (streak >= rules_.scan_streak) row.flags |= kFlagScan;
    if (row.read_amplification >= rules_.small_amplification) row.flags |= kFlagSmall;
    if (previous ? d_errors > 0 : c.errors > 0) row.flags |= kFlagErr;
    if (c.estimated) row.flags |= kFlagEst;
    for (const auto& budget : current.budgets) {
      if (!budget.exceeded) continue;
      if ((!budget.client_id.empty() && budget.client_id == client) ||
          (!budget.group_id.empty() && budget.group_id == c.group_id))
        row.flags |= kFlagBudget;
    }
    rows.push_back(std::move(row));
  }
  for (auto it = remote_streak_.begin(); it != remote_streak_.end();)
    it = now.count(it->first) ? std::next(it) : remote_streak_.erase(it);
  return rows;
}

Totals totals(const std::vector<ClientRow>& rows) {
  Totals t;
  std::uint64_t unattributed = 0;
  for (const auto& r : rows) {
    t.cost_per_hour += r.cost_per_hour;
    t.total_cost += r.total_cost;
    t.bytes_per_second += r.bytes_per_second;
    t.gets_per_second += r.gets_per_second;
    t.bytes += r.bytes;
    if (r.client_id == kUnattributed) unattributed += r.bytes;
  }
  t.unattributed_share =
      t.bytes ? static_cast<double>(unattributed) / static_cast<double>(t.bytes) : 0;
  return t;
}

namespace {
struct ColumnInfo {
  Column column;
  const char* title;
  const char* key;
};
constexpr ColumnInfo kColumns[] = {
    {Column::kClient, "CLIENT", "client_id"},
    {Column::kGroup, "GROUP", "group_id"},
    {Column::kCostRate, "$/h", "cost_per_hour"},
    {Column::kTotalCost, "COST", "total_cost"},
    {Column::kBytesRate, "B/s", "bytes_per_s"},
    {Column::kGetsRate, "GET/s", "gets_per_s"},
    {Column::kBytesPerGet, "B/GET", "bytes_per_get"},
    {Column::kAmplification, "AMP", "read_amp"},
    {Column::kP99, "P99", "p99_s"},
    {Column::kTopics, "TPC", "topics"},
    {Column::kFlags, "FLAGS", "flags"},
    {Column::kIdentity, "BY", "identity"},
};
}  // namespace

const char* column_title(Column c) {
  return kColumns[static_cast<int>(c)].title;
}
const char* column_key(Column c) {
  return kColumns[static_cast<int>(c)].key;
}

Result<Column> parse_column(const std::string& name) {
  std::string list;
  for (const auto& c : kColumns) {
    if (name == c.key || lower(name) == lower(c.title)) return c.column;
    list += (list.empty() ? "" : ", ") + std::string(c.key);
  }
  return make_error("unknown column \"" + name + "\" (known: " + list + ")");
}

void sort_rows(std::vector<ClientRow>& rows, Column column, bool descending) {
  auto key = [column](const ClientRow& r) -> double {
    switch (column) {
      case Column::kCostRate:
        return r.cost_per_hour;
      case Column::kTotalCost:
        return r.total_cost;
      case Column::kBytesRate:
        return r.bytes_per_second;
      case Column::kGetsRate:
        return r.gets_per_second;
      case Column::kBytesPerGet:
        return r.bytes_per_get;
      case Column::kAmplification:
        return r.read_amplification;
      case Column::kP99:
        return r.p99_seconds;
      case Column::kTopics:
        return static_cast<double>(r.topics.size());
      case Column::kFlags:
        return static_cast<double>(std::popcount(r.flags));
      default:
        return 0;
    }
  };
  std::stable_sort(rows.begin(), rows.end(), [&](const ClientRow& a, const ClientRow& b) {
    if (column == Column::kClient || column == Column::kGroup || column == Column::kIdentity) {
      auto text = [column](const ClientRow& r) -> const std::string& {
        return column == Column::kClient  ? r.client_id
               : column == Column::kGroup ? r.group_id
                                          : r.identity;
      };
      const auto& x = text(a);
      const auto& y = text(b);
      if (x != y) return descending ? x > y : x < y;
    } else {
      const double x = key(a), y = key(b);
      if (x != y) return descending ? x > y : x < y;
    }
    if (a.total_cost != b.total_cost) return a.total_cost > b.total_cost;
    return a.client_id < b.client_id;
  });
}

std::vector<ClientRow> filter_rows(const std::vector<ClientRow>& rows, const std::string& text) {
  if (text.empty()) return rows;
  const std::string needle = lower(text);
  std::vector<ClientRow> out;
  for (const auto& r : rows) {
    bool match = lower(r.client_id).find(needle) != std::string::npos ||
                 lower(r.group_id).find(needle) != std::string::npos ||
                 lower(flag_names(r.flags, ",")).find(needle) != std::string::npos;
    for (const auto& t : r.topics) match = match || lower(t).find(needle) != std::string::npos;
    if (match) out.push_back(r);
  }
  return out;
}

std::string render_once(const std::vector<ClientRow>& rows, const Snapshot& s, double interval) {
  const Totals t = totals(rows);
  std::string out;
  out += "# fetchcost top --once source=" + no_space(s.source) +
         " currency=" + no_space(s.currency) + " price_table=" + no_space(s.price_table) +
         " interval_s=" + fixed(interval, 1) + " drops=" + std::to_string(s.drops) +
         " probes=" + no_space(s.probe_status) + "\n";
  out += "# totals cost_per_hour=" + fixed(t.cost_per_hour, 6) +
         " total_cost=" + fixed(t.total_cost, 6) + " bytes_per_s=" + fixed(t.bytes_per_second, 0) +
         " gets_per_s=" + fixed(t.gets_per_second, 2) + " bytes=" + std::to_string(t.bytes) +
         " unattributed_share=" + fixed(t.unattributed_share, 4) + "\n";
  std::vector<std::vector<std::string>> table;
  std::vector<std::string> header;
  for (const auto& c : kColumns) header.push_back(c.key);
  table.push_back(header);
  for (const auto& r : rows) {
    std::string topics;
    for (const auto& tp : r.topics) topics += (topics.empty() ? "" : ",") + tp;
    table.push_back({no_space(r.client_id), no_space(r.group_id), fixed(r.cost_per_hour, 6),
                     fixed(r.total_cost, 6), fixed(r.bytes_per_second, 0),
                     fixed(r.gets_per_second, 2), fixed(r.bytes_per_get, 0),
                     fixed(r.read_amplification, 2),
                     r.p99_seconds < 0 ? "-" : fixed(r.p99_seconds, 4), no_space(topics),
                     flag_names(r.flags, ","), r.identity});
  }
  std::vector<std::size_t> width(header.size(), 0);
  for (const auto& line : table)
    for (std::size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  for (const auto& line : table) {
    std::string text;
    for (std::size_t i = 0; i < line.size(); ++i) {
      text += line[i];
      if (i + 1 < line.size()) text += std::string(width[i] - line[i].size() + 2, ' ');
    }
    out += text + "\n";
  }
  return out;
}

std::string human_bytes(double b) {
  const char* units = "BKMGTP";
  int u = 0;
  while (b >= 1024 && u < 5) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof(buf), "%.0f", b);
  else
    std::snprintf(buf, sizeof(buf), b < 10 ? "%.1f%c" : "%.0f%c", b, units[u]);
  return buf;
}

std::string human_money(double v) {
  char buf[32];
  if (v == 0) return "0";
  if (v < 0.01)
    std::snprintf(buf, sizeof(buf), "%.4f", v);
  else if (v < 100)
    std::snprintf(buf, sizeof(buf), "%.2f", v);
  else
    std::snprintf(buf, sizeof(buf), "%.0f", v);
  return buf;
}

std::string human_seconds(double s) {
  if (s < 0) return "-";
  char buf[32];
  if (s < 1)
    std::snprintf(buf, sizeof(buf), "%.0fms", s * 1000);
  else
    std::snprintf(buf, sizeof(buf), "%.1fs", s);
  return buf;
}

}  // namespace fc::cli
