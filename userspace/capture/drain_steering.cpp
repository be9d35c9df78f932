#include "capture/drain_steering.h"

#include <sched.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace fc::capture {

DrainSteering::~DrainSteering() {
  if (const pid_t tid = tid_.load(); tid != 0 && idle_.load()) {
    sched_param normal{};
    sched_setscheduler(tid, SCHED_OTHER, &normal);
  }
}

int DrainSteering::yield_from_here(std::uint64_t now_ns) {
  int err = 0;
  std::thread trial([&err] {
    sched_param p{};
    if (sched_setscheduler(0, SCHED_IDLE, &p) != 0 || sched_setscheduler(0, SCHED_OTHER, &p) != 0)
      err = errno;
  });
  trial.join();
  sched_param idle{};
  if (err == 0 && sched_setscheduler(0, SCHED_IDLE, &idle) != 0) err = errno;
  if (err != 0) return err;
  away_since_ns_ = now_ns;
  idle_ = true;
  tid_ = static_cast<pid_t>(gettid());
  return 0;
}

void DrainSteering::steer(std::size_t held_bytes, std::uint64_t now_ns) {
  const pid_t tid = tid_.load(std::memory_order_relaxed);
  if (tid == 0) return;
  const std::uint64_t away_since = away_since_ns_.load(std::memory_order_relaxed);
  const bool away_long = away_since != 0 && now_ns - away_since >= away_limit_ns_;
  sched_param p{};
  if (idle_ && (held_bytes >= backlog_mark_bytes_ || away_long)) {
    if (sched_setscheduler(tid, SCHED_OTHER, &p) == 0) {
      idle_ = false;
      promotions_.fetch_add(1, std::memory_order_relaxed);
    }
  } else if (!idle_ && away_since == 0 && held_bytes <= backlog_mark_bytes_ / 8) {
    if (sched_setscheduler(tid, SCHED_IDLE, &p) == 0) idle_ = true;
  }
}

}  // namespace fc::capture
