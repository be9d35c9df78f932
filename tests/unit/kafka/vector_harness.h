// Test harness: loads conversations encoded by client libraries (tests/vectors/*.json), feeds
// them to a kafka::Decoder in pieces cut by a policy, and compares the exchanges with what the
// encoders were given.
#pragma once

#include <doctest/doctest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "kafka/kafka.h"

namespace fc::test {

using nlohmann::json;

inline std::vector<std::uint8_t> from_hex(const std::string& hex) {
  std::vector<std::uint8_t> out(hex.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<std::uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  }
  return out;
}

inline json load_vectors(const std::string& file) {
  std::ifstream in(std::string(FC_VECTORS_DIR) + "/" + file);
  REQUIRE_MESSAGE(in.good(), "missing vector file " << file);
  return json::parse(in);
}

struct Frame {
  kafka::Direction direction;
  std::vector<std::uint8_t> bytes;
};

inline std::vector<Frame> frames_of(const json& conversation) {
  std::vector<Frame> frames;
  for (const auto& f : conversation["frames"]) {
    frames.push_back(
        {f["direction"] == "request" ? kafka::Direction::kRequest : kafka::Direction::kResponse,
         from_hex(f["hex"])});
  }
  return frames;
}

// A piece of a frame: [begin, end) of the frame's bytes, of which the first `captured` are known.
struct Cut {
  std::size_t begin, end, captured;
};
using Policy = std::function<std::vector<Cut>(const Frame&, std::size_t frame_index)>;

inline Policy whole() {
  return [](const Frame& f, std::size_t) {
    return std::vector<Cut>{{0, f.bytes.size(), f.bytes.size()}};
  };
}

inline Policy every(std::size_t n) {
  return [n](const Frame& f, std::size_t) {
    std::vector<Cut> cuts;
    for (std::size_t i = 0; i < f.bytes.size(); i += n) {
      std::size_t e = std::min(f.bytes.size(), i + n);
      cuts.push_back({i, e, e - i});
    }
    return cuts;
  };
}

// The frame's first `head` bytes in one write, the rest in another (Java clients write the size
// prefix separately; librdkafka may split after the header).
inline Policy split_at(std::size_t head) {
  return [head](const Frame& f, std::size_t) {
    std::size_t h = std::min(head, f.bytes.size());
    return std::vector<Cut>{{0, h, h}, {h, f.bytes.size(), f.bytes.size() - h}};
  };
}

struct Collector : kafka::Sink {
  std::vector<kafka::Exchange> exchanges;
  std::size_t requests_seen = 0;
  void on_exchange(const kafka::Exchange& ex) override { exchanges.push_back(ex); }
  void on_request(const kafka::Exchange&) override { ++requests_seen; }
};

struct FeedOptions {
  bool from_start = true;  // open() the connection first
  // Start each direction's stream this many bytes into its first frame (attach mid-stream).
  std::size_t skip_request_bytes = 0;
  std::size_t skip_response_bytes = 0;
  bool shuffle = false;  // reorder pieces of a direction locally and duplicate some
  std::uint64_t seed = 1;
};

inline void feed(kafka::Decoder& decoder, const std::vector<Frame>& frames, const Policy& policy,
                 const FeedOptions& options = {}) {
  const std::uint64_t conn = 7;
  if (options.from_start) decoder.open(conn, 1);
  std::uint64_t pos[2] = {0, 0};
  std::size_t skip[2] = {options.skip_request_bytes, options.skip_response_bytes};
  std::uint64_t time = 1000;
  std::mt19937_64 rng(options.seed);
  struct Piece {
    kafka::Direction dir;
    std::uint64_t pos, len;
    std::vector<std::uint8_t> captured;
  };
  std::vector<Piece> pending;  // pieces of the current frame (shuffled when asked)
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const Frame& f = frames[i];
    int d = f.direction == kafka::Direction::kRequest ? 0 : 1;
    pending.clear();
    for (const Cut& c : policy(f, i)) {
      std::size_t begin = c.begin, end = c.end, cap_end = c.begin + c.captured;
      if (skip[d]) {  // the part of the stream before attaching is never seen
        std::size_t drop = std::min(skip[d], end - begin);
        skip[d] -= drop;
        begin += drop;
        pos[d] += drop;
        if (begin == end) continue;
      }
      Piece p{f.direction, pos[d], end - begin, {}};
      if (cap_end > begin) p.captured.assign(f.bytes.begin() + begin, f.bytes.begin() + cap_end);
      pos[d] += end - begin;
      pending.push_back(std::move(p));
    }
    if (options.shuffle) {
      for (std::size_t k = 0; k + 1 < pending.size(); ++k) {
        std::size_t j = k + rng() % std::min<std::size_t>(4, pending.size() - k);
        std::swap(pending[k], pending[j]);
      }
      if (!pending.empty()) pending.push_back(pending[rng() % pending.size()]);  // retransmission
    }
    for (const Piece& p : pending) {
      decoder.data(conn, p.dir, time++, p.pos, p.len, p.captured);
    }
  }
  decoder.close(conn, time);
}

