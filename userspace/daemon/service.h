// service: fetchcostd's attribution service — owns the sensors, ledger, audit log, local-tier
// map and pipeline built from the config, orders capture records by time, and serves
// /metrics, /api/v1/..., /healthz and /readyz.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

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
  // `handed_through_ns`: every record stamped before it has reached on_event (the capture's
  // Capture::handed_through_ns); only records older than that, by the reorder window, are
  // released. Returns true when it stopped with records still due (poll the rings without
  // waiting, then tick again).
  bool tick(std::uint64_t monotonic_now_ns, std::uint64_t handed_through_ns);
  // Capture status for /api/v1/status and the self-metrics.
  void set_capture_status(const capture::Status& status);
  bool attribution_enabled() const;
  // Applies a reloaded config: attribution on/off and the price table take effect now; the
  // rest (listen, sensors, log dirs, capture sizes) needs a restart and is reported as such.
  // A refused config is counted (fetchcost_config_errors_total) and the running one kept.
  Result<void> reload(const Config& config);
  void count_config_error();
  // The broker's own log dirs (daemon/broker_config.h), used when the config names none; `origin`
  // says where they were read, for /api/v1/status. True when the local tier now watches other
  // dirs than before (false: the config's are used, or the dirs are the same, named anew by a
  // restarted broker). Capture thread (the tier map's lookups run there).
  Result<bool> use_broker_log_dirs(std::vector<std::string> dirs, std::string origin);
  // How many watched brokers' settings could not be read (fetchcostd retries them), and the last
  // reason (empty when none): /api/v1/status, fetchcost_broker_settings_unread, and
  // local_tier.error while the config names no log dirs.
  void set_broker_settings_unread(std::size_t brokers, std::string error);
  // The search for brokers so far (daemon/targets.h, ProcessFinder): its sweeps of every
  // process and the processes it read in all, for /api/v1/status (target_search).
  void set_target_search(std::uint64_t sweeps, std::uint64_t processes_read);
  // A broker's client listener ports: those not among kafka_ports yet join them (the pipeline's
  // and the status's config) and are returned. Capture thread.
  std::vector<std::uint16_t> add_kafka_ports(const std::vector<std::uint16_t>& ports);
  std::vector<std::uint16_t> kafka_ports() const;
  // Flushes everything and saves the ledger.
  void shutdown();
  int port() const;

 private:
  struct Impl;
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fc::daemon
