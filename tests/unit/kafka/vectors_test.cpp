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
  CHECK(decoder.counters().requests_truncated == 1);
  CHECK(decoder.counters().frames_truncated == 1);
}

namespace {

// Conversations of request/response pairs, one after another (the shape a consumer's fetch
// connection has, where the capture may leave out whole exchanges: quiet fetches).
std::vector<json> alternating_conversations() {
  std::vector<json> out;
  for (const auto& c : all_conversations()) {
    auto frames = frames_of(c);
    if (frames.size() < 4 || c["expect"].size() * 2 != frames.size()) continue;
    bool alternating = true;
    for (std::size_t i = 0; i < frames.size(); ++i)
      alternating &= frames[i].direction == (i % 2 ? Direction::kResponse : Direction::kRequest);
    if (alternating) out.push_back(c);
  }
  return out;
}

// Feeds the frames whole, except exchange `left_out`, whose request and response come as runs
// left out by the capture (Decoder::skip).
void feed_leaving_out(Decoder& decoder, const std::vector<Frame>& frames, std::size_t left_out,
                      bool opened) {
  const std::uint64_t conn = 7;
  if (opened) decoder.open(conn, 1);
  std::uint64_t pos[2] = {0, 0};
  std::uint64_t time = 1000;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    const Frame& f = frames[i];
    const int d = f.direction == Direction::kRequest ? 0 : 1;
    if (i / 2 == left_out)
      decoder.skip(conn, f.direction, time++, pos[d], f.bytes.size());
    else
      decoder.data(conn, f.direction, time++, pos[d], f.bytes.size(), f.bytes);
    pos[d] += f.bytes.size();
  }
  decoder.close(conn, time);
}

}  // namespace

TEST_CASE("exchanges the capture left out whole: the frames after them decode in step") {
  std::size_t tried = 0;
  for (const auto& c : alternating_conversations()) {
    const auto frames = frames_of(c);
    const std::size_t pairs = frames.size() / 2;
    for (std::size_t left_out : {std::size_t{0}, std::size_t{1}, pairs - 1}) {
      // Topic ids resolve through a Metadata exchange: it must not be the one left out.
      if (left_out == 0 && c["expect"][0]["api_key"] == 3) continue;
      // A session's fetches carry state forward: of them only an incremental one that lists
      // nothing is ever left out (behaviour_test.cpp), and none of these conversations has one.
      const json& e = c["expect"][left_out];
      if (e.contains("fetch") && e["fetch"].value("session_epoch", -1) != -1) continue;
      for (bool opened : {true, false}) {
        if (!opened && left_out != 0) continue;  // unopened, the first frame resynchronises
        INFO("conversation " << c["name"].get<std::string>() << " left out " << left_out
                             << std::string(opened ? " (opened)" : " (first seen through data)"));
        ++tried;
        Collector sink;
        Decoder decoder(sink);
        feed_leaving_out(decoder, frames, left_out, opened);
        REQUIRE(sink.exchanges.size() == pairs - 1);
        for (std::size_t i = 0, k = 0; i < pairs; ++i)
          if (i != left_out) check_exchange(c["expect"][i], sink.exchanges[k++]);
        CHECK(decoder.counters().resyncs == 0);
        CHECK(decoder.counters().resync_bytes == 0);
        CHECK(decoder.counters().left_out_runs == 2);
      }
    }
  }
  CHECK(tried >= 10);
}

TEST_CASE("a run left out where the stream does not stand is a hole like any other") {
  const auto conversations = alternating_conversations();
  REQUIRE(!conversations.empty());
  const auto frames = frames_of(conversations.front());
  Collector sink;
  Decoder decoder(sink);
  decoder.open(7, 1);
  // The first request's first 6 bytes arrive, the rest never does; a run left out is reported
  // after it, as if it began there: the decoder cannot be in step, so it resynchronises.
  const auto& first = frames[0].bytes;
  decoder.data(7, Direction::kRequest, 10, 0, 6, std::span(first.data(), 6));
  decoder.skip(7, Direction::kRequest, 11, first.size(), 40);
  CHECK(decoder.counters().left_out_runs == 0);
  decoder.close(7, 12);
  CHECK(sink.exchanges.size() <= 1);
}
