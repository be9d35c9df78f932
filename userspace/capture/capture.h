// capture: loads fetchcost's BPF programs into the kernel, tells them which processes to watch,
// and drains the per-CPU ring buffers into a callback, one fc_event (+ payload prefix) at a time.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "fetchcost_abi.h"

namespace fc::capture {

// Checks the things fetchcostd needs from the machine before it touches BPF, in the order a user
// would fix them: privileges, BTF, tracefs (mounted here when it can be), memlock.
Result<void> check_environment();

struct Options {
  std::size_t ring_bytes_per_cpu = 4u << 20;  // rounded up to a power of two, >= page size
  std::uint32_t default_capture_bytes = 4096;  // bytes copied from each socket call
};

struct Counters {
  std::uint64_t events = 0;
  std::uint64_t drops = 0;
  std::uint64_t copy_faults = 0;
};

// One event as the BPF side wrote it; `payload` is the captured prefix (header.captured bytes).
struct EventView {
  const fc_event& header;
  std::span<const std::uint8_t> payload;
};
using EventHandler = std::function<void(const EventView&)>;

class Capture {
 public:
  // Opens, configures, loads and attaches the programs. The handler is called from poll().
  static Result<std::unique_ptr<Capture>> open(const Options& options, EventHandler handler);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  Result<void> add_target(pid_t tgid, std::uint32_t capture_bytes);
  void remove_target(pid_t tgid);

  // Waits up to timeout_ms for events, then drains every CPU's ring buffer.
  // Returns the number of events handled, or an error.
  Result<int> poll(int timeout_ms);

  Counters totals() const;
  std::vector<Counters> per_cpu() const;
  int cpu_count() const;

 private:
  struct Impl;
  explicit Capture(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fc::capture
