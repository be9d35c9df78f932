// The broker's local tier (tier::LocalTierMap, from its log dirs) as the attribution stage asks
// for it: one adapter for fetchcostd, `fetchcost replay` and the pipeline benchmark.
#pragma once

#include "attribution/attribution.h"
#include "tier/tier.h"

namespace fc::pipeline {

class TierView : public attribution::LocalTier {
 public:
  explicit TierView(const tier::LocalTierMap& map) : map_(map) {}
  std::optional<std::int64_t> local_log_start(std::string_view topic,
                                              std::int32_t partition) const override {
    return map_.local_log_start(topic, partition);
  }
  std::optional<std::string> topic_name(std::string_view topic_id) const override {
    return map_.topic_name(topic_id);
  }

 private:
  const tier::LocalTierMap& map_;
};

}  // namespace fc::pipeline
