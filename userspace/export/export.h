// export: everything fetchcostd shows the outside world.
//  - render_prometheus(): the Prometheus text format of the sensors and self-metrics
//    (KIP-compatible kafka_server_remote_fetch_* names, fetchcost_* for the rest);
//  - Ledger: hourly chargeback buckets per (client, group, topic, method), persisted atomically
//    in the state dir so a restart loses nothing that was counted; old hours are folded into
//    days and the oldest days dropped (LedgerRetention);
//  - AuditLog: one JSON line per attributed object read, size-rotated;
//  - HttpServer: one listen address for /metrics, /api/v1/..., /healthz, /readyz.
// None of these ever sees payload bytes: only parsed names, numbers and object keys.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "base/result.h"
#include "sensors/sensors.h"

namespace fc::exporter {

// What fetchcostd knows about itself, rendered as fetchcost_* metrics.
struct SelfMetrics {
  std::vector<std::uint64_t> ring_drops_per_cpu;
  std::uint64_t events = 0;
  // Fetches the capture left out whole (capture::Options::skip_quiet_fetches).
  std::uint64_t quiet_fetches = 0;
  // Connections that stopped being held for a while (capture::Counters::hold_pauses).
  std::uint64_t quiet_fetch_pauses = 0;
  std::map<std::string, std::uint64_t> parse_errors;  // by decoder ("kafka", "http")
  // Kafka requests decoded with part of their body not captured (kafka::Counters).
  std::uint64_t kafka_requests_truncated = 0;
  std::uint64_t reads_exact = 0;
  std::uint64_t reads_estimated = 0;
  std::uint64_t reads_unattributed = 0;
  std::uint64_t probes_attached = 0;
  std::uint64_t targets = 0;
  std::uint64_t config_errors = 0;
  // Partitions whose local log start offset is known (the broker's log dirs): 0 with a broker
  // watched means attribution runs without a tier.
  std::uint64_t local_tier_partitions = 0;
  std::uint64_t broker_settings_unread = 0;
  double drain_wait_seconds = 0;  // the capture drain waiting for the service lock, in total
  // The drain's backlog: records out of the rings, not decoded yet (capture::Status).
  std::uint64_t spool_bytes = 0, spool_peak_bytes = 0, spool_limit_bytes = 0;
  bool attribution_enabled = true;
  // Capture events were lost (ring buffer drops), so some reads may be missing from the figures.
  bool attribution_incomplete = false;
  std::string version;
  // The BPF programs' runs as the kernel times them (capture::ProgramStatus), listed only while
  // it does (programs_timed: capture.program_stats, or kernel.bpf_stats_enabled set by hand).
  bool programs_timed = false;
  struct ProgramRuns {
    std::string program;
    std::uint64_t runs = 0;
    double run_seconds = 0;
  };
  std::vector<ProgramRuns> programs;
};

struct MetricsOptions {
  std::string currency = "USD";
};

// Where rendered text goes, piece by piece; returns false to stop (the client went away).
using TextSink = std::function<bool(std::string_view piece)>;

// Buffers text and hands it to a sink in pieces of about `piece` bytes, so a page of any size
// needs only one piece of memory. After the sink refused a piece, the rest is dropped (ok()).
class ChunkWriter {
 public:
  explicit ChunkWriter(const TextSink& sink, std::size_t piece = 64 * 1024);
  ChunkWriter& text(std::string_view s);
  ChunkWriter& number(std::uint64_t v);
  ChunkWriter& number(std::int64_t v);
  ChunkWriter& number(double v);  // shortest exact form; NaN, +Inf, -Inf as Prometheus spells them
  ChunkWriter& label_value(std::string_view v);  // escaped for the Prometheus text format
  void maybe_flush();                            // hands the buffer over when a piece is full
  void flush();
  bool ok() const { return ok_; }

