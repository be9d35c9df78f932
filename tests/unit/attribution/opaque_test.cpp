// Remote reads matched to the request cycles of opaque client connections (TLS whose plaintext
// is not seen), on hand-built flows: cycles as opaque::CycleRecognizer reports them, GETs as the
// object-store decoder reports them.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "attribution/attribution.h"
#include "reads.h"

using namespace fc;
using attribution::Method;
using attribution::ObjectRead;

namespace {

constexpr std::uint64_t ms(std::uint64_t v) {
  return v * 1'000'000;
}

struct Recorded {
  std::string client, peer, topic;
  std::uint64_t bytes;
  Method method;
};

struct RecordingSink : attribution::Sink {
  std::vector<Recorded> reads;
  void on_attributed(const attribution::Attributed& a) override {
    reads.push_back({std::string(a.client_id), std::string(a.peer), std::string(a.topic),
                     a.body_bytes, a.method});
  }
  std::map<std::string, std::uint64_t> bytes() const {
    std::map<std::string, std::uint64_t> m;
    for (const auto& r : reads) m[r.client] += r.bytes;
    return m;
  }
};

ObjectRead get(std::uint32_t tid, std::uint64_t start, std::uint64_t end, std::string_view topic,
               std::int32_t partition, std::uint64_t bytes, std::int64_t first = -1) {
  ObjectRead r = fc::testing::object_read(900, tid, start, end, 206, bytes);
  r.topic = topic;
  r.partition = partition;
  r.segment_base_offset = 0;
  if (first >= 0) {
    r.range_first = first;
    r.range_last = first + static_cast<std::int64_t>(bytes) - 1;
  }
  return r;
}

// One cycle of an opaque connection: opened at `request`, answered at `answer` with `bytes`.
void cycle(attribution::Attributor& a, std::uint64_t conn, std::string_view peer,
           std::uint64_t request, std::uint64_t answer, std::uint64_t bytes) {
  a.on_opaque_open(conn, peer, request);
  attribution::OpaqueCycle c;
  c.connection = conn;
  c.request_ns = request;
  c.response_start_ns = answer;
  c.response_end_ns = answer;
  c.response_bytes = bytes;
  a.on_opaque_cycle(c);
}

}  // namespace

TEST_CASE(
    "a read goes to the opaque connection whose cycle was open across it, not to a long poll") {
  RecordingSink sink;
  attribution::Attributor a(sink, nullptr);
  a.on_opaque_open(3, "10.0.0.3", ms(50));  // the tail's long poll, open across everything
  a.on_opaque_open(1, "10.0.0.1", ms(100));
  a.on_object_read(get(31, ms(200), ms(300), "orders", 0, 512 << 10, 0));
  a.on_object_read(get(31, ms(310), ms(400), "orders", 0, 512 << 10, 512 << 10));
  attribution::OpaqueCycle scan{1, ms(100), ms(420), ms(430), 1 << 20};
  a.on_opaque_cycle(scan);
  a.expire(ms(1000));
  CHECK(sink.reads.empty());  // the long poll is not answered yet: its size may still matter
  attribution::OpaqueCycle poll{3, ms(50), ms(1200), ms(1200), 2048};
  a.on_opaque_cycle(poll);
  a.expire(ms(1300));
  REQUIRE(sink.reads.size() == 2);
  for (const auto& r : sink.reads) {
    CHECK(r.client == "peer:10.0.0.1");
    CHECK(r.peer == "10.0.0.1");
    CHECK(r.topic == "orders");
    CHECK(r.method == Method::kEstimated);
  }
  CHECK(a.counters().reads_opaque_peer == 2);
}

TEST_CASE("readable fetches take their reads first, exactly") {
  RecordingSink sink;
  attribution::Attributor a(sink, nullptr);
  a.on_opaque_open(1, "10.0.0.1", ms(100));
  kafka::Exchange x;
  x.connection = 5;
  x.correlation_id = 1;
  x.client_id = "readable";
  x.api_key = kafka::api::kFetch;
  x.api_version = 11;
  x.body_decoded = true;
  x.request_time_ns = ms(150);
  x.fetch.replica_id = -1;
  x.fetch.topics.push_back({"orders", {}});
  kafka::FetchPartition p;
  p.partition = 0;
  p.fetch_offset = 10;
  p.partition_max_bytes = 1 << 20;
  p.in_request = true;
  x.fetch.partitions.push_back(p);
  a.on_request(x);
  a.on_object_read(get(31, ms(200), ms(300), "orders", 0, 64 << 10));
  a.on_object_read(get(32, ms(210), ms(310), "orders", 1, 64 << 10));  // no readable fetch
  cycle(a, 1, "10.0.0.1", ms(100), ms(400), 70 << 10);
  a.expire(~0ull);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "readable");
  CHECK(sink.reads[0].method == Method::kExact);
  CHECK(sink.reads[1].client == "peer:10.0.0.1");
}

