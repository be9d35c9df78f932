// sensors: bounded per-(client_id, peer_ip, topic[, partition], method) counters of remote reads —
// bytes,
// GET requests, errors, a latency histogram, object bytes read vs bytes delivered (read
// amplification) and cost per component. At most `max_sensors` live sensors: the least recently
// updated one is evicted when a new key arrives, and sensors idle longer than `idle_expiry` are
// expired. Evicted and expired counts are folded into client_id="__other__" (same topic), so sums
// over client_id stay exact and monotonic. Client ids and topics are sanitized (valid UTF-8, no
// control characters) and capped (255 bytes) before they become label values.
//
// Thread-safe (one internal mutex). record() allocates only when it creates a sensor.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fc::sensors {

inline constexpr std::string_view kOtherClient = "__other__";
inline constexpr std::string_view kOtherTopic = "__other__";
inline constexpr std::string_view kUnattributedClient = "__unattributed__";
inline constexpr std::size_t kMaxLabelBytes = 255;
// Finite latency bucket bounds one sensor can hold (plus the +Inf bucket).
inline constexpr std::size_t kMaxLatencyBuckets = 15;
inline constexpr std::int32_t kNoPartition = -1;

enum class Method : std::uint8_t { kExact = 0, kEstimated = 1 };
std::string_view method_name(Method method);  // "exact" | "estimated"

// Makes `raw` a safe label value: invalid UTF-8 bytes become '?', control characters (C0, DEL,
// C1) become '_', and the result is cut to at most `max_bytes` without splitting a character.
std::string sanitize_label(std::string_view raw, std::size_t max_bytes = kMaxLabelBytes);
// The same without allocating when `raw` is already clean (the common case): returns `raw`
// itself, or a view of `scratch` holding the sanitized copy.
std::string_view sanitize_label_into(std::string_view raw, std::string& scratch,
                                     std::size_t max_bytes = kMaxLabelBytes);

struct Config {
  std::size_t max_sensors = 10'000;
  std::chrono::nanoseconds idle_expiry = std::chrono::minutes(15);
  // Off by default: partition multiplies cardinality. When off, partitions are summed.
  bool partition_label = false;
  // Prometheus-style upper bounds in seconds (ascending, at most kMaxLatencyBuckets); remote
  // GETs take milliseconds to seconds.
  std::vector<double> latency_buckets_seconds = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                 0.5,   1.0,  2.5,   5.0,  10.0};
  // "__other__" sensors are kept per topic up to this many topics; beyond, topic="__other__".
  std::size_t max_other_topics = 1'000;
  std::size_t max_groups = 10'000;
};

// One attributed remote read (or a batch of them) to add to a sensor.
struct Observation {
  std::string_view client_id;
  // The client connection's peer address: the identity when the client-id cannot be read
  // ("peer:<ip>"), a label on every series so that pod metadata can be joined (kube_pod_info).
  std::string_view peer_ip;
  std::string_view topic;
  std::int32_t partition = kNoPartition;
  Method method = Method::kExact;
  std::uint64_t remote_bytes = 0;       // object body bytes of 2xx GETs attributed here
  std::uint64_t requests = 0;           // GETs (failed ones included)
  std::uint64_t errors = 0;             // failed GETs (4xx/5xx, resets): never add bytes
  std::uint64_t object_bytes_read = 0;  // bytes read from the object store for this read
  std::uint64_t bytes_delivered = 0;    // bytes of that data delivered to the client
  double latency_seconds = -1;          // < 0: no latency sample
  double cost_api = 0;
  double cost_egress = 0;
  std::uint64_t now_ns = 0;  // monotonic time of the observation (drives LRU and idle expiry)
};

