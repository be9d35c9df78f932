// The simulator's logs: Kafka's on-disk layout in the log dirs, a remote tier on S3 in Aiven's
// object layout, deterministic seeding and an optional steady appender for tailing consumers.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "s3.h"
#include "wire.h"

namespace tb {

struct TopicSpec {
  std::string name;
  int partitions = 3;
  int64_t messages = 2000;  // per partition
  size_t value_size = 1000;
};

struct LogConfig {
  std::string log_dir;
  std::vector<TopicSpec> topics;
  int batch_records = 10;
  uint64_t segment_bytes = 256 * 1024;
  int local_segments = 2;         // local retention: segments kept on disk (incl. the active one)
  uint64_t chunk_size = 4 << 20;  // Aiven chunk size: one ranged GET per chunk
  // Aiven's chunk cache runs the GETs on a ForkJoinPool while the remote-log-reader waits:
  // > 0 moves every GET to a pool of that many "ForkJoinPool-1-worker-N" threads.
  int get_pool_threads = 0;
};

struct Batch {
  int64_t base_offset;
  int32_t count;
  uint64_t position;  // byte position in the segment
  uint32_t size;
};

struct Segment {
  int64_t base_offset = 0;
  int64_t end_offset = 0;  // exclusive
  uint64_t size = 0;
  std::vector<Batch> batches;  // local segments: always known; remote: filled from `indexes`
  int fd = -1;                 // local segments only
  bool remote = false;
  std::string object_base;  // "<prefix><topic>-<id>/<p>/<base>-<segid>" for remote segments
  // Remote: the manifest and indexes are read once (Kafka's remote-log-index-cache); chunks are
  // read on every fetch (remote records are never cached by the broker).
  std::mutex index_mu;
  bool index_loaded = false;
};

struct Partition {
  int index = 0;
  std::string topic;
  std::vector<std::unique_ptr<Segment>> segments;  // remote ones first, sorted by base offset
  int64_t log_start_offset = 0;
  int64_t local_log_start_offset = 0;
  std::atomic<int64_t> high_watermark{0};
  std::mutex append_mu;  // guards the active segment's batch list against the appender
  std::string dir;
};

struct Topic {
  std::string name;
  Uuid id{};
  std::string id_b64;
  size_t value_size = 0;
  std::vector<std::unique_ptr<Partition>> partitions;
};

// One remote GET done on behalf of a fetch.
struct RemoteGet {
  std::string kind;  // "chunk", "indexes", "manifest"
  std::string key;
  int status = 0;
  uint64_t bytes = 0;  // body bytes of a 2xx response
  double seconds = 0;
};

struct ReadResult {
  int16_t error = 0;
  std::string error_message;
  // Local: a file region (sendfile). Remote: bytes already in memory.
  int fd = -1;
  uint64_t file_offset = 0;
  uint64_t length = 0;
  std::string data;
  std::vector<RemoteGet> gets;
};

class LogStore {
 public:
  LogStore(LogConfig config, S3Client* s3);
  ~LogStore();
  // Writes every segment, uploads the closed ones and deletes uploaded segments beyond local
  // retention. Returns an error message, empty on success.
  std::string seed();
  const std::vector<std::unique_ptr<Topic>>& topics() const { return topics_; }
  Topic* topic(const std::string& name);
  Topic* topic(const Uuid& id);
  const LogConfig& config() const { return config_; }

  // Local read: whole batches from the segment holding `offset`, at most max_bytes unless the
  // first batch alone is larger, and only batches below `high_watermark` (read by the caller).
  ReadResult read_local(Partition& p, int64_t offset, uint64_t max_bytes, int64_t high_watermark);
  // Remote read (blocking, S3 I/O): manifest/index if not cached, then whole chunks.
  ReadResult read_remote(Topic& t, Partition& p, int64_t offset, uint64_t max_bytes);
  // Appends one deterministic batch to each partition of each topic (the steady producer).
  void append_round();

 private:
  std::string write_segment(Topic& t, Partition& p, Segment& s, const std::string& data);
  std::string upload(Topic& t, Partition& p, Segment& s, const std::string& data);
  Segment* find_segment(Partition& p, int64_t offset);

  LogConfig config_;
  S3Response s3_get(const std::string& key, std::optional<std::pair<uint64_t, uint64_t>> range);

  S3Client* s3_;
  std::unique_ptr<class GetPool> get_pool_;
  std::vector<std::unique_ptr<Topic>> topics_;
};

std::string segment_file_name(int64_t base_offset);  // 20 digits + ".log"

}  // namespace tb