// Checks one exchange against what the encoder was given.
inline void check_exchange(const json& e, const kafka::Exchange& ex) {
  INFO("api_key=" << ex.api_key << " v" << ex.api_version << " corr=" << ex.correlation_id);
  CHECK(ex.api_key == e["api_key"].get<int>());
  CHECK(ex.api_version == e["version"].get<int>());
  CHECK(ex.correlation_id == e["correlation_id"].get<int>());
  CHECK(ex.client_id == e["client_id"].get<std::string>());
  CHECK(ex.response_seen == e.value("response", true));
  CHECK(ex.body_decoded == e.value("decoded", true));
  CHECK_FALSE(ex.request_truncated);
  CHECK_FALSE(ex.response_truncated);
  if (e.contains("group_id")) CHECK(ex.group_id == e["group_id"].get<std::string>());
  if (e.contains("member_id")) CHECK(ex.member_id == e["member_id"].get<std::string>());
  if (e.contains("response_error_code")) {
    CHECK(ex.response_error_code == e["response_error_code"].get<int>());
  }
  if (e.contains("client_software_name")) {
    CHECK(ex.client_software_name == e["client_software_name"].get<std::string>());
    CHECK(ex.client_software_version == e["client_software_version"].get<std::string>());
  }
  if (e.contains("metadata_topics")) CHECK(ex.metadata_topics == e["metadata_topics"].get<int>());
  if (!e.contains("fetch")) return;
  const json& f = e["fetch"];
  const kafka::FetchExchange& got = ex.fetch;
  for (const char* key : {"replica_id", "max_wait_ms", "min_bytes", "max_bytes", "isolation_level",
                          "session_id", "session_epoch", "response_session_id"}) {
    if (!f.contains(key)) continue;
    long long value = std::string(key) == "replica_id"        ? got.replica_id
                      : std::string(key) == "max_wait_ms"     ? got.max_wait_ms
                      : std::string(key) == "min_bytes"       ? got.min_bytes
                      : std::string(key) == "max_bytes"       ? got.max_bytes
                      : std::string(key) == "isolation_level" ? got.isolation_level
                      : std::string(key) == "session_id"      ? got.session_id
                      : std::string(key) == "session_epoch"   ? got.session_epoch
                                                              : got.response_session_id;
    INFO(key);
    CHECK(value == f[key].get<long long>());
  }
  if (f.contains("rack_id")) CHECK(got.rack_id == f["rack_id"].get<std::string>());
  if (f.contains("session_kind")) {
    CHECK(std::string(kafka::to_string(got.session_kind)) == f["session_kind"].get<std::string>());
  }
  std::size_t expected_partitions = 0;
  for (const auto& t : f["topics"]) {
    std::string name = t["topic"];
    INFO("topic " << name);
    if (t.contains("topic_id")) {
      bool found = false;
      for (const auto& topic : got.topics) found |= topic.id.to_base64() == t["topic_id"];
      CHECK(found);
    }
    for (const auto& p : t["partitions"]) {
      ++expected_partitions;
      INFO("partition " << p["partition"]);
      const kafka::FetchPartition* match = nullptr;
      for (const auto& gp : got.partitions) {
        if (got.topics[gp.topic_index].name == name && gp.partition == p["partition"]) match = &gp;
      }
      REQUIRE(match);
      CHECK(match->fetch_offset == p["fetch_offset"].get<long long>());
      CHECK(match->partition_max_bytes == p["partition_max_bytes"].get<int>());
      CHECK(match->from_session == p.value("from_session", false));
      if (p.contains("records_size")) {
        CHECK(match->in_response);
        CHECK(match->records_size == p["records_size"].get<long long>());
      }
      if (p.contains("error_code")) CHECK(match->error_code == p["error_code"].get<int>());
      if (p.contains("high_watermark")) {
        CHECK(match->high_watermark == p["high_watermark"].get<long long>());
      }
      if (p.contains("log_start_offset")) {
        CHECK(match->log_start_offset == p["log_start_offset"].get<long long>());
      }
    }
  }
  CHECK(got.partitions.size() == expected_partitions);
  std::size_t expected_forgotten = 0;
  if (f.contains("forgotten")) {
    for (const auto& t : f["forgotten"]) {
      for (const auto& p : t["partitions"]) {
        ++expected_forgotten;
        bool found = false;
        for (const auto& gp : got.forgotten) {
          found |= got.topics[gp.topic_index].name == t["topic"] && gp.partition == p;
        }
        CHECK_MESSAGE(found, "forgotten " << t["topic"] << "/" << p);
      }
    }
  }
  CHECK(got.forgotten.size() == expected_forgotten);
}

inline void check_all(const json& expect, const std::vector<kafka::Exchange>& got,
                      std::size_t skip_expected = 0) {
  std::string seen;
  for (const auto& ex : got) {
    seen += " " + std::to_string(ex.api_key) + "v" + std::to_string(ex.api_version) + "#" +
            std::to_string(ex.correlation_id);
  }
  INFO("exchanges:" << seen);
  REQUIRE(got.size() == expect.size() - skip_expected);
  for (std::size_t i = 0; i < got.size(); ++i) check_exchange(expect[i + skip_expected], got[i]);
}

}  // namespace fc::test
