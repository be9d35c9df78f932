// tier: what the broker still has locally. From its log dirs (`<dir>/<topic>-<partition>/`), the
// local log start offset of each partition (the smallest 20-digit base offset of a `*.log`
// segment) and each topic's id (`partition.metadata`, `topic_id: <22 chars base64url>`). A fetch
// below the local log start must be served from remote storage (remote-eligible).
//
// LocalTierMap keeps this current with inotify (segments roll and are deleted, partitions come
// and go) plus a periodic full rescan that repairs anything inotify missed (queue overflow,
// log dirs that appear later). Lookups are thread-safe and cheap (shared lock, no allocation).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace fc::tier {

// "<topic>-<partition>" → (topic, partition); the partition is after the last '-', so topic
// names with '-' work. Kafka's deleted/future/stray dirs ("orders-1.<id>-delete") are rejected.
std::optional<std::pair<std::string, std::int32_t>> parse_partition_dir_name(std::string_view name);
// "<20 digits>.log" → base offset; anything else (".index", ".log.deleted", …) → nullopt.
std::optional<std::int64_t> parse_segment_file_name(std::string_view name);
// The `topic_id:` value of a partition.metadata file, if it is 22 base64url characters.
std::optional<std::string> parse_partition_metadata(std::string_view text);

struct PartitionInfo {
  std::string topic;
  std::int32_t partition = 0;
  std::optional<std::int64_t> local_log_start;  // none while the dir holds no segment
  std::string topic_id;                         // empty when partition.metadata is missing
  std::string log_dir;
  std::size_t segments = 0;
};

enum class Eligibility {
  kRemote,   // fetch offset < local log start: served from remote storage
  kLocal,    // at or above the local log start
  kUnknown,  // partition not (or not yet) on this broker's disks
};

struct Options {
  std::vector<std::string> log_dirs;
  std::chrono::milliseconds rescan_interval{30'000};
  bool use_inotify = true;
};

struct Stats {
  std::uint64_t full_scans = 0;
  // Partition dirs the full scans read, and those they took as the scan before read them (the
  // dir unchanged since: its inode and modification time).
  std::uint64_t dirs_read = 0;
  std::uint64_t dirs_unchanged = 0;
  std::uint64_t partition_scans = 0;
  std::uint64_t inotify_events = 0;
  std::uint64_t inotify_overflows = 0;
  std::size_t partitions = 0;
  std::size_t log_dirs_missing = 0;  // log dirs that did not exist or could not be read
};

class LocalTierMap {
 public:
  explicit LocalTierMap(Options options);
  ~LocalTierMap();  // stops the watcher
  LocalTierMap(const LocalTierMap&) = delete;
  LocalTierMap& operator=(const LocalTierMap&) = delete;

  // Synchronous full scan of every log dir (replaces the whole map).
  void rescan();
  // Scans once, then keeps the map current on a background thread.
  Result<void> start();
  void stop();
  // Watches these log dirs instead (the broker's, found once it runs). Started, it returns at
  // once and the watcher scans the new dirs whole on its thread (a broker's 20,000 partition
  // dirs take seconds): lookups meanwhile see the old map, then the new one; log_dirs() names
  // the new dirs. Not started, it scans them before it returns.
  Result<void> set_log_dirs(std::vector<std::string> log_dirs);
  std::vector<std::string> log_dirs() const;

  std::optional<std::int64_t> local_log_start(std::string_view topic, std::int32_t partition) const;
  std::optional<std::string> topic_id(std::string_view topic) const;
  std::optional<std::string> topic_name(std::string_view topic_id) const;
  Eligibility classify(std::string_view topic, std::int32_t partition,
                       std::int64_t fetch_offset) const;
  std::vector<PartitionInfo> partitions() const;
  Stats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fc::tier
