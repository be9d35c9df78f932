#include "daemon/drain_priority.h"

namespace fc::daemon {

DrainPriority::DrainPriority(int base_nice, int boost_nice, std::size_t ring_bytes)
    : base_nice_(base_nice),
      boost_nice_(boost_nice),
      ring_bytes_(ring_bytes),
      enabled_(boost_nice < base_nice && ring_bytes > 0) {}

int DrainPriority::observe(std::uint64_t now_ns, std::size_t bytes_read, bool behind) {
  if (boosted_ && now_ns > last_ns_) boosted_ns_ += now_ns - last_ns_;
  last_ns_ = now_ns;
  if (!enabled_) return nice();
  if (bytes_read >= ring_bytes_ / kBoostShare) {
    if (!boosted_) ++boosts_;
    boosted_ = true;
    calm_since_ns_ = 0;
  } else if (boosted_) {
    if (behind || bytes_read >= ring_bytes_ / kCalmShare) {
      calm_since_ns_ = 0;
    } else if (calm_since_ns_ == 0) {
      calm_since_ns_ = now_ns;
    } else if (now_ns - calm_since_ns_ >= kCalmNs) {
      boosted_ = false;
      calm_since_ns_ = 0;
    }
  }
  return nice();
}

}  // namespace fc::daemon
