// drain_priority: when the thread that drains the ring buffers should run at a higher priority.
// On a host whose CPUs the broker, its clients and the object store keep busy, the drain gets a
// fair share of a CPU, which can be less than the records need: it waits on the run queue while
// the rings fill, and records are lost (measured: 9,000-23,000 per 10 s at 35,000 fetches/s plus
// the object store at its limit, 2 vCPUs). A thread that always runs first costs the broker
// preemptions when there is no need. So the drain takes the boost only while the rings hold a
// backlog when it gets to them, and gives it back once they have been nearly empty for a while.
// Pure (no clock, no syscalls): main.cpp applies what it returns with setpriority().
#pragma once

#include <cstddef>
#include <cstdint>

namespace fc::daemon {

class DrainPriority {
 public:
  // `base_nice`: the drain's nice value (capture.drain_nice); `boost_nice`: its nice value while
  // boosted (capture.drain_boost_nice; not below base_nice: never boosted). `ring_bytes`: all
  // rings' capacity together.
  DrainPriority(int base_nice, int boost_nice, std::size_t ring_bytes);

  // One drain pass: the bytes it read from the rings and whether the pipeline is still behind.
  // Returns the nice value the drain should have now.
  int observe(std::uint64_t now_ns, std::size_t bytes_read, bool behind);

  int nice() const { return boosted_ ? boost_nice_ : base_nice_; }
  bool boosted() const { return boosted_; }
  std::uint64_t boosts() const { return boosts_; }
  // Time spent boosted, up to the last observe().
  std::uint64_t boosted_ns() const { return boosted_ns_; }
  // setpriority() refused the boost (no CAP_SYS_NICE, RLIMIT_NICE too low): stop asking.
  void disable() { enabled_ = false, boosted_ = false; }

  // A pass that found this share of the rings' capacity waiting boosts the drain...
  static constexpr std::size_t kBoostShare = 4;  // 1/4
  // ...and the boost ends after kCalmNs of passes that found less than 1/kCalmShare.
  static constexpr std::size_t kCalmShare = 16;
  static constexpr std::uint64_t kCalmNs = 2'000'000'000;

 private:
  int base_nice_;
  int boost_nice_;
  std::size_t ring_bytes_;
  bool enabled_;
  bool boosted_ = false;
  std::uint64_t boosts_ = 0;
  std::uint64_t boosted_ns_ = 0;
  std::uint64_t last_ns_ = 0;
  std::uint64_t calm_since_ns_ = 0;  // 0: the last pass was not calm
};

}  // namespace fc::daemon
