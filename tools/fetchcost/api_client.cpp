#include "api_client.h"

#include <httplib.h>

#include <chrono>
#include <cmath>
#include <set>

namespace fc::cli {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Result<nlohmann::json> get_json(const std::string& base_url, const std::string& path,
                                const std::map<std::string, std::string>& query,
                                double timeout_seconds) {
  // base_url: http://host:port[/prefix]
  const auto scheme_end = base_url.find("://");
  if (scheme_end == std::string::npos || base_url.substr(0, scheme_end) != "http")
    return make_error("\"" + base_url + "\" is not an http://host:port URL");
  const auto slash = base_url.find('/', scheme_end + 3);
  const std::string origin = base_url.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : base_url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  httplib::Client client(origin);
  const auto whole = std::chrono::duration<double>(timeout_seconds);
  client.set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(whole));
  client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(whole));
  httplib::Params params(query.begin(), query.end());
  auto res = client.Get(prefix + path, params, httplib::Headers{});
  const std::string url = origin + prefix + path;
  if (!res)
    return make_error(
        "cannot reach " + url + " (" + httplib::to_string(res.error()) +
        "); is fetchcostd (or Prometheus) running there? set --endpoint/--prometheus");
  if (res->status != 200)
    return make_error(url + " answered HTTP " + std::to_string(res->status) + ": " +
                      res->body.substr(0, 200));
  try {
    return nlohmann::json::parse(res->body);
  } catch (const std::exception& e) {
    return make_error(url + " did not answer JSON (" + e.what() + ")");
  }
}

namespace {

class EndpointSource : public Source {
 public:
  explicit EndpointSource(std::string url) : url_(std::move(url)) {}
  Result<Snapshot> sample() override {
    const double t = monotonic_seconds();
    auto clients = get_json(url_, "/api/v1/clients");
    if (!clients) return clients.error();
    auto snap = parse_clients(*clients);
    if (!snap) return snap.error();
    snap->time_seconds = t;
    snap->source = describe();
    if (auto status = get_json(url_, "/api/v1/status")) apply_status(*status, *snap);
    return snap;
  }
  Result<nlohmann::json> recent(const std::string& client_id, int limit) override {
    return get_json(url_, "/api/v1/recent",
                    {{"client", client_id}, {"limit", std::to_string(limit)}});
  }
  std::string describe() const override { return "endpoint " + url_; }

 private:
  std::string url_;
};

// PromQL over every fetchcostd Prometheus scrapes (the sums run across brokers).
const std::map<std::string, std::string>& promql_queries() {
  static const std::map<std::string, std::string> q = {
      {"bytes", "sum by (client_id,topic,method) (kafka_server_remote_fetch_bytes_total)"},
      {"requests", "sum by (client_id,topic,method) (kafka_server_remote_fetch_requests_total)"},
      {"errors", "sum by (client_id,topic,method) (fetchcost_remote_fetch_errors_total)"},
      {"object_bytes",
       "sum by (client_id,topic,method) (fetchcost_remote_fetch_object_bytes_total)"},
      {"delivered",
       "sum by (client_id,topic,method) (fetchcost_remote_fetch_delivered_bytes_total)"},
      {"cost", "sum by (client_id,topic,method,currency) (fetchcost_remote_fetch_cost_total)"},
      {"buckets",
       "sum by (client_id,topic,method,le) (kafka_server_remote_fetch_latency_seconds_bucket)"},
      {"groups", "max by (client_id,group_id) (fetchcost_client_group_info)"},
      {"budgets", "max by (client_id,group_id) (fetchcost_budget_exceeded)"},
      {"drops", "sum(fetchcost_ring_drops_total)"},
      {"probes", "sum(fetchcost_probes_attached)"},
      {"targets", "sum(fetchcost_targets)"},
      {"daemons", "count(fetchcost_build_info)"},
  };
  return q;
}

double sample_value(const nlohmann::json& r) {
  try {
    return std::stod(r.at("value").at(1).get<std::string>());
  } catch (const std::exception&) {
    return 0;
  }
}
std::string label(const nlohmann::json& r, const char* name) {
  const auto& m = r.at("metric");
  return m.contains(name) ? m.at(name).get<std::string>() : std::string();
}

class PrometheusSource : public Source {
 public:
  explicit PrometheusSource(std::string url) : url_(std::move(url)) {}
  Result<Snapshot> sample() override {
    const double t = monotonic_seconds();
    std::map<std::string, nlohmann::json> results;
    for (const auto& [name, query] : promql_queries()) {
      auto doc = get_json(url_, "/api/v1/query", {{"query", query}});
      if (!doc) return doc.error();
      if (doc->value("status", "") != "success")
        return make_error("Prometheus refused \"" + query + "\": " + doc->dump().substr(0, 200));
      results[name] = (*doc)["data"]["result"];
    }
    Snapshot s = snapshot_from_promql(results);
    s.time_seconds = t;
    s.source = describe();
    return s;
  }
  Result<nlohmann::json> recent(const std::string&, int) override {
    return make_error("recent objects come from one fetchcostd: use --endpoint for them");
  }
  std::string describe() const override { return "prometheus " + url_; }

