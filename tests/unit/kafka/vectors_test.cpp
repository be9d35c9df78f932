// Conversations encoded by python3-kafka, kafkajs and @platformatic/kafka, decoded whole, in
// 1-byte pieces, with split headers, reordered, with records in holes, and attached mid-stream.
#include <algorithm>

#include "vector_harness.h"

using namespace fc::test;
using fc::kafka::Decoder;
using fc::kafka::Direction;

namespace {

std::vector<json> all_conversations() {
  std::vector<json> out;
  for (const char* file : {"kafka_python.json", "node_clients.json"}) {
    json v = load_vectors(file);
    for (auto& c : v["conversations"]) out.push_back(c);
  }
  return out;
}

void run_policy(const Policy& policy, const FeedOptions& options = {}) {
  auto conversations = all_conversations();
  REQUIRE(conversations.size() >= 30);
  for (const auto& c : conversations) {
    INFO("conversation " << c["name"].get<std::string>());
    Collector sink;
    Decoder decoder(sink);
    feed(decoder, frames_of(c), policy, options);
    check_all(c["expect"], sink.exchanges);
    CHECK(decoder.counters().resyncs == 0);
    CHECK(decoder.counters().parse_errors == 0);
    CHECK(decoder.connection_count() == 0);
  }
}

// Records of each response as holes (sendfile: length known, bytes never captured).
Policy records_as_holes(const json& conversation) {
  std::vector<std::vector<std::uint8_t>> records;
  for (const auto& r : conversation["records_hex"]) records.push_back(from_hex(r));
  return [records](const Frame& f, std::size_t) {
    std::vector<Cut> cuts;
    if (f.direction == Direction::kRequest)
      return std::vector<Cut>{{0, f.bytes.size(), f.bytes.size()}};
    std::size_t at = 0;
    for (const auto& r : records) {
      auto it = std::search(f.bytes.begin() + static_cast<std::ptrdiff_t>(at), f.bytes.end(),
                            r.begin(), r.end());
      if (it == f.bytes.end()) continue;
      std::size_t begin = static_cast<std::size_t>(it - f.bytes.begin());
      if (begin > at) cuts.push_back({at, begin, begin - at});
      // Capture a few bytes of the records (a capture cap), the rest is a hole.
      cuts.push_back({begin, begin + r.size(), std::min<std::size_t>(5, r.size())});
      at = begin + r.size();
    }
    if (at < f.bytes.size()) cuts.push_back({at, f.bytes.size(), f.bytes.size() - at});
    return cuts;
  };
}

}  // namespace

TEST_CASE("client-encoded conversations decode from whole frames") {
  run_policy(whole());
}

TEST_CASE("client-encoded conversations decode from 1-byte pieces") {
  run_policy(every(1));
}

TEST_CASE("client-encoded conversations decode with 4- and 8-byte header splits") {
  run_policy(split_at(4));
  run_policy(split_at(8));
  run_policy(every(3));
}

TEST_CASE("client-encoded conversations decode from reordered and retransmitted pieces") {
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    FeedOptions options;
    options.shuffle = true;
    options.seed = seed;
    run_policy(every(7), options);
  }
}

TEST_CASE("records in holes keep their sizes") {
  std::size_t with_records = 0;
  for (const auto& c : all_conversations()) {
    if (c["records_hex"].empty()) continue;
    ++with_records;
    INFO("conversation " << c["name"].get<std::string>());
    Collector sink;
    Decoder decoder(sink);
    feed(decoder, frames_of(c), records_as_holes(c));
    check_all(c["expect"], sink.exchanges);
    CHECK(decoder.counters().resyncs == 0);
  }
  CHECK(with_records >= 20);
}

TEST_CASE("attached mid-stream: resynchronises and decodes from the next whole frame") {
  std::size_t tried = 0;
  for (const auto& c : all_conversations()) {
    auto frames = frames_of(c);
    // Conversations of alternating request/response pairs with at least two pairs.
    if (frames.size() < 4 || frames[0].direction != Direction::kRequest ||
        frames[1].direction != Direction::kResponse) {
      continue;
    }
    if (c["expect"].size() * 2 != frames.size()) continue;
    // Topic ids resolve through the Metadata exchange this test cuts off.
    if (c["expect"][0]["api_key"] == 3) continue;
    for (std::size_t skip :
         {1ul, 3ul, 5ul, frames[0].bytes.size() / 2, frames[0].bytes.size() - 1}) {
      INFO("conversation " << c["name"].get<std::string>() << " skip " << skip);
      ++tried;
      Collector sink;
      Decoder decoder(sink);
      FeedOptions options;
      options.from_start = false;
      options.skip_request_bytes = skip;
      options.skip_response_bytes = 3;  // the response to the unseen request, cut as well
      feed(decoder, frames, every(13), options);
      check_all(c["expect"], sink.exchanges, 1);
      CHECK(decoder.counters().resyncs + (decoder.counters().resync_bytes > 0) >= 1);
    }
  }
  CHECK(tried >= 10);
}

TEST_CASE("a request header in a hole loses that exchange only") {
  json pipelined;
  for (const auto& c : all_conversations()) {
    if (c["name"] == "fetch_pipelined") pipelined = c;
  }
  REQUIRE(!pipelined.is_null());
  auto frames = frames_of(pipelined);  // 3 requests, then 3 responses
  for (std::size_t hole_len : {2ul, 4ul, 6ul, 12ul}) {
    INFO("hole over the first " << hole_len << " bytes of request 2");
    Policy policy = [hole_len](const Frame& f, std::size_t i) {
      if (i != 1) return std::vector<Cut>{{0, f.bytes.size(), f.bytes.size()}};
      return std::vector<Cut>{{0, hole_len, 0},
                              {hole_len, f.bytes.size(), f.bytes.size() - hole_len}};
    };
    Collector sink;
    Decoder decoder(sink);
    feed(decoder, frames, policy);
    REQUIRE(sink.exchanges.size() == 2);
    check_exchange(pipelined["expect"][0], sink.exchanges[0]);
    check_exchange(pipelined["expect"][2], sink.exchanges[1]);
    CHECK(decoder.counters().resyncs >= 1);
    CHECK(decoder.counters().responses_unmatched == 1);
  }
}

TEST_CASE("a hole inside a request body truncates it; framing holds") {
  json c;
  for (const auto& conv : all_conversations()) {
    if (conv["name"] == "fetch_v11_9p") c = conv;
  }
  REQUIRE(!c.is_null());
  auto frames = frames_of(c);
  Policy policy = [](const Frame& f, std::size_t i) {
    if (i != 0) return std::vector<Cut>{{0, f.bytes.size(), f.bytes.size()}};
    return std::vector<Cut>{{0, 60, 60}, {60, f.bytes.size(), 0}};  // capture cap at 60 bytes
  };
  Collector sink;
  Decoder decoder(sink);
  feed(decoder, frames, policy);
  REQUIRE(sink.exchanges.size() == 1);
  const auto& ex = sink.exchanges[0];
  CHECK(ex.request_truncated);
  CHECK(ex.response_seen);
  CHECK(ex.client_id == "py-consumer-1");
  CHECK(ex.fetch.partitions.size() == 9);  // the response still lists every partition
  CHECK(decoder.counters().resyncs == 0);
}