 private:
  const TextSink& sink_;
  std::size_t piece_;
  std::string buffer_;
  bool ok_ = true;
};

// The page from a snapshot (take it under whatever lock guards the sensors, render without it).
void render_prometheus(const sensors::Snapshot& snapshot, const SelfMetrics& self,
                       const MetricsOptions& options, const TextSink& sink);
// The same as one string (tests, small tables).
std::string render_prometheus(const sensors::SensorTable& sensors, const SelfMetrics& self,
                              const MetricsOptions& options);

// ---- chargeback ledger ----
struct LedgerKey {
  std::int64_t hour = 0;  // unix time / 3600: where the bucket starts
  std::string client_id;
  std::string group_id;
  std::string topic;
  std::string method;
  std::int32_t hours = 1;  // 1, or 24 for a UTC day folded from its hours (starts at midnight)
  auto operator<=>(const LedgerKey&) const = default;
};
struct LedgerValue {
  std::uint64_t bytes = 0;
  std::uint64_t requests = 0;
  std::uint64_t errors = 0;
  double cost_api = 0;
  double cost_egress = 0;
};

// How long the ledger keeps what it counted. 0 turns a step off.
struct LedgerRetention {
  // Buckets that ended longer ago than this are dropped (keeps the file bounded in time).
  int retention_days = 0;
  // Hourly buckets of UTC days that ended longer ago than this are added up into one daily
  // bucket per (day, client, group, topic, method): a day of a steady client then takes one row
  // instead of 24. Totals over whole days stay exact.
  int hourly_days = 0;
};

class Ledger {
 public:
  // Loads `<state_dir>/ledger.json` when it exists. An unreadable ledger is an error (the user
  // must decide: fetchcostd never overwrites counted money silently). Files without daily
  // buckets (written before retention existed) load as they are. Without a retention nothing
  // is ever folded or dropped (fetchcost replay's ledgers).
  static Result<std::unique_ptr<Ledger>> open(const std::string& state_dir,
                                              LedgerRetention retention = {});
  void add(std::int64_t unix_seconds, const LedgerKey& key_without_hour, const LedgerValue& value);
  // Writes ledger.json.tmp, fsyncs, renames over ledger.json. Holds the buckets' lock (which
  // add() needs) only while the text is built; the write and fsync happen without it.
  Result<void> save() const;
  // Buckets overlapping [from_unix, to_unix), in key order.
  std::vector<std::pair<LedgerKey, LedgerValue>> query(std::int64_t from_unix,
                                                       std::int64_t to_unix) const;
  std::string path() const;

  struct Compaction {
    std::size_t folded = 0;   // hourly buckets added into daily ones
    std::size_t dropped = 0;  // buckets older than the retention
  };
  // Applies the retention as of now_unix (fetchcostd: at start and then hourly, before a save).
  // Visits only buckets old enough to change.
  Compaction compact(std::int64_t now_unix);
  std::size_t size() const;  // buckets held

 private:
  Ledger(std::string dir, LedgerRetention retention)
      : dir_(std::move(dir)), retention_(retention) {}
  std::string dir_;
  LedgerRetention retention_;
  mutable std::mutex save_mutex_;  // one save at a time
  mutable std::mutex mutex_;       // the buckets
  std::map<LedgerKey, LedgerValue> buckets_;
};

// ---- audit log ----
struct AuditRecord {
  std::int64_t unix_ms = 0;
  std::string_view client_id;
  std::string_view group_id;
  std::string_view topic;
  std::int32_t partition = -1;
  std::int64_t fetch_offset = -1;
  std::int32_t max_bytes = -1;
  std::string_view object_key;
  std::uint64_t bytes = 0;
  int status = 0;
  std::string_view method;
};

// One attributed object read as `fetchcost top` shows it in a client's drill-down (owned copy;
// metadata only, never payload bytes).
struct RecentRead {
  std::int64_t unix_ms = 0;
  std::string client_id;
  std::string group_id;
  std::string topic;
  std::int32_t partition = -1;
  std::string object_key;
  std::uint64_t bytes = 0;
  int status = 0;
  std::string method;
};

class AuditLog {
 public:
  // The newest reads kept in memory for /api/v1/recent: a small fixed bound, so a busy broker
  // costs at most this many records of memory.
  static constexpr std::size_t kRecentCapacity = 512;

  // Appends to `path`; when it grows past max_bytes it becomes path.1 (path.1 → path.2 …,
  // keeping `keep` old files). An empty path keeps only the in-memory ring of recent reads.
  static Result<std::unique_ptr<AuditLog>> open(const std::string& path, std::uint64_t max_bytes,
                                                int keep);
  ~AuditLog();
  void write(const AuditRecord& record);
  std::uint64_t records_written() const { return written_; }
  // Newest first; `client_id` empty means every client; at most `limit` records.
  std::vector<RecentRead> recent(std::string_view client_id, std::size_t limit) const;

 private:
  AuditLog() = default;
  void rotate();
  std::string path_;
  std::uint64_t max_bytes_ = 0;
  int keep_ = 0;
  std::FILE* file_ = nullptr;
  std::uint64_t size_ = 0;
  std::uint64_t written_ = 0;
  mutable std::mutex recent_mutex_;
  std::vector<RecentRead> recent_;  // ring of kRecentCapacity, next slot at recent_next_
  std::size_t recent_next_ = 0;
};

// ---- HTTP ----
struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // When set, the body is produced by this instead (chunked transfer encoding), on the server's
  // thread after the handler returned — outside any lock the handler took.
  std::function<void(const TextSink& sink)> stream;
};
using HttpHandler = std::function<HttpResponse(const std::string& body)>;
// A GET handler that reads the query string (?client=x&limit=10), already URL-decoded.
using HttpQueryHandler =
    std::function<HttpResponse(const std::map<std::string, std::string>& query)>;

class HttpServer {
 public:
  HttpServer();
  ~HttpServer();
  void get(const std::string& path, HttpHandler handler);
  void post(const std::string& path, HttpHandler handler);
  void get_with_query(const std::string& path, HttpQueryHandler handler);
  // Binds "host:port" and serves on a background thread. Port 0 picks a free port.
  Result<int> start(const std::string& address);
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fc::exporter