 private:
  std::string url_;
};

}  // namespace

Snapshot snapshot_from_promql(const std::map<std::string, nlohmann::json>& results) {
  Snapshot s;
  s.price_table = "per-daemon";
  using Key = std::tuple<std::string, std::string, std::string>;
  std::map<Key, SensorRow> rows;
  auto row_of = [&](const nlohmann::json& r) -> SensorRow& {
    Key k{label(r, "client_id"), label(r, "topic"), label(r, "method")};
    SensorRow& row = rows[k];
    row.client_id = std::get<0>(k);
    row.topic = std::get<1>(k);
    row.method = std::get<2>(k).empty() ? "exact" : std::get<2>(k);
    return row;
  };
  auto each = [&](const char* name, auto&& fn) {
    if (auto it = results.find(name); it != results.end() && it->second.is_array())
      for (const auto& r : it->second) fn(r);
  };
  auto u64 = [](double v) { return v > 0 ? static_cast<std::uint64_t>(std::llround(v)) : 0ull; };
  each("bytes", [&](const auto& r) { row_of(r).bytes = u64(sample_value(r)); });
  each("requests", [&](const auto& r) { row_of(r).requests = u64(sample_value(r)); });
  each("errors", [&](const auto& r) { row_of(r).errors = u64(sample_value(r)); });
  each("object_bytes", [&](const auto& r) { row_of(r).object_bytes = u64(sample_value(r)); });
  each("delivered", [&](const auto& r) { row_of(r).delivered_bytes = u64(sample_value(r)); });
  each("cost", [&](const auto& r) {
    row_of(r).cost += sample_value(r);
    if (!label(r, "currency").empty()) s.currency = label(r, "currency");
  });
  // Cumulative buckets by le → bounds and per-bucket counts.
  std::map<Key, std::map<double, double>> cumulative;
  std::set<double> bounds;
  each("buckets", [&](const auto& r) {
    const std::string le = label(r, "le");
    const double bound = le == "+Inf" ? INFINITY : std::stod(le);
    if (!std::isinf(bound)) bounds.insert(bound);
    row_of(r);
    cumulative[{label(r, "client_id"), label(r, "topic"), label(r, "method")}][bound] =
        sample_value(r);
  });
  s.latency_bounds.assign(bounds.begin(), bounds.end());
  for (auto& [k, by_le] : cumulative) {
    SensorRow& row = rows[k];
    double previous = 0;
    for (double b : s.latency_bounds) {
      const double c = by_le.count(b) ? by_le[b] : previous;
      row.latency_buckets.push_back(u64(c - previous));
      previous = c;
    }
    const double inf = by_le.count(INFINITY) ? by_le[INFINITY] : previous;
    row.latency_buckets.push_back(u64(inf - previous));
    row.latency_count = u64(inf);
  }
  std::map<std::string, std::string> groups;
  each("groups", [&](const auto& r) { groups[label(r, "client_id")] = label(r, "group_id"); });
  for (auto& [k, row] : rows) {
    if (auto g = groups.find(row.client_id); g != groups.end()) row.group_id = g->second;
    s.sensors.push_back(row);
  }
  each("budgets", [&](const auto& r) {
    s.budgets.push_back({label(r, "client_id"), label(r, "group_id"), 0, 0, sample_value(r) > 0});
  });
  double drops = 0, probes = 0, targets = 0, daemons = 0;
  each("drops", [&](const auto& r) { drops += sample_value(r); });
  each("probes", [&](const auto& r) { probes += sample_value(r); });
  each("targets", [&](const auto& r) { targets += sample_value(r); });
  each("daemons", [&](const auto& r) { daemons += sample_value(r); });
  s.drops = u64(drops);
  s.probe_status = std::to_string(u64(daemons)) + " daemons " + std::to_string(u64(targets)) +
                   " targets " + std::to_string(u64(probes)) + " probes";
  return s;
}

std::unique_ptr<Source> endpoint_source(const std::string& url) {
  return std::make_unique<EndpointSource>(url);
}
std::unique_ptr<Source> prometheus_source(const std::string& url) {
  return std::make_unique<PrometheusSource>(url);
}

}  // namespace fc::cli
