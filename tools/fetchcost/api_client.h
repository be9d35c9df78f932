// api_client: small blocking HTTP GETs of JSON for the CLI (fetchcostd's API, Prometheus's HTTP
// API). Errors say which URL failed and what to check.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "base/result.h"
#include "top_model.h"

namespace fc::cli {

// GET base_url + path (+ ?query, URL-encoded) and parse the body as JSON.
Result<nlohmann::json> get_json(const std::string& base_url, const std::string& path,
                                const std::map<std::string, std::string>& query = {},
                                double timeout_seconds = 5);

// Where top's samples come from.
class Source {
 public:
  virtual ~Source() = default;
  virtual Result<Snapshot> sample() = 0;
  // The newest attributed object reads of a client (only a daemon has them).
  virtual Result<nlohmann::json> recent(const std::string& client_id, int limit) = 0;
  virtual std::string describe() const = 0;
};

// One fetchcostd: /api/v1/clients + /api/v1/status.
std::unique_ptr<Source> endpoint_source(const std::string& url);
// A Prometheus server scraping every broker's fetchcostd: sums across brokers via PromQL.
std::unique_ptr<Source> prometheus_source(const std::string& url);

// Builds a snapshot from PromQL instant-vector results (exposed for tests). `results` maps a
// query name (bytes, requests, errors, object_bytes, delivered, cost, buckets, groups, budgets)
// to the "result" array of /api/v1/query.
Snapshot snapshot_from_promql(const std::map<std::string, nlohmann::json>& results);

double monotonic_seconds();

}  // namespace fc::cli
