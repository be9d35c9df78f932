// Decoder behaviour beyond the vectors: secrets never surface, expiry, future versions counted,
// sessions dropped on session errors, an incremental fetch's unlisted session partitions, bounded
// state (sessions carried by pipelined requests included).
#include <map>

#include "heap.h"
#include "kafka_frames.h"
#include "vector_harness.h"

using namespace fc::test;
using fc::kafka::Decoder;
using fc::kafka::Direction;

namespace {

json conversation(const std::string& file, const std::string& name) {
  json v = load_vectors(file);
  for (auto& c : v["conversations"]) {
    if (c["name"] == name) return c;
  }
  FAIL("no conversation " << name);
  return {};
}

bool contains(const std::string& s, const std::string& needle) {
  return s.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("SASL frames are skipped and their bytes never surface") {
  json c = conversation("kafka_python.json", "sasl_then_acks0_then_fetch");
  for (std::size_t piece : {1ul, 5ul, 1000ul}) {
    Collector sink;
    Decoder decoder(sink);
    feed(decoder, frames_of(c), every(piece));
    check_all(c["expect"], sink.exchanges);
    CHECK(decoder.counters().sasl_frames == 2);
    for (const auto& ex : sink.exchanges) {
      for (const std::string* s : {&ex.client_id, &ex.group_id, &ex.member_id,
                                   &ex.client_software_name, &ex.client_software_version}) {
        CHECK_FALSE(contains(*s, "secret"));
        CHECK_FALSE(contains(*s, "alice"));
      }
    }
  }
}

TEST_CASE("raw SASL tokens after SaslHandshake v0 are opaque, even when shaped like a header") {
  json c = conversation("kafka_python.json", "sasl_v0_raw_tokens_then_fetch");
  for (std::size_t piece : {1ul, 7ul, 1000ul}) {
    Collector sink;
    Decoder decoder(sink);
    feed(decoder, frames_of(c), every(piece));
    check_all(c["expect"], sink.exchanges);
    CHECK(decoder.counters().opaque_frames == 2);  // the client's token and the broker's
    for (const auto& ex : sink.exchanges) CHECK_FALSE(contains(ex.client_id, "secret"));
  }
}

TEST_CASE("unanswered requests expire; closing emits what is still in flight") {
  json c = conversation("kafka_python.json", "fetch_v11_1p");
  auto frames = frames_of(c);
  Collector sink;
  fc::kafka::Options options;
  options.request_timeout_ns = 5'000;
  Decoder decoder(sink, options);
  decoder.open(1, 0);
  decoder.data(1, Direction::kRequest, 1'000, 0, frames[0].bytes.size(), frames[0].bytes);
  CHECK(sink.requests_seen == 1);
  decoder.expire(5'500);  // not yet stale
  CHECK(sink.exchanges.empty());
  decoder.expire(6'001);
  REQUIRE(sink.exchanges.size() == 1);
  CHECK_FALSE(sink.exchanges[0].response_seen);
  CHECK(sink.exchanges[0].fetch.partitions.size() == 1);
  CHECK(decoder.counters().requests_unanswered == 1);
  // The late response matches nothing now: held in case its request is still to come, given up
  // when the connection closes.
  decoder.data(1, Direction::kResponse, 7'000, 0, frames[1].bytes.size(), frames[1].bytes);
  CHECK(decoder.counters().responses_unmatched == 0);
  decoder.close(1, 8'000);
  CHECK(decoder.counters().responses_unmatched == 1);
  CHECK(sink.exchanges.size() == 1);
}

TEST_CASE("a response delivered before its request (another CPU's ring buffer) still matches") {
  json c = conversation("kafka_python.json", "fetch_pipelined");  // 3 requests, then 3 responses
  auto frames = frames_of(c);
  Collector sink;
  Decoder decoder(sink);
  decoder.open(1, 0);
  std::uint64_t req_pos = 0, resp_pos = 0;
  for (int i = 0; i < 3; ++i) {  // each response first, then its request
    const auto& resp = frames[3 + i].bytes;
    const auto& req = frames[i].bytes;
    decoder.data(1, Direction::kResponse, 10 + i, resp_pos, resp.size(), resp);
    resp_pos += resp.size();
    decoder.data(1, Direction::kRequest, 10 + i, req_pos, req.size(), req);
    req_pos += req.size();
  }
  decoder.close(1, 100);
  check_all(c["expect"], sink.exchanges);
  CHECK(decoder.counters().responses_unmatched == 0);
}

TEST_CASE("a future Fetch version is skipped by length and counted") {
  json c = conversation("kafka_python.json", "fetch_pipelined");  // v4, v7, v11 then responses
  auto frames = frames_of(c);
  frames[1].bytes[7] = 18;  // request 2 claims Fetch v18
  Collector sink;
  Decoder decoder(sink);
  feed(decoder, frames, whole());
  REQUIRE(sink.exchanges.size() == 3);
  CHECK_FALSE(sink.exchanges[1].body_decoded);
  CHECK(sink.exchanges[1].api_version == 18);
  CHECK(sink.exchanges[1].response_seen);
  check_exchange(c["expect"][0], sink.exchanges[0]);
  check_exchange(c["expect"][2], sink.exchanges[2]);
  bool counted = false;
  for (const auto& a : decoder.api_counts()) {
    if (a.api_key == 1 && a.api_version == 18) counted = a.requests == 1 && a.skipped == 1;
  }
  CHECK(counted);
  CHECK(decoder.counters().resyncs == 0);
}

TEST_CASE("a session error forgets the session; later incremental fetches are misses") {
  json c = conversation("node_clients.json", "platformatic_fetch_session_v13");
  auto frames = frames_of(c);  // metadata, full fetch (creates 31337), incremental fetch
  // Make the incremental response carry FETCH_SESSION_ID_NOT_FOUND (70) at top level:
  // size(4) corr(4) header tags(1) throttle(4) error(2).
  frames[5].bytes[13] = 0;
  frames[5].bytes[14] = 70;
  std::vector<Frame> with_retry = frames;
  with_retry.push_back(frames[4]);  // the same incremental request again
  Collector sink;
  Decoder decoder(sink);
  feed(decoder, with_retry, whole());
  REQUIRE(sink.exchanges.size() == 4);
  CHECK(sink.exchanges[2].fetch.error_code == 70);
  CHECK(decoder.counters().session_misses == 1);  // the retry found no session
  CHECK_FALSE(sink.exchanges[3].response_seen);
}

TEST_CASE("an incremental fetch carries its session's unlisted partitions when it arrives") {
  // The full fetch opens session 31337 with orders 0, 1, 2; the incremental one lists 0 (moved
  // to 150) and forgets 2. The broker fetches 1 too, at the session's offset, so a GET it causes
  // must find 1 in the request: attribution looks when the request arrives, not at the response.
  json c = conversation("node_clients.json", "platformatic_fetch_session_v13");
  struct Requests : Collector {
    std::vector<fc::kafka::Exchange> requests;
    void on_request(const fc::kafka::Exchange& ex) override { requests.push_back(ex); }
  } sink;
  Decoder decoder(sink);
  feed(decoder, frames_of(c), whole());
  REQUIRE(sink.requests.size() == 3);
  const fc::kafka::FetchExchange& incremental = sink.requests[2].fetch;
  REQUIRE(incremental.session_kind == fc::kafka::FetchSessionKind::kIncremental);
  std::map<std::int32_t, const fc::kafka::FetchPartition*> by_partition;
  for (const auto& p : incremental.partitions) {
    CHECK(incremental.topics[p.topic_index].name == "orders");
    CHECK(by_partition.emplace(p.partition, &p).second);  // each once
  }
  REQUIRE(by_partition.size() == 2);
  REQUIRE(by_partition.count(0));
  REQUIRE(by_partition.count(1));
  CHECK(by_partition[0]->in_request);
  CHECK(by_partition[0]->fetch_offset == 150);
  CHECK_FALSE(by_partition[1]->in_request);
  CHECK(by_partition[1]->from_session);
  CHECK(by_partition[1]->fetch_offset == 200);
  CHECK(by_partition[1]->partition_max_bytes == 65536);
  // The response's partition 1 fills the same entry: no second one.
  REQUIRE(sink.exchanges.size() == 3);
  CHECK(sink.exchanges[2].fetch.partitions.size() == 2);
}

namespace {

// One connection fed whole frames built in code: a session of `session_partitions` (Fetch v13,
// session id 7), then incremental requests, answered when the test says.
struct SessionConnection {
  struct Sink : fc::kafka::Sink {
    std::vector<std::uint32_t> carried;  // each request's partitions from the session
    std::size_t exchanges = 0;
    void on_request(const fc::kafka::Exchange& ex) override {
      carried.push_back(ex.fetch.partitions_from_session);
    }
    void on_exchange(const fc::kafka::Exchange&) override { ++exchanges; }
  } sink;
  Decoder decoder;
  fc::testing::FetchFeeder feed{decoder};
  int correlation = 0;

  SessionConnection(int session_partitions, fc::kafka::Options options) : decoder(sink, options) {
    decoder.open(1, 0);
    feed.request(fc::testing::fetch_request(13, correlation, session_partitions, {0, 0}));
    respond(correlation++, session_partitions);
  }
  void respond(int correlation_id, int partitions = 1) {
    feed.respond(fc::testing::fetch_response(13, correlation_id, partitions, 7));
  }
  // `n` incremental requests listing partition 0 only, then (when `answer`) their responses.
  void incremental(int n, bool answer) {
    const int first = correlation;
    for (int i = 0; i < n; ++i, ++correlation)  // epoch: 1 for the first after the full fetch
      feed.request(fc::testing::fetch_request(13, correlation, 1, {7, correlation}));
    if (answer)
      for (int c = first; c < correlation; ++c) respond(c);
  }
};

}  // namespace

TEST_CASE("pipelined incremental fetches carry a session at most max_session_partitions times") {
  fc::kafka::Options options;
  options.max_session_partitions = 25;
  SessionConnection conn(20, options);
  REQUIRE(conn.sink.exchanges == 1);
  conn.incremental(3, false);  // in flight together: 19 unlisted partitions each
  REQUIRE(conn.sink.carried.size() == 4);
  CHECK(conn.sink.carried[1] == 19);
  CHECK(conn.sink.carried[2] == 6);  // 25 - 19
  CHECK(conn.sink.carried[3] == 0);
  CHECK(conn.decoder.counters().session_partitions_capped == 13 + 19);
  // Answered, they carry nothing any more: the next request carries the session again.
  for (int c = 1; c <= 3; ++c) conn.respond(c);
  CHECK(conn.sink.exchanges == 4);
  conn.incremental(1, true);
  CHECK(conn.sink.carried.back() == 19);
  CHECK(conn.decoder.counters().session_partitions_capped == 13 + 19);
  CHECK(conn.decoder.counters().parse_errors == 0);
}

TEST_CASE("an incremental fetch that lists nothing, left out whole, leaves its session as it was") {
  // The capture leaves out such a fetch when no GET went out in its window (a Java consumer
  // whose positions did not move): its request and response come as runs left out. The next
  // incremental request must still carry the session's other partitions, decoded in step.
  SessionConnection conn(6, {});
  conn.incremental(1, true);  // lists partition 0, carries 5
  const auto unchanged = fc::testing::fetch_request(13, conn.correlation, 0, {7, conn.correlation});
  const auto answer = fc::testing::fetch_response(13, conn.correlation++, 0, 7);
  REQUIRE(answer.captured.size() == 1);  // no partition: no records hole
  conn.feed.decoder.skip(1, Direction::kRequest, conn.feed.time++, conn.feed.request_pos,
                         unchanged.size());
  conn.feed.request_pos += unchanged.size();
  conn.feed.decoder.skip(1, Direction::kResponse, conn.feed.time++, conn.feed.response_pos,
                         answer.captured[0].size());
  conn.feed.response_pos += answer.captured[0].size();
  conn.incremental(1, true);
  REQUIRE(conn.sink.carried.size() == 3);  // the full fetch and the two seen
  CHECK(conn.sink.carried.back() == 5);
  CHECK(conn.sink.exchanges == 3);
  CHECK(conn.decoder.counters().left_out_runs == 2);
  CHECK(conn.decoder.counters().session_misses == 0);
  CHECK(conn.decoder.counters().resyncs == 0);
  CHECK(conn.decoder.counters().parse_errors == 0);
}

TEST_CASE("a recycled exchange does not keep a large session's memory") {
  // 50 requests in flight carry a 2,000-partition session each (5.6 MB); once answered, their
  // exchanges are recycled for the connection's next requests and must give that memory back.
  SessionConnection conn(2000, {});
  const std::size_t before = fc::testing::heap_in_use();
  conn.incremental(50, false);
  const std::size_t in_flight = fc::testing::heap_growth(before);
  for (int c = 1; c <= 50; ++c) conn.respond(c);
  REQUIRE(conn.sink.exchanges == 51);
  for (std::size_t i = 1; i < conn.sink.carried.size(); ++i) CHECK(conn.sink.carried[i] == 1999);
  const std::size_t after = fc::testing::heap_growth(before);
  MESSAGE("heap growth: " << in_flight << " in flight, " << after << " once answered");
  CHECK(in_flight > 5'000'000);
  CHECK(after < 1'000'000);
}

TEST_CASE("connections and in-flight requests stay bounded") {
  json c = conversation("kafka_python.json", "fetch_v11_1p");
  auto request = frames_of(c)[0].bytes;
  Collector sink;
  fc::kafka::Options options;
  options.max_in_flight = 8;
  Decoder decoder(sink, options);
  decoder.open(1, 0);
  std::uint64_t pos = 0;
  for (int i = 0; i < 100; ++i) {
    decoder.data(1, Direction::kRequest, i, pos, request.size(), request);
    pos += request.size();
  }
  CHECK(sink.exchanges.size() >= 100 - 8);
  for (const auto& ex : sink.exchanges) CHECK_FALSE(ex.response_seen);
  decoder.close(1, 1000);
  CHECK(sink.exchanges.size() == 100);
  CHECK(decoder.connection_count() == 0);
}

TEST_CASE(
    "a gap closes at the first sweep after bytes beyond it, on each connection that got them") {
  json c = conversation("kafka_python.json", "fetch_pipelined");  // 3 requests, then 3 responses
  auto frames = frames_of(c);
  Collector sink;
  Decoder decoder(sink);
  decoder.open(1, 0);
  decoder.open(2, 0);
  // Delivers request/response `i` of connection `conn` with the frames before them missing,
  // `extra` more bytes further on.
  auto after_gap = [&](std::uint64_t conn, int i, std::uint64_t t, std::uint64_t extra = 0) {
    std::uint64_t req_pos = extra, resp_pos = extra;
    for (int k = 0; k < i; ++k) {
      req_pos += frames[k].bytes.size();
      resp_pos += frames[3 + k].bytes.size();
    }
    const auto& req = frames[i].bytes;
    const auto& resp = frames[3 + i].bytes;
    decoder.data(conn, Direction::kRequest, t, req_pos, req.size(), req);
    decoder.data(conn, Direction::kResponse, t, resp_pos, resp.size(), resp);
  };
  after_gap(1, 1, 10);
  CHECK(sink.exchanges.empty());  // the bytes wait for the gap before them
  decoder.close_gaps(20);
  REQUIRE(sink.exchanges.size() == 1);
  decoder.close_gaps(30);  // nothing new came
  CHECK(sink.exchanges.size() == 1);
  after_gap(2, 2, 40);      // connection 2's first bytes
  after_gap(1, 2, 40, 50);  // connection 1 again, after another gap of 50 bytes
  CHECK(sink.exchanges.size() == 1);
  decoder.close_gaps(50);
  REQUIRE(sink.exchanges.size() == 3);
  check_exchange(c["expect"][1], sink.exchanges[0]);
  for (int i : {1, 2}) check_exchange(c["expect"][2], sink.exchanges[i]);
  CHECK(decoder.counters().resyncs == 6);  // per gap, both directions
}