TEST_CASE("several cycles open: the answer that carried the bytes, then the partition's reader") {
  RecordingSink sink;
  attribution::Attributor a(sink, nullptr);
  // Two scanners: A's fetch read 64 KiB of p0, B's 1 MiB of p1; both open across both reads.
  a.on_opaque_open(1, "10.0.0.1", ms(100));
  a.on_opaque_open(2, "10.0.0.2", ms(100));
  a.on_object_read(get(31, ms(200), ms(250), "scan", 0, 64 << 10, 0));
  for (int i = 0; i < 4; ++i)  // one task: consecutive ranges on one thread
    a.on_object_read(get(32, ms(210 + 10 * i), ms(218 + 10 * i), "scan", 1, 256 << 10,
                         std::int64_t{i} * (256 << 10)));
  cycle(a, 1, "10.0.0.1", ms(100), ms(300), 70 << 10);
  cycle(a, 2, "10.0.0.2", ms(100), ms(300), 1100 << 10);
  a.expire(ms(700));
  CHECK(sink.bytes()["peer:10.0.0.1"] == (64u << 10));
  CHECK(sink.bytes()["peer:10.0.0.2"] == (1024u << 10));
  // Next fetches, answered with the same sizes: who read p1 before reads it on.
  a.on_opaque_open(1, "10.0.0.1", ms(800));
  a.on_opaque_open(2, "10.0.0.2", ms(800));
  a.on_object_read(get(33, ms(900), ms(950), "scan", 1, 512 << 10, 1024 << 10));
  cycle(a, 1, "10.0.0.1", ms(800), ms(1000), 600 << 10);
  cycle(a, 2, "10.0.0.2", ms(800), ms(1000), 600 << 10);
  a.expire(ms(1400));
  CHECK(sink.bytes()["peer:10.0.0.2"] == (1536u << 10));
  CHECK(sink.bytes()["peer:10.0.0.1"] == (64u << 10));
}

TEST_CASE(
    "the partitions' readers take their reads first; a new partition gets what room is left") {
  // Two scanners' fetches arrive together, each answered with one remote read's bytes. B starts
  // on a partition no one read yet; A reads on a partition A read before. B's read starts first,
  // A's fetch came first and A's answer is the closer in size: only A's own read, decided first,
  // rules A out.
  RecordingSink sink;
  attribution::Attributor a(sink, nullptr);
  a.on_opaque_open(1, "10.0.0.1", ms(100));
  a.on_object_read(get(31, ms(200), ms(250), "scan-a", 0, 128 << 10, 0));
  cycle(a, 1, "10.0.0.1", ms(100), ms(300), 128 << 10);
  a.expire(ms(700));
  REQUIRE(sink.bytes()["peer:10.0.0.1"] == (128u << 10));
  a.on_opaque_open(1, "10.0.0.1", ms(1000));
  a.on_opaque_open(2, "10.0.0.2", ms(1001));
  bool long_poll = false;
  SUBCASE("both reads ready at once") {}
  SUBCASE("A's read held by a long poll opened after B's read started") {
    a.on_opaque_open(3, "10.0.0.3", ms(1003));
    long_poll = true;
  }
  for (int i = 0; i < 2; ++i) {  // one task each: consecutive ranges on one thread
    a.on_object_read(get(33, ms(1002 + 20 * i), ms(1012 + 20 * i), "scan-b", 0, 64 << 10,
                         std::int64_t{i} * (64 << 10)));
    a.on_object_read(get(32, ms(1005 + 20 * i), ms(1015 + 20 * i), "scan-a", 0, 64 << 10,
                         (128 << 10) + std::int64_t{i} * (64 << 10)));
  }
  cycle(a, 1, "10.0.0.1", ms(1000), ms(1100), 129 << 10);
  cycle(a, 2, "10.0.0.2", ms(1001), ms(1100), 125 << 10);
  a.expire(ms(1500));
  if (long_poll) {
    CHECK(sink.reads.size() == 1);  // B's read waits for A's: A's may take room it would weigh
    cycle(a, 3, "10.0.0.3", ms(1003), ms(1600), 2048);
    a.expire(ms(2000));
  }
  REQUIRE(sink.reads.size() == 5);
  CHECK(sink.bytes()["peer:10.0.0.1"] == (256u << 10));
  CHECK(sink.bytes()["peer:10.0.0.2"] == (128u << 10));
  for (std::size_t i = 1; i < sink.reads.size(); ++i)  // decided in start order
    CHECK(sink.reads[i].topic == (i % 2 == 1 ? "scan-b" : "scan-a"));
}

