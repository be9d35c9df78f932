// top_model: what `fetchcost top` computes from two samples of the daemon's API (or of
// Prometheus): per-client rates, p99 latency from histogram buckets, flags, sorting, filtering
// and the --once table. No I/O and no terminal here, so all of it is unit-tested.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "base/result.h"
#include "identity.h"

namespace fc::cli {

// One sensor (client, topic[, partition], method) as /api/v1/clients serves it. Counters are
// cumulative since the daemon started.
struct SensorRow {
  std::string client_id;
  std::string group_id;
  std::string topic;
  std::int32_t partition = -1;
  std::string method;  // "exact" | "estimated"
  std::uint64_t bytes = 0;
  std::uint64_t requests = 0;
  std::uint64_t errors = 0;
  std::uint64_t object_bytes = 0;
  std::uint64_t delivered_bytes = 0;
  std::uint64_t latency_count = 0;
  std::vector<std::uint64_t> latency_buckets;  // per bucket (not cumulative), last is +Inf
  double cost = 0;                             // api + egress
};

struct BudgetRow {
  std::string client_id;
  std::string group_id;
  double per_hour = 0;
  double cost_per_hour = 0;
  bool exceeded = false;
};

// Everything one refresh knows.
struct Snapshot {
  double time_seconds = 0;  // the CLI's monotonic clock when the sample was taken
  std::string source;       // "endpoint http://…" or "prometheus http://…"
  std::string currency = "USD";
  std::string price_table = "?";
  std::string probe_status = "?";
  std::uint64_t drops = 0;
  std::vector<double> latency_bounds;  // upper bounds in seconds, +Inf implied
  std::vector<SensorRow> sensors;
  std::vector<BudgetRow> budgets;
};

// Parses GET /api/v1/clients (errors name what is missing).
Result<Snapshot> parse_clients(const nlohmann::json& doc);
// Adds drops, probe status and price table from GET /api/v1/status.
void apply_status(const nlohmann::json& status, Snapshot& snapshot);

// Prometheus-style quantile from per-bucket counts (last bucket +Inf): linear inside the bucket,
// the last finite bound when it falls in +Inf. Returns a negative value when there is no sample.
double histogram_quantile(double q, const std::vector<double>& bounds,
                          const std::vector<std::uint64_t>& counts);

enum Flag : unsigned {
  kFlagScan = 1u << 0,    // remote reads in >= scan_streak consecutive refreshes
  kFlagSmall = 1u << 1,   // read amplification >= small_amplification
  kFlagErr = 1u << 2,     // failed remote GETs in the interval
  kFlagEst = 1u << 3,     // some of its reads attributed by estimation (method=estimated)
  kFlagBudget = 1u << 4,  // the daemon reports its client or group budget exceeded
};
std::string flag_names(unsigned flags, const char* separator);  // "SCAN,ERR" or "-"
// One letter per flag at a fixed position ("S.E..") for narrow terminals.
std::string flag_letters(unsigned flags);

struct FlagRules {
  int scan_streak = 3;
  double small_amplification = 2.0;
};

struct ClientRow {
  std::string client_id;
  std::string identity;  // identity_kind(client_id): "client-id", "peer" or "-"
  std::string group_id;
  double cost_per_hour = 0;
  double total_cost = 0;
  double bytes_per_second = 0;
  double gets_per_second = 0;
  double bytes_per_get = 0;       // over the interval, else cumulative
  double read_amplification = 0;  // object bytes / delivered bytes; 0 when unknown
  double p99_seconds = -1;        // negative: no latency sample
  std::vector<std::string> topics;
  unsigned flags = 0;
  std::uint64_t bytes = 0;  // cumulative
  std::uint64_t requests = 0;
  std::uint64_t errors = 0;
};

struct Totals {
  double cost_per_hour = 0;
  double total_cost = 0;
  double bytes_per_second = 0;
  double gets_per_second = 0;
  std::uint64_t bytes = 0;
  double unattributed_share = 0;  // of all remote bytes, cumulative
};

inline constexpr const char* kUnattributed = "__unattributed__";

// Keeps what must survive between refreshes (the SCAN streaks).
class TopModel {
 public:
  explicit TopModel(FlagRules rules = {}) : rules_(rules) {}
  // `previous` may be null (first sample: rates are 0, amplification and p99 cumulative).
  std::vector<ClientRow> update(const Snapshot* previous, const Snapshot& current);
  const FlagRules& rules() const { return rules_; }

 private:
  FlagRules rules_;
  std::map<std::string, int> remote_streak_;
};

Totals totals(const std::vector<ClientRow>& rows);

enum class Column {
  kClient,
  kGroup,
  kCostRate,
  kTotalCost,
  kBytesRate,
  kGetsRate,
  kBytesPerGet,
  kAmplification,
  kP99,
  kTopics,
  kFlags,
  kIdentity,  // what CLIENT is: a client-id, or a peer address (opaque TLS connections)
};
inline constexpr int kColumnCount = 12;
const char* column_title(Column c);  // short title for the TUI
const char* column_key(Column c);    // the --once / --sort name
Result<Column> parse_column(const std::string& name);

// Stable: ties fall back to total cost (descending) then client id, so the order never flickers.
void sort_rows(std::vector<ClientRow>& rows, Column column, bool descending);
// Case-insensitive substring of the client id, group, a topic or a flag name; empty keeps all.
std::vector<ClientRow> filter_rows(const std::vector<ClientRow>& rows, const std::string& text);

// The --once table: '#' comment lines (source, totals), one header line, one line per client;
// whitespace-separated fields that never contain whitespace; "-" for empty; fixed decimals.
std::string render_once(const std::vector<ClientRow>& rows, const Snapshot& snapshot,
                        double interval_seconds);

// Human formats for the TUI.
std::string human_bytes(double bytes);  // "1.5M"
std::string human_money(double amount);
std::string human_seconds(double seconds);  // "12ms", "-" when negative

}  // namespace fc::cli
