// drain_steering: the drain thread's scheduling class, steered from the ring reader
// (capture::Options::drain_yields). The drain decodes at SCHED_IDLE while it keeps up, so it
// never takes a CPU the broker wants; a saturated host starves a SCHED_IDLE thread for seconds,
// so the reader makes it a normal thread while its backlog is at the mark or it has been away
// from its wait for records too long, and lets it yield again once it waits with an eighth of
// the mark or less. The bench (bench_spool_stall) steers its drain with the same class.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "capture/capture.h"

namespace fc::capture {

class DrainSteering {
 public:
  // Its marks: options.drain_yield_backlog_bytes and options.drain_yield_away_ms.
  explicit DrainSteering(const Options& options)
      : backlog_mark_bytes_(options.drain_yield_backlog_bytes),
        away_limit_ns_(std::uint64_t(options.drain_yield_away_ms) * 1'000'000) {}
  ~DrainSteering();  // a drain still at SCHED_IDLE leaves as it came: a normal thread
  DrainSteering(const DrainSteering&) = delete;
  DrainSteering& operator=(const DrainSteering&) = delete;

  // Drain thread, once: moves it to SCHED_IDLE if it can come back (leaving SCHED_IDLE needs
  // CAP_SYS_NICE or RLIMIT_NICE, so a throwaway thread tries the round trip first: the drain is
  // never stranded). Returns the errno that kept it at its priority, 0 when it yields.
  int yield_from_here(std::uint64_t now_ns);
  // Drain thread: it waits for records now (0), or stopped waiting at now_ns (decoding).
  void set_away_since(std::uint64_t now_ns) {
    away_since_ns_.store(now_ns, std::memory_order_relaxed);
  }
  // Reader thread, after each pass: `held_bytes` is the drain's backlog.
  void steer(std::size_t held_bytes, std::uint64_t now_ns);

  bool yielding() const { return tid_.load() != 0; }
  bool idle() const { return yielding() && idle_.load(); }
  std::uint64_t promotions() const { return promotions_.load(std::memory_order_relaxed); }

 private:
  const std::size_t backlog_mark_bytes_;
  const std::uint64_t away_limit_ns_;
  std::atomic<pid_t> tid_{0};      // the drain's thread, once it yields
  std::atomic<bool> idle_{false};  // at SCHED_IDLE now (the reader's to change after that)
  std::atomic<std::uint64_t> promotions_{0};
  std::atomic<std::uint64_t> away_since_ns_{0};  // when it last stopped waiting, 0 while it waits
};

}  // namespace fc::capture
