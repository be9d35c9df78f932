// budget: money-per-hour limits per client id or consumer group, evaluated on fetchcostd's own
// cost counters. The tracker is pure (no clock, no I/O) so it can be tested; the service feeds
// it cumulative costs every second and runs the configured actions it returns, off the pipeline.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace fc::daemon {

struct BudgetLimit {
  std::string client_id;  // exactly one of client_id / group_id is set
  std::string group_id;
  double per_hour = 0;  // money (the price table's currency) per hour
};

struct BudgetConfig {
  std::vector<BudgetLimit> limits;
  // The cost rate is the cost added over this trailing window, scaled to an hour.
  double window_seconds = 300;
  // An exceeded budget re-runs its action at most once per this many seconds.
  double repeat_seconds = 600;
  std::string command;  // run with /bin/sh -c; FETCHCOST_* variables describe the budget
  std::string webhook;  // http://host:port/path: POSTed a JSON document
};

struct BudgetState {
  BudgetLimit limit;
  double cost_per_hour = 0;  // over the trailing window (0 until two samples exist)
  bool exceeded = false;
};

class BudgetTracker {
 public:
  explicit BudgetTracker(BudgetConfig config) : config_(std::move(config)) {}

  // Cumulative cost per client id and per group at `now_seconds` (any monotonic clock).
  // Returns the budgets that should run their action now: newly exceeded, or still exceeded
  // and not acted on for repeat_seconds.
  std::vector<BudgetState> update(double now_seconds,
                                  const std::map<std::string, double>& cost_by_client,
                                  const std::map<std::string, double>& cost_by_group);
  const std::vector<BudgetState>& states() const { return states_; }
  const BudgetConfig& config() const { return config_; }

 private:
  struct Sample {
    double time;
    double cost;
  };
  BudgetConfig config_;
  std::vector<BudgetState> states_;
  std::vector<std::deque<Sample>> history_;  // per limit
  std::vector<double> last_action_;          // per limit; negative: never
};

}  // namespace fc::daemon
