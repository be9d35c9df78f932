// libFuzzer: bytes → fetchcostd's config (daemon/config.h) and a price table (cost/cost.h), the
// two files an operator writes by hand. Must not crash, hang or hit undefined behaviour (a
// count read from 1e300 was a float-to-int overflow), and what they return must hold:
//   config: accepted values lie in the ranges docs/configuration.md gives; a refusal names a
//           config field or says the text is not JSON;
//   price table: rates finite and >= 0, tiers ascending with the last unbounded, the table
//           written back (to_json) reads as the same table, and what it prices is never
//           negative or NaN.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cost/cost.h"
#include "daemon/config.h"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

void check_config(std::string_view text) {
  const auto c = fc::daemon::parse_config(text);
  if (!c) {
    const std::string& m = c.error().message;
    require(m.rfind("config field \"", 0) == 0 || m.rfind("config is not valid JSON", 0) == 0);
    return;
  }
  require(c->capture_bytes <= 16384 && c->object_store_head_bytes <= 16384);
  require(c->ring_kib_per_cpu >= 4 && c->ring_kib_per_cpu <= (1u << 20));
  require(c->wakeup_kib < c->ring_kib_per_cpu);
  require(c->pass_interval_ms >= 1 && c->pass_interval_ms <= 100);
  require(c->drain_nice >= -20 && c->drain_nice <= 19);
  require(c->max_sensors >= 1 && c->max_sensors <= 10'000'000);
  require(c->idle_expiry_seconds > 0);
  require(c->log_dirs_rescan_seconds >= 1 && c->log_dirs_rescan_seconds <= 3600);
  require(c->ledger_retention_days >= 0 && c->ledger_hourly_days >= 0);
  require(c->audit_log_keep >= 0 && c->audit_log_max_bytes >= 4096);
  for (const int pid : c->pids) require(pid >= 1);
  for (const auto port : c->kafka_ports) require(port != 0);
  for (const auto port : c->object_store_ports) require(port != 0);
  require(c->budgets.window_seconds >= 1 && c->budgets.window_seconds <= 86400);
  for (const auto& limit : c->budgets.limits)
    require(limit.per_hour > 0 && limit.client_id.empty() != limit.group_id.empty());
}

bool same(const fc::cost::PriceTable& a, const fc::cost::PriceTable& b) {
  if (a.name != b.name || a.currency != b.currency || a.source != b.source || a.notes != b.notes ||
      a.get_usd_per_1000_requests != b.get_usd_per_1000_requests ||
      a.bytes_per_gb != b.bytes_per_gb || a.egress_tiers.size() != b.egress_tiers.size())
    return false;
  for (std::size_t i = 0; i < a.egress_tiers.size(); ++i)
    if (a.egress_tiers[i].up_to_gb != b.egress_tiers[i].up_to_gb ||
        a.egress_tiers[i].usd_per_gb != b.egress_tiers[i].usd_per_gb)
      return false;
  return true;
}

void check_price_table(std::string_view text) {
  const auto t = fc::cost::parse_price_table(text);
  if (!t) return;
  const fc::cost::PriceTable& table = t.value();
  require(std::isfinite(table.get_usd_per_1000_requests) && table.get_usd_per_1000_requests >= 0);
  require(std::isfinite(table.bytes_per_gb) && table.bytes_per_gb >= 1);
  require(!table.egress_tiers.empty() && std::isinf(table.egress_tiers.back().up_to_gb));
  double bound = 0;
  for (const auto& tier : table.egress_tiers) {
    require(std::isfinite(tier.usd_per_gb) && tier.usd_per_gb >= 0);
    require(tier.up_to_gb > bound);
    bound = tier.up_to_gb;
  }
  const auto again = fc::cost::parse_price_table(fc::cost::to_json(table));
  require(again && same(table, again.value()));
  for (const std::uint64_t before : {std::uint64_t{0}, std::uint64_t{1} << 40, ~std::uint64_t{0}}) {
    const double egress = fc::cost::egress_cost(table, before, std::uint64_t{1} << 30);
    require(!std::isnan(egress) && egress >= 0);
  }
  const double api = fc::cost::api_cost(table, 1000);
  require(!std::isnan(api) && api >= 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_config(text);
  check_price_table(text);
  return 0;
}
