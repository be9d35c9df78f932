// cost: what remote reads cost in money. A PriceTable (JSON, units spelled out in the key names)
// prices GET requests and egress bytes; egress may be tiered (tiers apply to the running total of
// the billing period, like the providers' bills). Presets for AWS S3, GCS and Azure Blob are
// embedded; their sources are cited in presets/*.json ("source").
//
// JSON shape (unknown keys are rejected so a typo is never silently priced at zero):
//   {
//     "name": "aws-s3-standard-internet",          (optional)
//     "currency": "USD",                           (optional, default "USD"; 3 letters)
//     "get_usd_per_1000_requests": 0.0004,
//     "egress_usd_per_gb": 0.02                    (flat), or tiers, ascending, last unbounded:
//       [{"up_to_gb": 10240, "usd_per_gb": 0.09}, {"up_to_gb": null, "usd_per_gb": 0.05}],
//     "bytes_per_gb": 1073741824,                  (optional; providers bill GiB as "GB")
//     "source": "...", "notes": "..."              (optional, free text)
//   }
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace fc::cost {

inline constexpr std::string_view kComponentApi = "api";
inline constexpr std::string_view kComponentEgress = "egress";

struct EgressTier {
  // Upper bound of the tier in GB of the period's cumulative egress; infinity = unbounded.
  double up_to_gb = std::numeric_limits<double>::infinity();
  double usd_per_gb = 0;
};

struct PriceTable {
  std::string name;
  std::string currency = "USD";
  double get_usd_per_1000_requests = 0;
  std::vector<EgressTier> egress_tiers;  // ascending; the last one is unbounded
  double bytes_per_gb = 1073741824.0;
  std::string source;
  std::string notes;
};

// Money for one batch of reads, split the way it is exported (component="api|egress").
struct Cost {
  double api = 0;
  double egress = 0;
  double total() const { return api + egress; }
};

// Parses and validates a price table. Errors name the field and what is wrong with it.
Result<PriceTable> parse_price_table(std::string_view json_text);
Result<PriceTable> load_price_table_file(const std::string& path);
std::string to_json(const PriceTable& table);

// Presets: "aws-s3-standard-same-region", "aws-s3-standard-cross-region",
// "aws-s3-standard-internet", "gcs-standard-same-region", "gcs-standard-internet",
// "azure-blob-hot-same-region", "azure-blob-hot-internet".
std::vector<std::string> preset_names();
Result<PriceTable> preset(std::string_view name);
// A preset name or a path to a JSON file.
Result<PriceTable> load_price_table(std::string_view preset_or_path);

double api_cost(const PriceTable& table, std::uint64_t get_requests);
// Cost of `bytes` more egress when `period_bytes_before` were already billed this period.
double egress_cost(const PriceTable& table, std::uint64_t period_bytes_before, std::uint64_t bytes);

// Keeps the period's cumulative egress so each read is priced at the tier it falls in.
// Not thread-safe: one meter per pipeline thread (or guard it).
class CostMeter {
 public:
  explicit CostMeter(PriceTable table) : table_(std::move(table)) {}
  Cost add(std::uint64_t egress_bytes, std::uint64_t get_requests);
  void start_new_period() { period_bytes_ = 0; }
  std::uint64_t period_bytes() const { return period_bytes_; }
  const PriceTable& table() const { return table_; }

 private:
  PriceTable table_;
  std::uint64_t period_bytes_ = 0;
};

}  // namespace fc::cost
