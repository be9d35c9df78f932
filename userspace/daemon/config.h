// fetchcostd's configuration file (JSON). Every key is optional; unknown keys are errors (a typo
// must not silently fall back to a default), and every error names the field.
//
//   {
//     "listen": "127.0.0.1:9464",
//     "targets": {"pids": [], "cmdline_match": "kafka.Kafka", "cgroup": ""},
//     "kafka_ports": [9092],
//     "object_store": {"ports": [443], "cidrs": [], "hosts": [".amazonaws.com"],
//                      "key_layout": "aiven", "virtual_host_suffixes": []},
//     "log_dirs": ["/var/lib/kafka/data"],
//     "log_dirs_inotify": true, "log_dirs_rescan_seconds": 30,
//     "price_table": "aws-s3-standard-same-region",
//     "sensors": {"max_sensors": 10000, "idle_expiry_seconds": 900, "partition_label": false},
//     "state_dir": "/var/lib/fetchcost",
//     "ledger": {"retention_days": 400, "hourly_days": 35},
//     "audit_log": {"path": "", "max_bytes": 104857600, "keep": 5},
//     "capture": {"ring_kib_per_cpu": 1024, "wakeup_kib": 0, "capture_bytes": 4096,
//                 "object_store_head_bytes": 2048,
//                 "tls_libraries": ["openssl", "gnutls"], "drain_nice": 0,
//                 "realtime_reader": true, "pass_interval_ms": 100, "drain_yields": true,
//                 "program_stats": false, "skip_quiet_fetches": true},
//     "attribution_enabled": true,
//     "budgets": {"limits": [{"client_id": "scanner", "per_hour": 0.5},
//                            {"group_id": "analytics", "per_hour": 2}],
//                 "window_seconds": 300, "repeat_seconds": 600,
//                 "command": "", "webhook": ""}
//   }
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "daemon/budget.h"

namespace fc::daemon {

struct Config {
  std::string listen = "127.0.0.1:9464";
  std::vector<int> pids;
  std::string cmdline_match = "kafka.Kafka";
  std::string cgroup;
  std::vector<std::uint16_t> kafka_ports = {9092};
  std::vector<std::uint16_t> object_store_ports = {443};
  std::vector<std::string> object_store_cidrs;  // "10.0.0.0/8", "2600:1f18::/32"
  // TLS server names (SNI) of the object store: exact or ".suffix".
  std::vector<std::string> object_store_hosts = {".amazonaws.com", ".googleapis.com",
                                                 ".blob.core.windows.net"};
  std::string key_layout = "aiven";
  std::vector<std::string> virtual_host_suffixes;
  std::vector<std::string> log_dirs;
  // The log dirs are watched with inotify and rescanned whole every log_dirs_rescan_seconds.
  // Without inotify, the rescans alone keep the local tier current: a watch on a filesystem
  // costs the broker a parent lookup (__fsnotify_parent) on every read and write of a file on
  // it (0.1% of its CPU here, docs/performance.md).
  bool log_dirs_inotify = true;
  double log_dirs_rescan_seconds = 30;
  std::string price_table = "aws-s3-standard-same-region";
  std::size_t max_sensors = 10'000;
  double idle_expiry_seconds = 900;
  bool partition_label = false;
  std::string state_dir = "/var/lib/fetchcost";
  // The chargeback ledger: buckets older than retention_days are dropped, hours of days older
  // than hourly_days become daily buckets (0: never).
  int ledger_retention_days = 400;
  int ledger_hourly_days = 35;
  std::string audit_log_path;  // empty: no audit log
  std::uint64_t audit_log_max_bytes = 100ull << 20;
  int audit_log_keep = 5;
  std::size_t ring_kib_per_cpu = 1024;
  // A ring's unread KiB that wake the reader before its next pass (capture::Options::
  // wakeup_bytes; 0 = half the ring, at most 512 KiB).
  std::size_t wakeup_kib = 0;
  std::uint32_t capture_bytes = 4096;
  // An object-store response's first read, its HTTP header (capture::Policy::head_bytes).
  std::uint32_t object_store_head_bytes = 2048;
  // Nice value of the drain thread, which decodes and attributes the records (0: left as
  // started). The ring reader moves records out of the rings on its own, so when the drain
  // waits for a CPU they wait in memory (docs/performance.md, "Ring reader").
  int drain_nice = 0;
  // The thread that moves records out of the rings runs at real-time priority (capture::Options).
  bool realtime_reader = true;
  // While records flow, the drain gets them at least this often (capture::Options).
  int pass_interval_ms = 100;
  // The drain runs at SCHED_IDLE while it keeps up, so it never delays a broker or client thread
  // (capture::Options::drain_yields).
  bool drain_yields = true;
  // The kernel times every run of the BPF programs while fetchcostd runs, for the
  // fetchcost_bpf_program_* metrics (capture::Options::program_stats).
  bool program_stats = false;
  // Leave out the fetches no GET can belong to (capture::Options::skip_quiet_fetches).
  bool skip_quiet_fetches = true;
  std::vector<std::string> tls_libraries = {"openssl", "gnutls"};
  bool attribution_enabled = true;
  BudgetConfig budgets;
};

Result<Config> parse_config(std::string_view json_text);
Result<Config> load_config(const std::string& path);

}  // namespace fc::daemon
