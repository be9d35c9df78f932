#include "daemon/budget.h"

namespace fc::daemon {

std::vector<BudgetState> BudgetTracker::update(double now,
                                               const std::map<std::string, double>& by_client,
                                               const std::map<std::string, double>& by_group) {
  const std::size_t n = config_.limits.size();
  if (states_.size() != n) {
    states_.clear();
    for (const auto& l : config_.limits) states_.push_back({l, 0, false});
    history_.assign(n, {});
    last_action_.assign(n, -1);
  }
  std::vector<BudgetState> fire;
  for (std::size_t i = 0; i < n; ++i) {
    const BudgetLimit& limit = config_.limits[i];
    const auto& source = limit.client_id.empty() ? by_group : by_client;
    const auto it = source.find(limit.client_id.empty() ? limit.group_id : limit.client_id);
    const double cost = it == source.end() ? 0 : it->second;
    auto& history = history_[i];
    history.push_back({now, cost});
    // Keep one sample at or before the window start, so the rate always spans the whole window
    // once enough history exists.
    while (history.size() > 2 && history[1].time <= now - config_.window_seconds)
      history.pop_front();
    const Sample& oldest = history.front();
    const double span = now - oldest.time;
    BudgetState& state = states_[i];
    // A counter that went down (sensor expiry, restart) restarts the window instead of
    // producing a negative rate.
    if (cost < oldest.cost) {
      history.assign(1, {now, cost});
      state.cost_per_hour = 0;
    } else {
      state.cost_per_hour = span > 0 ? (cost - oldest.cost) / span * 3600.0 : 0;
    }
    state.exceeded = state.cost_per_hour > limit.per_hour;
    if (state.exceeded &&
        (last_action_[i] < 0 || now - last_action_[i] >= config_.repeat_seconds)) {
      last_action_[i] = now;
      fire.push_back(state);
    }
  }
  return fire;
}

}  // namespace fc::daemon
