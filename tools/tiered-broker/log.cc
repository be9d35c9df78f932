#include "log.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "records.h"

namespace tb {
namespace fs = std::filesystem;

constexpr int16_t kKafkaStorageError = 56;

std::string segment_file_name(int64_t base_offset) {
  char name[40];
  std::snprintf(name, sizeof name, "%020lld.log", static_cast<long long>(base_offset));
  return name;
}

namespace {

// Topic ids are derived from the name so that reruns and tests see stable ids.
Uuid topic_id_for(const std::string& name) {
  Uuid id{};
  uint64_t h1 = 1469598103934665603ull, h2 = 0x9e3779b97f4a7c15ull;
  for (unsigned char c : name) {
    h1 = (h1 ^ c) * 1099511628211ull;
    h2 = (h2 ^ c) * 0xff51afd7ed558ccdull + 0x2545F4914F6CDD1Dull;
  }
  for (int i = 0; i < 8; ++i) {
    id[i] = uint8_t(h1 >> (56 - 8 * i));
    id[8 + i] = uint8_t(h2 >> (56 - 8 * i));
  }
  id[6] = uint8_t((id[6] & 0x0f) | 0x40);  // shaped like a v4 UUID
  id[8] = uint8_t((id[8] & 0x3f) | 0x80);
  return id;
}

Uuid random_uuid() {
  static std::mutex mu;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard lock(mu);
  Uuid id{};
  uint64_t a = rng(), b = rng();
  for (int i = 0; i < 8; ++i) {
    id[i] = uint8_t(a >> (8 * i));
    id[8 + i] = uint8_t(b >> (8 * i));
  }
  return id;
}

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The `indexes` object: one 8-byte entry per batch (relative offset INT32, position INT32), like
// Kafka's offset index with an entry for every batch.
std::string encode_index(const Segment& s) {
  Writer w;
  for (const auto& b : s.batches) {
    w.i32(int32_t(b.base_offset - s.base_offset));
    w.i32(int32_t(b.position));
  }
  return std::move(w.buf());
}

}  // namespace

// The ForkJoinPool stand-in: GETs run here and the calling remote-log-reader waits for them.
class GetPool {
 public:
  explicit GetPool(int threads) {
    for (int i = 0; i < threads; ++i)
      threads_.emplace_back([this, i] {
        std::string name = "ForkJoinPool-1-worker-" + std::to_string(i + 1);
        prctl(PR_SET_NAME, name.c_str(), 0, 0, 0);
        while (true) {
          std::function<void()> task;
          {
            std::unique_lock lock(mu_);
            cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
            if (tasks_.empty()) return;
            task = std::move(tasks_.front());
            tasks_.pop_front();
          }
          task();
        }
      });
  }
  ~GetPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  template <typename F>
  auto run(F fn) {
    std::packaged_task<decltype(fn())()> task(std::move(fn));
    auto result = task.get_future();
    {
      std::lock_guard lock(mu_);
      tasks_.emplace_back([&task] { task(); });
    }
    cv_.notify_one();
    return result.get();  // `task` outlives the call: we wait here
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

LogStore::LogStore(LogConfig config, S3Client* s3) : config_(std::move(config)), s3_(s3) {
  if (config_.get_pool_threads > 0) get_pool_ = std::make_unique<GetPool>(config_.get_pool_threads);
}

LogStore::~LogStore() = default;

S3Response LogStore::s3_get(const std::string& key,
                            std::optional<std::pair<uint64_t, uint64_t>> range) {
  if (!get_pool_) return s3_->get(key, range);
  return get_pool_->run([&] { return s3_->get(key, range); });
}

Topic* LogStore::topic(const std::string& name) {
  for (auto& t : topics_)
    if (t->name == name) return t.get();
  return nullptr;
}

Topic* LogStore::topic(const Uuid& id) {
  for (auto& t : topics_)
    if (t->id == id) return t.get();
  return nullptr;
}

std::string LogStore::write_segment(Topic&, Partition& p, Segment& s, const std::string& data) {
  std::string path = p.dir + "/" + segment_file_name(s.base_offset);
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return "cannot create " + path + ": " + strerror(errno);
  if (write(fd, data.data(), data.size()) != ssize_t(data.size())) {
    close(fd);
    return "cannot write " + path + ": " + strerror(errno);
  }
  s.fd = fd;
  // Kafka's companions of a segment, so the directory looks like a broker's: an offset index
  // (one entry per batch here) and an empty time index.
  std::string stem = path.substr(0, path.size() - 4);
  std::ofstream(stem + ".index", std::ios::binary) << encode_index(s);
  std::ofstream(stem + ".timeindex", std::ios::binary);
  return "";
}

std::string LogStore::upload(Topic& t, Partition& p, Segment& s, const std::string& data) {
  Uuid segment_id = random_uuid();
  char base[24];
  std::snprintf(base, sizeof base, "%020lld", static_cast<long long>(s.base_offset));
  s.object_base = s3_->config().prefix + t.name + "-" + t.id_b64 + "/" + std::to_string(p.index) +
                  "/" + base + "-" + base64url(segment_id);
  std::string index = encode_index(s);
  uint64_t chunk = config_.chunk_size;
  uint64_t last_chunk = s.size % chunk ? s.size % chunk : chunk;
  nlohmann::json manifest = {
      {"version", "1"},
      {"chunkIndex",
       {{"type", "fixed"},
        {"originalChunkSize", chunk},
        {"originalFileSize", s.size},
        {"transformedChunkSize", chunk},
        {"finalTransformedChunkSize", last_chunk}}},
      {"segmentIndexes", {{"offset", {{"position", 0}, {"size", index.size()}}}}},
      {"compression", false},
      {"encryption", nullptr},
      {"remoteLogSegmentMetadata",
       {{"startOffset", s.base_offset}, {"endOffset", s.end_offset - 1}}}};
  for (auto& [suffix, body] : std::vector<std::pair<std::string, std::string>>{
           {".log", data}, {".indexes", index}, {".rsm-manifest", manifest.dump()}}) {
    S3Response r = s3_->put(s.object_base + suffix, body);
    if (!r.ok()) return "upload of " + s.object_base + suffix + " failed: " + r.error;
  }
  return "";
}

std::string LogStore::seed() {
  std::error_code ec;
  fs::create_directories(config_.log_dir, ec);
  if (ec) return "cannot create log dir " + config_.log_dir + ": " + ec.message();
  std::ofstream(config_.log_dir + "/meta.properties")
      << "version=1\ncluster.id=tiered-broker-sim\nnode.id=1\n";
  int64_t t0 = now_ms() - 3600 * 1000;
  for (const auto& spec : config_.topics) {
    auto t = std::make_unique<Topic>();
    t->name = spec.name;
    t->id = topic_id_for(spec.name);
    t->id_b64 = base64url(t->id);
    t->value_size = spec.value_size;
    for (int pi = 0; pi < spec.partitions; ++pi) {
      auto p = std::make_unique<Partition>();
      p->index = pi;
      p->topic = spec.name;
      p->dir = config_.log_dir + "/" + spec.name + "-" + std::to_string(pi);
      fs::remove_all(p->dir, ec);
      fs::create_directories(p->dir, ec);
      if (ec) return "cannot create " + p->dir + ": " + ec.message();
      std::ofstream(p->dir + "/partition.metadata")
          << "version: 0\ntopic_id: " << t->id_b64 << "\n";
      // Build every segment in memory, then decide which ones are tiered.
      std::vector<std::string> contents;
      int64_t offset = 0;
      while (offset < spec.messages || p->segments.empty()) {
        auto s = std::make_unique<Segment>();
        s->base_offset = offset;
        std::string data;
        while (offset < spec.messages && data.size() < config_.segment_bytes) {
          int count = int(std::min<int64_t>(config_.batch_records, spec.messages - offset));
          std::string batch =
              encode_batch(spec.name, pi, offset, count, spec.value_size, t0 + offset);
          s->batches.push_back(Batch{offset, count, data.size(), uint32_t(batch.size())});
          data += batch;
          offset += count;
        }
        s->end_offset = offset;
        s->size = data.size();
        contents.push_back(std::move(data));
        p->segments.push_back(std::move(s));
        if (spec.messages == 0) break;
      }
      size_t n = p->segments.size();
      size_t first_local = n > size_t(config_.local_segments) ? n - config_.local_segments : 0;
      for (size_t i = 0; i < n; ++i) {
        Segment& s = *p->segments[i];
        std::string err = write_segment(*t, *p, s, contents[i]);
        if (!err.empty()) return err;
        if (i < first_local) {
          // Tiered: upload, then local retention deletes it (the broker must go remote for it).
          err = upload(*t, *p, s, contents[i]);
          if (!err.empty()) return err;
          close(s.fd);
          s.fd = -1;
          std::string stem = p->dir + "/" + segment_file_name(s.base_offset);
          stem.resize(stem.size() - 4);
          for (const char* ext : {".log", ".index", ".timeindex"}) unlink((stem + ext).c_str());
          s.remote = true;
          s.batches.clear();  // known again only after reading the remote index
        }
      }
      p->log_start_offset = 0;
      p->local_log_start_offset = p->segments[first_local]->base_offset;
      p->high_watermark.store(offset);
      t->partitions.push_back(std::move(p));
    }
    topics_.push_back(std::move(t));
  }
  return "";
}

Segment* LogStore::find_segment(Partition& p, int64_t offset) {
  auto it = std::upper_bound(
      p.segments.begin(), p.segments.end(), offset,
      [](int64_t o, const std::unique_ptr<Segment>& s) { return o < s->base_offset; });
  if (it == p.segments.begin()) return nullptr;
  return (it - 1)->get();
}

// Picks whole batches from `batches` starting with the one holding `offset`.
// Batches starting at or beyond `end_offset` (the high watermark the response reports) are left
// out, so a response never carries records above its own high watermark.
static bool pick_batches(const std::vector<Batch>& batches, int64_t offset, uint64_t max_bytes,
                         uint64_t* first, uint64_t* length, int64_t end_offset = INT64_MAX) {
  auto it = std::upper_bound(batches.begin(), batches.end(), offset,
                             [](int64_t o, const Batch& b) { return o < b.base_offset + b.count; });
  if (it == batches.end() || it->base_offset >= end_offset) return false;
  *first = it->position;
  uint64_t end = it->position + it->size;
  for (++it; it != batches.end() && it->base_offset < end_offset &&
             it->position + it->size - *first <= max_bytes;
       ++it)
    end = it->position + it->size;
  *length = end - *first;
  return true;
}

ReadResult LogStore::read_local(Partition& p, int64_t offset, uint64_t max_bytes,
                                int64_t high_watermark) {
  ReadResult r;
  Segment* s = find_segment(p, offset);
  if (!s || s->remote) return r;
  bool active = s == p.segments.back().get();
  std::unique_lock<std::mutex> lock(p.append_mu, std::defer_lock);
  if (active) lock.lock();
  if (pick_batches(s->batches, offset, max_bytes, &r.file_offset, &r.length, high_watermark))
    r.fd = s->fd;
  return r;
}

ReadResult LogStore::read_remote(Topic&, Partition& p, int64_t offset, uint64_t max_bytes) {
  ReadResult r;
  Segment* s = find_segment(p, offset);
  if (!s || !s->remote) return r;
  auto fail = [&](RemoteGet g, const std::string& msg) {
    r.gets.push_back(std::move(g));
    r.error = kKafkaStorageError;
    r.error_message = msg;
    return r;
  };
  {
    std::lock_guard lock(s->index_mu);
    if (!s->index_loaded) {
      std::string key = s->object_base + ".rsm-manifest";
      S3Response m = s3_get(key, std::nullopt);
      RemoteGet g{"manifest", key, m.status, m.ok() ? m.body.size() : 0, m.seconds};
      if (!m.ok()) return fail(g, m.error);
      r.gets.push_back(g);
      uint64_t size = 0;
      int64_t end_offset = 0;
      try {
        auto j = nlohmann::json::parse(m.body);
        size = j["chunkIndex"]["originalFileSize"].get<uint64_t>();
        end_offset = j["remoteLogSegmentMetadata"]["endOffset"].get<int64_t>() + 1;
      } catch (const std::exception& e) {
        r.error = kKafkaStorageError;
        r.error_message = "bad manifest " + key + ": " + e.what();
        return r;
      }
      key = s->object_base + ".indexes";
      S3Response ix = s3_get(key, std::nullopt);
      g = RemoteGet{"indexes", key, ix.status, ix.ok() ? ix.body.size() : 0, ix.seconds};
      if (!ix.ok()) return fail(g, ix.error);
      r.gets.push_back(g);
      Reader rd(reinterpret_cast<const uint8_t*>(ix.body.data()), ix.body.size());
      std::vector<std::pair<int64_t, uint64_t>> entries;
      while (rd.remaining() >= 8) {
        int64_t rel = rd.i32();
        uint64_t pos = uint32_t(rd.i32());
        entries.emplace_back(s->base_offset + rel, pos);
      }
      s->batches.clear();
      for (size_t i = 0; i < entries.size(); ++i) {
        int64_t next_off = i + 1 < entries.size() ? entries[i + 1].first : end_offset;
        uint64_t next_pos = i + 1 < entries.size() ? entries[i + 1].second : size;
        s->batches.push_back(Batch{entries[i].first, int32_t(next_off - entries[i].first),
                                   entries[i].second, uint32_t(next_pos - entries[i].second)});
      }
      s->index_loaded = true;
    }
  }
  uint64_t first, length;
  if (!pick_batches(s->batches, offset, max_bytes, &first, &length)) return r;
  // Aiven's RSM reads whole chunks: bytes [first, first+length) cost every chunk they touch.
  uint64_t chunk = config_.chunk_size;
  uint64_t c0 = first / chunk, c1 = (first + length - 1) / chunk;
  std::string assembled;
  for (uint64_t c = c0; c <= c1; ++c) {
    uint64_t a = c * chunk, b = std::min(s->size, (c + 1) * chunk) - 1;
    std::string key = s->object_base + ".log";
    S3Response g = s3_get(key, std::make_pair(a, b));
    RemoteGet rg{"chunk", key, g.status, g.ok() ? g.body.size() : 0, g.seconds};
    if (!g.ok()) return fail(rg, g.error);
    r.gets.push_back(rg);
    if (g.body.size() != b - a + 1) {
      r.error = kKafkaStorageError;
      r.error_message = "short chunk from " + key;
      return r;
    }
    uint64_t from = std::max(first, a), to = std::min(first + length, b + 1);
    assembled.append(g.body, from - a, to - from);
  }
  r.data = std::move(assembled);
  r.length = r.data.size();
  return r;
}

void LogStore::append_round() {
  int64_t ts = now_ms();
  for (auto& t : topics_) {
    for (auto& p : t->partitions) {
      std::lock_guard lock(p->append_mu);
      Segment& s = *p->segments.back();
      int64_t offset = p->high_watermark.load();
      std::string batch =
          encode_batch(t->name, p->index, offset, config_.batch_records, t->value_size, ts);
      if (pwrite(s.fd, batch.data(), batch.size(), off_t(s.size)) != ssize_t(batch.size()))
        continue;
      s.batches.push_back(Batch{offset, config_.batch_records, s.size, uint32_t(batch.size())});
      s.size += batch.size();
      s.end_offset = offset + config_.batch_records;
      p->high_watermark.store(s.end_offset);
    }
  }
}

}  // namespace tb
