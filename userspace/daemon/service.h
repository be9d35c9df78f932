// service: fetchcostd's attribution service — owns the sensors, ledger, audit log, local-tier
// map and pipeline built from the config, orders capture records by time, and serves
// /metrics, /api/v1/..., /healthz and /readyz.
#pragma once

#include <cstdint>
#include <memory>

#include "base/result.h"
#include "capture/capture.h"
#include "daemon/config.h"

namespace fc::daemon {

class Service {
 public:
  static Result<std::unique_ptr<Service>> create(const Config& config);
  ~Service();

  // Called from the capture drain, on the thread that calls tick() (no lock per event).
  // Records are held briefly and handed to the pipeline in timestamp order: the per-CPU ring
  // buffers are drained one after the other, so a later record on one CPU can be read before
  // an earlier one on another.
  void on_event(const capture::EventView& event);
  // Periodic (every poll): releases ordered records, expires state, saves the ledger now and then.
  // Returns true when it stopped with records still due (poll the rings without waiting, then
  // tick again).
  bool tick(std::uint64_t monotonic_now_ns);
  // Capture status for /api/v1/status and the self-metrics.
  void set_capture_status(const capture::Status& status);
  bool attribution_enabled() const;
  // Applies a reloaded config: attribution on/off and the price table take effect now; the
  // rest (listen, sensors, log dirs, capture sizes) needs a restart and is reported as such.
  // A refused config is counted (fetchcost_config_errors_total) and the running one kept.
  Result<void> reload(const Config& config);
  void count_config_error();
  // Flushes everything and saves the ledger.
  void shutdown();
  int port() const;

 private:
  struct Impl;
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fc::daemon