TEST_CASE("answers alike in size: a new partition's read goes to the fetch that came first") {
  // The reader pool takes fetches in the order they came; estimated answer sizes differ by a few
  // hundred bytes whoever read what. An answer over twice the task's bytes is not alike.
  RecordingSink sink;
  attribution::Attributor a(sink, nullptr);
  a.on_opaque_open(1, "10.0.0.1", ms(100));
  a.on_opaque_open(2, "10.0.0.2", ms(101));
  a.on_object_read(get(31, ms(102), ms(150), "scan-a", 0, 128 << 10, 0));
  std::string expected;
  SUBCASE("the later fetch's answer is the closer in size") {
    cycle(a, 1, "10.0.0.1", ms(100), ms(200), (128 << 10) - 400);
    cycle(a, 2, "10.0.0.2", ms(101), ms(200), (128 << 10) + 20);
    expected = "peer:10.0.0.1";
  }
  SUBCASE("the first fetch's answer is not alike") {
    cycle(a, 1, "10.0.0.1", ms(100), ms(200), 300 << 10);
    cycle(a, 2, "10.0.0.2", ms(101), ms(200), (128 << 10) + 20);
    expected = "peer:10.0.0.2";
  }
  a.expire(~0ull);
  REQUIRE(sink.reads.size() == 1);
  CHECK(sink.reads[0].client == expected);
}

TEST_CASE("no cycle that carried the read: unattributed, never a peer that made no remote read") {
  RecordingSink sink;
  attribution::Attributor a(sink, nullptr);
  a.on_opaque_open(3, "10.0.0.3", ms(50));   // long poll answered with a few local records
  a.on_opaque_open(1, "10.0.0.1", ms(100));  // answered before the read ended
  a.on_object_read(get(31, ms(200), ms(300), "orders", 0, 256 << 10));
  cycle(a, 1, "10.0.0.1", ms(100), ms(250), 1 << 20);
  attribution::OpaqueCycle poll{3, ms(50), ms(600), ms(600), 6000};
  a.on_opaque_cycle(poll);
  a.on_opaque_open(4, "10.0.0.4", ms(700));  // opened after the read started
  cycle(a, 4, "10.0.0.4", ms(700), ms(800), 1 << 20);
  a.expire(~0ull);
  REQUIRE(sink.reads.size() == 1);
  CHECK(sink.reads[0].client == attribution::kUnattributed);
  CHECK(sink.reads[0].topic == "orders");
  CHECK(sink.reads[0].bytes == (256u << 10));
  CHECK(a.counters().reads_unattributed == 1);
}

TEST_CASE("a long poll never answered holds a read only opaque_hold_ns") {
  RecordingSink sink;
  attribution::Attributor a(sink, nullptr);
  a.on_opaque_open(3, "10.0.0.3", ms(50));
  a.on_object_read(get(31, ms(200), ms(300), "orders", 0, 256 << 10));
  a.expire(ms(2000));
  CHECK(sink.reads.empty());
  a.expire(ms(300) + attribution::Options{}.opaque_hold_ns);
  REQUIRE(sink.reads.size() == 1);
  CHECK(sink.reads[0].client == attribution::kUnattributed);
}

TEST_CASE("a connection found readable after all gives no peer identity") {
  RecordingSink sink;
  attribution::Attributor a(sink, nullptr);
  a.on_opaque_open(1, "10.0.0.1", ms(100));
  a.on_object_read(get(31, ms(200), ms(300), "orders", 0, 64 << 10));
  a.forget_opaque(1);
  a.expire(~0ull);
  REQUIRE(sink.reads.size() == 1);
  CHECK(sink.reads[0].client == attribution::kUnattributed);
}

TEST_CASE("an opaque connection of another broker process never takes a read") {
  RecordingSink sink;
  attribution::Attributor a(sink, nullptr);
  a.on_opaque_open(1, "10.0.0.1", ms(100), /*process=*/100);
  attribution::OpaqueCycle c{1, ms(100), ms(400), ms(400), 1 << 20};
  a.on_opaque_cycle(c);
  auto read = get(31, ms(200), ms(300), "orders", 0, 64 << 10);
  read.process = 200;
  a.on_object_read(read);
  a.expire(~0ull);
  REQUIRE(sink.reads.size() == 1);
  CHECK(sink.reads[0].client == attribution::kUnattributed);
}