struct Counters {
  std::uint64_t remote_bytes = 0;
  std::uint64_t requests = 0;
  std::uint64_t errors = 0;
  std::uint64_t object_bytes_read = 0;
  std::uint64_t bytes_delivered = 0;
  std::uint64_t latency_count = 0;
  double latency_sum_seconds = 0;
  // Per-bucket (not cumulative) counts; index i counts latencies <= bound i and > bound i-1; the
  // entry after the last configured bound is +Inf.
  std::array<std::uint64_t, kMaxLatencyBuckets + 1> latency_buckets{};
  double cost_api = 0;
  double cost_egress = 0;

  void add(const Counters& other);
  // object bytes read ÷ bytes delivered; 0 when nothing was delivered.
  double read_amplification() const;
};

struct SensorView {
  std::string_view client_id;
  std::string_view peer_ip;  // empty when unknown (and for "__other__")
  std::string_view topic;
  std::int32_t partition;  // kNoPartition when the partition label is off
  Method method;
  const Counters& counters;
  std::uint64_t last_update_ns;
  bool folded;  // a "__other__" sensor holding evicted/expired/overflow counts
};

struct Stats {
  std::size_t live_sensors = 0;
  std::size_t other_sensors = 0;
  std::uint64_t sensors_created = 0;
  std::uint64_t evictions = 0;    // LRU evictions because max_sensors was reached
  std::uint64_t expirations = 0;  // idle expiries
  std::uint64_t sanitized_labels = 0;
  std::size_t groups = 0;
  std::size_t approx_memory_bytes = 0;
};

// A copy of every sensor (live ones most recently updated first, then the "__other__" folds)
// and of the consumer groups, taken in one short pass under the table's lock so /metrics and the
// JSON API render without holding the lock the capture drain needs. Labels are packed into one
// string: taking a snapshot allocates nothing per sensor (and nothing once its buffers have grown
// when a snapshot is reused).
struct Snapshot {
  struct Row {
    std::size_t labels_at = 0;  // client_id, peer_ip, topic, one after the other in `labels`
    std::uint16_t client_length = 0;
    std::uint16_t peer_length = 0;
    std::uint16_t topic_length = 0;
    std::int32_t partition = kNoPartition;
    Method method = Method::kExact;
    bool folded = false;
    std::uint64_t last_update_ns = 0;
    Counters counters;
  };
  struct Group {
    std::size_t labels_at = 0;  // client_id, group_id in `labels`
    std::uint16_t client_length = 0;
    std::uint16_t group_length = 0;
  };
  std::string labels;
  std::vector<Row> rows;
  std::vector<Group> groups;
  Stats stats;
  std::vector<double> latency_buckets_seconds;

  // Views into this snapshot: valid while it lives and is not refilled.
  SensorView view(const Row& row) const;
  std::string_view group_client(const Group& g) const {
    return std::string_view(labels).substr(g.labels_at, g.client_length);
  }
  std::string_view group_id(const Group& g) const {
    return std::string_view(labels).substr(g.labels_at + g.client_length, g.group_length);
  }
};

class SensorTable {
 public:
  explicit SensorTable(Config config = {});
  ~SensorTable();
  SensorTable(const SensorTable&) = delete;
  SensorTable& operator=(const SensorTable&) = delete;

  void record(const Observation& observation);
  // Consumer group learned from JoinGroup/SyncGroup/OffsetCommit… of that client id.
  void set_group(std::string_view client_id, std::string_view group_id);
  // Folds sensors not updated since now_ns - idle_expiry into "__other__"; returns how many.
  std::size_t expire_idle(std::uint64_t now_ns);

  // Visits every live and "__other__" sensor under the lock (keep the callback short).
  void for_each(const std::function<void(const SensorView&)>& visit) const;
  void for_each_group(const std::function<void(std::string_view client_id,
                                               std::string_view group_id)>& visit) const;
  // Refills `into` (keeping its capacity) with a copy of every sensor and group.
  void snapshot(Snapshot& into) const;
  // Sum over every sensor, live and folded: what the object store saw.
  Counters totals() const;
  Stats stats() const;
  const Config& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fc::sensors
