// Fetch frames built in code, for the decoder's bench and unit tests that need sizes no recorded
// conversation has (sessions of thousands of partitions): a consumer's request, spread over
// topics of 10 partitions each, and its response cut where the records would be a sendfile hole;
// and a feeder that hands them to a decoder as the capture does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kafka/kafka.h"

namespace fc::testing {

struct KafkaEncoder {
  std::vector<std::uint8_t> b;
  void i8(int v) { b.push_back(static_cast<std::uint8_t>(v)); }
  void i16(int v) { i8(v >> 8), i8(v); }
  void i32(std::int32_t v) { i16(v >> 16), i16(v & 0xffff); }
  void i64(std::int64_t v) {
    i32(static_cast<std::int32_t>(v >> 32)), i32(static_cast<std::int32_t>(v));
  }
  void uvarint(std::uint32_t v) {
    while (v >= 0x80) i8((v & 0x7f) | 0x80), v >>= 7;
    i8(v);
  }
  void str(const std::string& s, bool compact) {
    compact ? uvarint(static_cast<std::uint32_t>(s.size() + 1)) : i16(static_cast<int>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }
  // Topic t's id (v13+): distinct for every t below 65,536.
  void topic_id(int t) {
    i16(t);
    for (int i = 2; i < 16; ++i) i8(i + 1);
  }
  void frame_size_prefix() {
    auto n = static_cast<std::uint32_t>(b.size());
    std::uint8_t head[4] = {std::uint8_t(n >> 24), std::uint8_t(n >> 16), std::uint8_t(n >> 8),
                            std::uint8_t(n)};
    b.insert(b.begin(), head, head + 4);
  }
  // Topic t of a request or response: its id (v13+) or its name.
  void topic(int version, int t) {
    if (version >= 13) {
      topic_id(t);
    } else {
      str("orders-topic-" + std::to_string(t), version >= 12);
    }
  }
  // A topics array of `partitions` spread over topics of 10 each; `partition(p)` writes
  // partition p of a topic.
  template <class WritePartition>
  void topics_of_ten(int version, int partitions, WritePartition partition) {
    const bool flexible = version >= 12;
    int topics = (partitions + 9) / 10;
    flexible ? uvarint(topics + 1) : i32(topics);
    for (int t = 0, left = partitions; t < topics; ++t) {
      int n = left < 10 ? left : 10;
      left -= n;
      topic(version, t);
      flexible ? uvarint(n + 1) : i32(n);
      for (int p = 0; p < n; ++p) partition(p);
      if (flexible) uvarint(0);
    }
  }
};

// Where a request stands in a fetch session: sessionless (0, -1), the full request that opens
// one (0, 0), or an incremental one (the session's id, epoch > 0).
struct SessionFields {
  std::int32_t id = 0, epoch = -1;
};

// A consumer's Fetch request for `partitions` partitions (0 lists none, as an incremental
// request whose position moved nowhere).
inline std::vector<std::uint8_t> fetch_request(int version, int correlation, int partitions,
                                               SessionFields session = {}) {
  const bool flexible = version >= 12;
  KafkaEncoder e;
  e.i16(1), e.i16(version), e.i32(correlation), e.str("consumer-orders-app-1", false);
  if (flexible) e.uvarint(0);
  if (version <= 14) e.i32(-1);
  e.i32(500), e.i32(1), e.i32(52428800), e.i8(0), e.i32(session.id), e.i32(session.epoch);
  e.topics_of_ten(version, partitions, [&](int p) {
    e.i32(p), e.i32(5), e.i64(123456789 + p * 1000);
    if (version >= 12) e.i32(4);
    e.i64(-1), e.i32(1048576);
    if (flexible) e.uvarint(0);
  });
  flexible ? e.uvarint(1) : e.i32(0);  // forgotten
  e.str("", flexible);                 // rack
  if (flexible) e.uvarint(0);
  e.frame_size_prefix();
  return e.b;
}

// The response's bytes up to each partition's records; `records` bytes of each are a hole.
struct FetchResponseFrame {
  std::vector<std::vector<std::uint8_t>> captured;  // piece i precedes records hole i
  std::uint32_t records = 4096;
};

inline FetchResponseFrame fetch_response(int version, int correlation, int partitions,
                                         std::int32_t session_id = 0) {
  const bool flexible = version >= 12;
  FetchResponseFrame r;
  KafkaEncoder e;
  // Build the whole frame with records placeholders to get the size right, then cut.
  std::vector<std::size_t> records_at;
  e.i32(correlation);
  if (flexible) e.uvarint(0);
  e.i32(0), e.i16(0), e.i32(session_id);
  e.topics_of_ten(version, partitions, [&](int p) {
    e.i32(p), e.i16(0), e.i64(200000000), e.i64(200000000), e.i64(0);
    flexible ? e.uvarint(1) : e.i32(-1);
    e.i32(-1);
    flexible ? e.uvarint(r.records + 1) : e.i32(static_cast<std::int32_t>(r.records));
    records_at.push_back(e.b.size());
    if (flexible) e.uvarint(0);
  });
  if (flexible) e.uvarint(0);
  std::uint32_t size = static_cast<std::uint32_t>(e.b.size() + records_at.size() * r.records);
  std::vector<std::uint8_t> all = {std::uint8_t(size >> 24), std::uint8_t(size >> 16),
                                   std::uint8_t(size >> 8), std::uint8_t(size)};
  all.insert(all.end(), e.b.begin(), e.b.end());
  std::size_t from = 0;
  for (std::size_t at : records_at) {
    r.captured.emplace_back(all.begin() + from, all.begin() + 4 + at);
    from = 4 + at;
  }
  r.captured.emplace_back(all.begin() + from, all.end());
  return r;
}

// One connection of a Decoder fed whole frames as the capture delivers them: a request in one
// piece, a response's captured pieces with each partition's records a hole (sendfile).
struct FetchFeeder {
  kafka::Decoder& decoder;
  std::uint64_t connection = 1;
  std::uint64_t request_pos = 0, response_pos = 0, time = 1;

  void request(const std::vector<std::uint8_t>& frame) {
    decoder.data(connection, kafka::Direction::kRequest, time++, request_pos, frame.size(), frame);
    request_pos += frame.size();
  }
  void respond(const FetchResponseFrame& r) {
    for (std::size_t i = 0; i < r.captured.size(); ++i) {
      const auto& piece = r.captured[i];
      decoder.data(connection, kafka::Direction::kResponse, time, response_pos, piece.size(),
                   piece);
      response_pos += piece.size();
      if (i + 1 < r.captured.size()) {  // records: length only
        decoder.data(connection, kafka::Direction::kResponse, time, response_pos, r.records, {});
        response_pos += r.records;
      }
    }
  }
};

}  // namespace fc::testing
