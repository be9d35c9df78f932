// Attribution rules on hand-built scenarios: which fetch each object read belongs to.
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

struct Recorded {
  std::string client;
  std::string topic;
  std::int32_t partition;
  std::uint64_t bytes;
  bool error;
  Method method;
};

struct RecordingSink : attribution::Sink {
  std::vector<Recorded> reads;
  std::vector<attribution::FetchDone> done;
  std::vector<std::string> done_clients;
  void on_attributed(const attribution::Attributed& a) override {
    reads.push_back({std::string(a.client_id), std::string(a.topic), a.partition, a.body_bytes,
                     a.error, a.method});
  }
  void on_fetch_done(const attribution::FetchDone& d) override {
    done.push_back(d);
    done_clients.emplace_back(d.client_id);
  }
  std::map<std::string, std::uint64_t> bytes_by_client() const {
    std::map<std::string, std::uint64_t> m;
    for (const auto& r : reads) m[r.client] += r.bytes;
    return m;
  }
};

struct FixedTier : attribution::LocalTier {
  std::map<std::pair<std::string, std::int32_t>, std::int64_t> starts;
  std::optional<std::int64_t> local_log_start(std::string_view topic,
                                              std::int32_t partition) const override {
    auto it = starts.find({std::string(topic), partition});
    if (it == starts.end()) return std::nullopt;
    return it->second;
  }
};

kafka::Exchange fetch(std::uint64_t conn, std::int32_t corr, std::string client, std::uint64_t t,
                      std::vector<std::tuple<std::string, std::int32_t, std::int64_t>> parts) {
  kafka::Exchange x;
  x.connection = conn;
  x.correlation_id = corr;
  x.client_id = std::move(client);
  x.api_key = kafka::api::kFetch;
  x.api_version = 11;
  x.body_decoded = true;
  x.request_time_ns = t;
  x.fetch.replica_id = -1;
  for (auto& [topic, partition, offset] : parts) {
    std::uint32_t index = 0;
    while (index < x.fetch.topics.size() && x.fetch.topics[index].name != topic) ++index;
    if (index == x.fetch.topics.size()) x.fetch.topics.push_back({topic, {}});
    kafka::FetchPartition p;
    p.topic_index = index;
    p.partition = partition;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    p.in_request = true;
    x.fetch.partitions.push_back(p);
  }
  return x;
}

kafka::Exchange respond(kafka::Exchange x, std::uint64_t t, std::int64_t records_size) {
  x.response_seen = true;
  x.response_start_ns = t;
  x.response_end_ns = t;
  for (auto& p : x.fetch.partitions) {
    p.in_response = true;
    p.records_size = records_size;
  }
  return x;
}

// Two fetches of partition t/3 at one offset, "a" then "b", both received: only time tells
// their GETs apart.
struct TwoFetches {
  kafka::Exchange a, b;
};
TwoFetches receive_two_fetches(attribution::Attributor& attributor) {
  TwoFetches f{fetch(1, 1, "a", 100, {{"t", 3, 10}}), fetch(2, 1, "b", 110, {{"t", 3, 10}})};
  attributor.on_request(f.a);
  attributor.on_request(f.b);
  return f;
}

ObjectRead get(std::uint32_t tid, std::uint64_t start, std::uint64_t end, std::string_view topic,
               std::int32_t partition, std::int64_t base, std::uint64_t bytes, int status = 206) {
  ObjectRead r = fc::testing::object_read(900, tid, start, end, status, bytes);
  r.topic = topic;
  r.partition = partition;
  r.segment_base_offset = base;
  return r;
}

// Fetches received by another broker process (7) than the GETs made by get_of_process_1, before
// the fetches under test: they wait at the front of their partition's list of open fetches and
// take none of those GETs, so fetches answered behind them stay listed there, answered (as long
// as they are fewer than half of it), until they finish (attribution's lazy removal).
void receive_other_broker_fetches(attribution::Attributor& attributor, const std::string& topic,
                                  std::int32_t partition, std::uint64_t t) {
  attributor.set_process(99, 7);
  for (std::int32_t correlation = 1; correlation <= 3; ++correlation)
    attributor.on_request(fetch(99, correlation, "other-broker", t, {{topic, partition, 10}}));
}

ObjectRead get_of_process_1(std::uint32_t tid, std::uint64_t start, std::uint64_t end,
                            std::string_view topic, std::int32_t partition, std::int64_t base,
                            std::uint64_t bytes) {
  ObjectRead r = get(tid, start, end, topic, partition, base, bytes);
  r.process = 1;
  return r;
}

}  // namespace

TEST_CASE("GETs on a reader thread go to the pending fetch for that partition until it answers") {
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"orders", 0}] = 5000;
  attribution::Attributor attributor(sink, &tier);

  auto scanner = fetch(1, 7, "scanner", 100, {{"orders", 0, 120}});
  auto tailer = fetch(2, 9, "tailer", 110, {{"orders", 0, 5100}});  // local: not remote
  attributor.on_request(scanner);
  attributor.on_request(tailer);
  CHECK(attributor.pending() == 1);

  attributor.on_object_read(get(31, 200, 300, "orders", 0, 0, 4 << 20));
  attributor.on_object_read(get(31, 310, 400, "orders", 0, 0, 1 << 20));
  attributor.on_exchange(respond(tailer, 150, 4096));
  attributor.on_exchange(respond(scanner, 500, 1 << 20));

  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "scanner");
  CHECK(sink.reads[1].client == "scanner");
  CHECK(sink.bytes_by_client()["scanner"] == (5u << 20));
  CHECK(sink.done.empty());  // answered fetches are kept a while for reads known late
  attributor.expire(500 + attribution::Options{}.answered_retain_ns + 1);
  REQUIRE(sink.done.size() == 1);
  CHECK(sink.done_clients[0] == "scanner");
  CHECK(sink.done[0].object_reads == 2);
  CHECK(sink.done[0].object_bytes == (5u << 20));
  CHECK(sink.done[0].bytes_delivered == (1u << 20));
  CHECK(sink.done[0].remote_latency_seconds == doctest::Approx(300e-9));
  CHECK(attributor.pending() == 0);
}

TEST_CASE("a GET with no pending fetch is unattributed; a failed GET adds no bytes") {
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  attributor.on_object_read(get(31, 200, 300, "orders", 0, 0, 4096));
  auto f = fetch(1, 1, "reader", 400, {{"orders", 0, 10}});
  attributor.on_request(f);
  attributor.on_object_read(get(31, 450, 460, "orders", 0, 0, 999, 503));
  attributor.on_object_read(get(31, 300, 310, "orders", 0, 0, 77));  // started before the request
  attributor.expire(~0ull);  // failed GETs are decided once the answers around them are known

  REQUIRE(sink.reads.size() == 3);
  CHECK(sink.reads[0].client == attribution::kUnattributed);
  CHECK(sink.reads[0].bytes == 4096);
  CHECK(sink.reads[1].client == attribution::kUnattributed);  // started before the request
  CHECK(sink.reads[2].client == "reader");
  CHECK(sink.reads[2].error);
  CHECK(sink.reads[2].bytes == 0);
  CHECK(attributor.counters().reads_unattributed == 2);
}

TEST_CASE(
    "concurrent fetches of one partition: oldest first, a fetch already being read is skipped") {
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  attributor.on_request(fetch(1, 1, "a", 100, {{"t", 3, 10}}));
  attributor.on_request(fetch(2, 1, "b", 110, {{"t", 3, 20}}));
  attributor.on_object_read(get(41, 200, 250, "t", 3, 0, 10));  // thread 41 takes a
  attributor.on_object_read(get(42, 210, 260, "t", 3, 0, 20));  // thread 42: a is busy → b
  attributor.on_object_read(get(41, 260, 270, "t", 3, 0, 30));  // thread 41 stays with a
  auto bytes = sink.bytes_by_client();
  CHECK(bytes["a"] == 40);
  CHECK(bytes["b"] == 20);
}

TEST_CASE("GETs are matched in the order they start, whatever order they complete in") {
  // Reader threads take queued fetches oldest first. Thread 41 starts a GET for "a" before "b"
  // arrives; thread 42 starts b's after, and completes first. Matched at completion, b's GET would
  // take "a" (the oldest fetch no thread read), and a's GET, started before "b" arrived, would go
  // to "a" a second time.
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  attributor.on_request(fetch(1, 1, "a", 100, {{"t", 3, 10}}));
  const ObjectRead for_a = get(41, 120, 300, "t", 3, 0, 10);
  attributor.on_object_request(for_a);
  attributor.on_request(fetch(2, 1, "b", 150, {{"t", 3, 10}}));
  const ObjectRead for_b = get(42, 160, 200, "t", 3, 0, 20);
  attributor.on_object_request(for_b);
  attributor.on_object_read(for_b);
  attributor.on_object_read(for_a);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "b");
  CHECK(sink.reads[1].client == "a");
  auto bytes = sink.bytes_by_client();
  CHECK(bytes["a"] == 10);
  CHECK(bytes["b"] == 20);
}

TEST_CASE("a GET whose fetch was answered by the GET it crossed with keeps its match") {
  // The broker's request handlers may queue two fetches in the other order than they arrived:
  // the first GET, matched to "a" at its start, carried b's data, and the second (matched to "b")
  // a's, so "a" was answered while its own match was still running and with no GET counted.
  // Each client got one GET's data: matching the first again would give "b" both.
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  const auto a = receive_two_fetches(attributor).a;
  const ObjectRead first = get(41, 120, 300, "t", 3, 0, 10);   // matched to "a" at its start
  const ObjectRead second = get(42, 130, 200, "t", 3, 0, 20);  // matched to "b" at its start
  attributor.on_object_request(first);
  attributor.on_object_request(second);
  attributor.on_object_read(second);
  attributor.on_exchange(respond(a, 210, 20));
  attributor.on_object_read(first);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "b");
  CHECK(sink.reads[1].client == "a");
  CHECK(attributor.counters().reads_unattributed == 0);
}

TEST_CASE("a GET whose fetch was answered with remote data no GET brought is matched again") {
  // "a" was answered from a cache in the broker's storage plugin: no other fetch waits with a
  // GET that crossed this one, so the GET matched to "a" at its start was b's.
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  const auto a = receive_two_fetches(attributor).a;
  const ObjectRead for_b = get(41, 120, 300, "t", 3, 0, 10);  // matched to "a" at its start
  attributor.on_object_request(for_b);
  attributor.on_exchange(respond(a, 210, 20));
  attributor.on_object_read(for_b);
  REQUIRE(sink.reads.size() == 1);
  CHECK(sink.reads[0].client == "b");
}

TEST_CASE("an answered fetch still listed behind an older open one is no GET's crossing partner") {
  // As above, with "c" before "a" and "b": c's GET completed and c was answered, but fetches of
  // another broker, older, still wait, so c stays in the partition's list of open fetches. It
  // is answered: no fetch waits with a GET counted that crossed the running one, which goes to b.
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  receive_other_broker_fetches(attributor, "t", 3, 40);
  const auto c = fetch(3, 1, "c", 50, {{"t", 3, 10}});
  attributor.on_request(c);
  attributor.on_object_read(get_of_process_1(40, 60, 70, "t", 3, 0, 5));
  attributor.on_exchange(respond(c, 80, 5));
  const auto a = receive_two_fetches(attributor).a;
  const ObjectRead for_b = get_of_process_1(41, 120, 300, "t", 3, 0, 10);  // matched to "a"
  attributor.on_object_request(for_b);
  attributor.on_exchange(respond(a, 210, 20));
  attributor.on_object_read(for_b);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "c");
  CHECK(sink.reads[1].client == "b");
}

TEST_CASE("a GET whose fetch was answered with another GET counted for it is matched again") {
  // "a" already had a GET counted when it was answered: the data it carried was that GET's, so
  // the one still running when the answer went out is another fetch's ("b", still open to it).
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  const auto a = receive_two_fetches(attributor).a;
  const ObjectRead counted = get(43, 115, 118, "t", 3, 0, 5);  // "a"'s, complete
  attributor.on_object_request(counted);
  attributor.on_object_read(counted);
  const ObjectRead late = get(43, 120, 300, "t", 3, 0, 10);  // its thread's task: "a"
  attributor.on_object_request(late);
  attributor.on_exchange(respond(a, 210, 20));
  attributor.on_object_read(late);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "a");
  CHECK(sink.reads[1].client == "b");
}

TEST_CASE("a GET no fetch can take goes to the fetch answered with remote data during it") {
  // "b" was answered with remote data while its GET still ran, and with none counted: the
  // broker's handlers queued the two fetches' reads crossed. No open fetch is left for the GET,
  // so it goes to the answer that carried its data rather than to no one.
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  const auto fetches = receive_two_fetches(attributor);
  const ObjectRead first = get(41, 120, 130, "t", 3, 0, 10);   // matched to "a" at its start
  const ObjectRead second = get(42, 125, 200, "t", 3, 0, 20);  // matched to "b" at its start
  attributor.on_object_request(first);
  attributor.on_object_request(second);
  attributor.on_object_read(first);
  attributor.on_exchange(respond(fetches.a, 140, 10));
  attributor.on_exchange(respond(fetches.b, 150, 20));
  attributor.on_object_read(second);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "a");
  CHECK(sink.reads[1].client == "b");
  CHECK(attributor.counters().reads_unattributed == 0);
}

TEST_CASE("a GET no fetch can take, while one waits with a GET counted: the unread answer's") {
  // Many fetches of one segment at once: the broker's threads took their tasks in another order
  // than their GETs were matched. "y" was answered with remote data and no GET counted (its data
  // was the GET counted for "x"), and "x", its task ended, still waits: the next GET of the
  // segment, which no fetch can take, is x's data, and goes to "y", so each has one.
  bool x_answered = false, behind_other_broker = false;
  SUBCASE("x waits") {}
  SUBCASE("x was answered too: no fetch waits, and nothing says whose GET it is") {
    x_answered = true;
  }
  // Answered behind them, x and y stay in the partition's list of open fetches: x is still no
  // waiting fetch.
  SUBCASE("the same, with fetches of another broker received first") {
    x_answered = behind_other_broker = true;
  }
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"t", 0}] = 1'000'000;
  tier.starts[{"t", 1}] = 1'000'000;
  attribution::Attributor attributor(sink, &tier);
  if (behind_other_broker) receive_other_broker_fetches(attributor, "t", 0, 90);
  const auto x = fetch(1, 1, "x", 100, {{"t", 0, 150}});
  const auto y = fetch(2, 1, "y", 105, {{"t", 0, 150}});
  attributor.on_request(x);
  attributor.on_request(y);
  attributor.on_request(fetch(3, 1, "z", 106, {{"t", 1, 10}}));
  const ObjectRead counted = get_of_process_1(41, 110, 120, "t", 0, 100, 10);  // matched to "x"
  attributor.on_object_request(counted);
  attributor.on_object_read(counted);
  attributor.on_exchange(respond(y, 126, 10));
  const ObjectRead other = get_of_process_1(41, 127, 128, "t", 1, 0, 5);  // x's task ends
  attributor.on_object_request(other);
  attributor.on_object_read(other);
  if (x_answered) attributor.on_exchange(respond(x, 129, 10));
  const ObjectRead late = get_of_process_1(42, 130, 140, "t", 0, 100, 20);
  attributor.on_object_request(late);
  attributor.on_object_read(late);
  if (!x_answered) {
    CHECK(sink.bytes_by_client() ==
          std::map<std::string, std::uint64_t>{{"x", 10}, {"y", 20}, {"z", 5}});
    CHECK(attributor.counters().reads_unattributed == 0);
  } else {
    CHECK(sink.bytes_by_client() ==
          std::map<std::string, std::uint64_t>{
              {"x", 10}, {"z", 5}, {std::string(attribution::kUnattributed), 20}});
    CHECK(attributor.counters().reads_unattributed == 1);
  }
}

TEST_CASE("a failed GET gives back the fetch it was matched to at its start") {
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  receive_two_fetches(attributor);
  const ObjectRead failed = get(41, 120, 130, "t", 3, 0, 0, 503);
  attributor.on_object_request(failed);
  attributor.on_object_read(failed);
  // Thread 42's GET, started later, finds "a" read by no thread again: the oldest, it takes it.
  const ObjectRead retry = get(42, 140, 200, "t", 3, 0, 10);
  attributor.on_object_request(retry);
  attributor.on_object_read(retry);
  REQUIRE(!sink.reads.empty());
  CHECK(sink.reads.back().client == "a");
}

TEST_CASE("a GET retried on a new connection keeps the fetch its first attempt was matched to") {
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  receive_two_fetches(attributor);
  ObjectRead attempt = get(41, 120, 0, "t", 3, 0, 0);  // matched to "a"; its connection was stale
  attempt.range_first = 0;
  attempt.range_last = 99;
  attributor.on_object_request(attempt);
  ObjectRead retry = get(41, 130, 200, "t", 3, 0, 100);
  retry.connection = 901;
  retry.range_first = 0;
  retry.range_last = 99;
  attributor.on_object_request(retry);
  const ObjectRead other = get(42, 140, 210, "t", 3, 0, 50);  // "a" is being read: "b"
  attributor.on_object_request(other);
  attributor.on_object_read(other);
  attributor.on_object_read(retry);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "b");
  CHECK(sink.reads[1].client == "a");
}

TEST_CASE("a GET in a later segment than the fetch offset is not the fetch's") {
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  attributor.on_request(fetch(1, 1, "early", 100, {{"t", 0, 50}}));
  attributor.on_request(fetch(2, 1, "late", 110, {{"t", 0, 9000}}));
  attributor.on_object_read(get(41, 200, 250, "t", 0, 8000, 10));
  CHECK(sink.bytes_by_client()["late"] == 10);
  CHECK(sink.bytes_by_client().count("early") == 0);
}

TEST_CASE(
    "without a tier, a GET goes to the fetch nearest its segment, not an older one at the end") {
  // No log dirs known: a consumer waiting at the log's end is a candidate for the partition's
  // GETs too, and its fetch, waiting for new records, is older than the replaying consumer's.
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  attributor.on_request(fetch(1, 1, "tail", 100, {{"t", 0, 2'000'000}}));
  attributor.on_request(fetch(2, 1, "replay", 110, {{"t", 0, 1'000}}));
  attributor.on_request(fetch(3, 1, "tail-2", 120, {{"t", 0, 2'000'000}}));
  attributor.on_object_read(get(41, 200, 250, "t", 0, 900, 10));
  CHECK(sink.bytes_by_client() == std::map<std::string, std::uint64_t>{{"replay", 10}});

  // A GET whose key names no segment: no offset to go by, the oldest as before.
  attributor.on_request(fetch(4, 1, "replay-2", 130, {{"t", 0, 1'000}}));
  attributor.on_object_read(get(42, 260, 280, "t", 0, -1, 20));
  CHECK(sink.bytes_by_client()["tail"] == 20);
  CHECK(sink.bytes_by_client().count("replay-2") == 0);

  // With a tier that knows the partition both fetches below its local start are remote, and no
  // GET has named a later segment: as two readers of one segment, oldest first (the broker's
  // reader pool is a FIFO queue).
  RecordingSink known_sink;
  FixedTier tier;
  tier.starts[{"t", 0}] = 1'500'000;
  attribution::Attributor known(known_sink, &tier);
  known.on_request(fetch(1, 1, "older", 100, {{"t", 0, 5'000}}));
  known.on_request(fetch(2, 1, "newer", 110, {{"t", 0, 1'000}}));
  known.on_object_read(get(41, 200, 250, "t", 0, 900, 10));
  CHECK(known_sink.bytes_by_client() == std::map<std::string, std::uint64_t>{{"older", 10}});
}

TEST_CASE("a fetch past a segment a GET has named takes no GET of an earlier segment") {
  // Two consumers replay one partition from the remote tier at once, in different segments. A
  // fetch reads the segment its offset is in, or a later one: once a GET has named segment 4900,
  // a fetch at 5000 cannot be the one reading segment 900, though it is the oldest.
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"t", 0}] = 1'000'000;
  attribution::Attributor attributor(sink, &tier);
  attributor.on_request(fetch(1, 1, "b", 100, {{"t", 0, 4'950}}));
  attributor.on_object_read(get(41, 110, 150, "t", 0, 4'900, 5));  // names segment 4900
  attributor.on_exchange(respond(fetch(1, 1, "b", 100, {{"t", 0, 4'950}}), 160, 5));
  attributor.on_request(fetch(1, 2, "b", 200, {{"t", 0, 5'000}}));
  attributor.on_request(fetch(2, 1, "a", 210, {{"t", 0, 1'000}}));
  attributor.on_object_read(get(42, 300, 350, "t", 0, 900, 10));
  attributor.on_object_read(get(43, 310, 360, "t", 0, 4'900, 20));
  CHECK(sink.bytes_by_client() == std::map<std::string, std::uint64_t>{{"a", 10}, {"b", 25}});

  // Many segments named (more than are kept per partition, in both orders): the highest are
  // kept, and still keep a fetch past them from the GET.
  RecordingSink many_sink;
  attribution::Attributor many(many_sink, &tier);
  for (std::int64_t i = 0; i < 600; ++i) {
    many.on_object_read(get(44, 10 + 2 * i, 11 + 2 * i, "t", 0, (599 - i) * 100, 1));
    many.on_object_read(get(44, 2000 + 2 * i, 2001 + 2 * i, "t", 0, i * 100 + 50, 1));
  }
  many.on_request(fetch(1, 1, "past", 5000, {{"t", 0, 59'960}}));
  many.on_request(fetch(2, 1, "in", 5010, {{"t", 0, 59'910}}));
  many.on_object_read(get(45, 5100, 5150, "t", 0, 59'900, 10));
  CHECK(many_sink.bytes_by_client()["in"] == 10);
  CHECK(many_sink.bytes_by_client().count("past") == 0);
  // Where no GET has named a later segment, the oldest goes first: the case before this one.

  // A topic deleted and made again under its name (a new topic id in the keys) starts its
  // segments anew: the old topic's bases do not keep its fetches from their GETs.
  RecordingSink again_sink;
  attribution::Attributor again(again_sink, &tier);
  auto with_id = [](ObjectRead r, std::string_view id) {
    r.topic_id = id;
    return r;
  };
  again.on_object_read(with_id(get(46, 10, 20, "t", 0, 1'000, 1), "old-id"));
  again.on_request(fetch(1, 1, "c", 100, {{"t", 0, 1'100}}));
  again.on_object_read(with_id(get(47, 110, 150, "t", 0, 130, 10), "new-id"));
  CHECK(again_sink.bytes_by_client()["c"] == 10);
}

TEST_CASE("estimated reads (no key) go FIFO to fetches that may read remotely") {
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"t", 0}] = 1000;
  attribution::Attributor attributor(sink, &tier);
  attributor.on_request(fetch(1, 1, "local", 90, {{"t", 0, 1500}}));
  attributor.on_request(fetch(2, 1, "first", 100, {{"t", 0, 10}}));
  attributor.on_request(fetch(3, 1, "second", 105, {{"t", 0, 20}}));
  ObjectRead r = fc::testing::object_read(0, 50, 200, 300, 200, 4000);
  r.method = Method::kEstimated;
  attributor.on_object_read(r);
  r.thread_id = 51;
  r.body_bytes = 3000;
  attributor.on_object_read(r);
  CHECK(sink.reads.empty());  // estimated reads wait until settled
  attributor.expire(300 + attribution::Options{}.estimate_settle_ns);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "first");
  CHECK(sink.reads[0].method == Method::kEstimated);
  CHECK(sink.reads[0].topic == "t");
  CHECK(sink.reads[1].client == "second");
}

TEST_CASE("closing a connection finishes its fetches; followers are never tracked") {
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  auto follower = fetch(5, 1, "broker-2", 100, {{"t", 0, 0}});
  follower.fetch.replica_id = 2;
  attributor.on_request(follower);
  CHECK(attributor.pending() == 0);
  attributor.on_request(fetch(6, 1, "c", 100, {{"t", 0, 0}}));
  attributor.on_object_read(get(41, 200, 250, "t", 0, 0, 10));
  attributor.close_connection(6, 1000);
  // The broker may still be reading for the departed client: its GETs stay the client's.
  attributor.on_object_read(get(41, 1100, 1200, "t", 0, 0, 5));
  CHECK(sink.bytes_by_client()["c"] == 15);
  attributor.expire(1000 + 29'000'000'000ull);
  CHECK(attributor.pending() == 1);
  attributor.expire(1000 + 31'000'000'000ull);
  CHECK(attributor.pending() == 0);
  REQUIRE(sink.done.size() == 1);
  CHECK_FALSE(sink.done[0].response_seen);
  CHECK(sink.done[0].object_reads == 2);
}

TEST_CASE("a fetch naming its topic by id (v13+) takes the name from the tier map or the key") {
  kafka::Uuid id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<std::uint8_t>(i + 1);
  const std::string id64 = id.to_base64();
  struct NamingTier : attribution::LocalTier {
    std::string id;
    std::optional<std::int64_t> local_log_start(std::string_view, std::int32_t) const override {
      return std::nullopt;
    }
    std::optional<std::string> topic_name(std::string_view topic_id) const override {
      if (topic_id == id) return std::string("named-by-tier");
      return std::nullopt;
    }
  } tier;
  tier.id = id64;

  for (bool with_tier : {true, false}) {
    RecordingSink sink;
    attribution::Attributor attributor(sink, with_tier ? &tier : nullptr);
    auto f = fetch(1, 1, "v13-client", 100, {{"", 0, 10}});
    f.fetch.topics[0].id = id;
    attributor.on_request(f);
    auto r = get(41, 200, 250, "named-by-key", 0, 0, 10);
    r.topic_id = id64;
    attributor.on_object_read(r);
    REQUIRE(sink.reads.size() == 1);
    CHECK(sink.reads[0].client == "v13-client");
    CHECK(sink.reads[0].topic == (with_tier ? "named-by-tier" : "named-by-key"));
  }
}

TEST_CASE("an unanswered fetch (client gone) keeps its GETs for the grace period") {
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  auto f = fetch(7, 3, "leaver", 100, {{"t", 1, 1040}});
  attributor.on_request(f);
  attributor.on_exchange(f);  // emitted by the decoder on close: response_seen == false
  CHECK(attributor.pending() == 1);
  attributor.on_object_read(get(41, 200, 250, "t", 1, 1040, 65536));
  CHECK(sink.bytes_by_client()["leaver"] == 65536);
}

namespace {

ObjectRead estimated(std::uint32_t tid, std::uint64_t start, std::uint64_t end,
                     std::uint64_t bytes) {
  ObjectRead r = fc::testing::object_read(901, tid, start, end, 200, bytes);
  r.method = Method::kEstimated;
  return r;
}

const std::uint64_t kSettle = attribution::Options{}.estimate_settle_ns;
const std::uint64_t kRetain = attribution::Options{}.answered_retain_ns;

}  // namespace

TEST_CASE("an opaque cycle known only after its fetch answered still goes to that fetch") {
  // The cycle of a GET on an opaque connection completes when the connection is reused or goes
  // quiet: typically after the fetch it served was answered and the next fetch arrived.
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"t", 0}] = 1000;
  attribution::Attributor attributor(sink, &tier);
  attributor.expect_estimates();
  const auto a = fetch(1, 1, "a", 100, {{"t", 0, 10}});
  const auto b = fetch(2, 1, "b", 320, {{"t", 0, 20}});
  attributor.on_request(a);
  attributor.on_exchange(respond(a, 310, 5000));  // its GET [200, 300] is not known yet
  attributor.on_request(b);
  attributor.on_object_read(estimated(50, 200, 300, 4000));  // a's, known late
  attributor.on_object_read(estimated(50, 400, 500, 3000));  // b's
  attributor.on_exchange(respond(b, 510, 2500));
  attributor.expire(500 + kSettle);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "a");
  CHECK(sink.reads[0].bytes == 4000);
  CHECK(sink.reads[0].method == Method::kEstimated);
  CHECK(sink.reads[1].client == "b");
  CHECK(sink.done.empty());  // answered fetches are kept for late cycles a while
  attributor.expire(510 + kRetain + 1);
  REQUIRE(sink.done.size() == 2);
  CHECK(sink.done_clients[0] == "a");
  CHECK(sink.done[0].object_bytes == 4000);
  CHECK(sink.done[0].bytes_delivered == 5000);
  CHECK(attributor.pending() == 0);
}

TEST_CASE("a failed GET known only after the answer goes to the fetch it started in") {
  // The broker gives up on a GET (connection closed, no response), answers the fetch with a
  // storage error, and the failure is seen later (the connection's close, the thread moving on).
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  const auto a = fetch(1, 1, "a", 100, {{"t", 0, 10}});
  attributor.on_request(a);
  attributor.on_object_read(get(50, 200, 300, "t", 0, 0, 4000));
  auto answer = respond(a, 410, 0);
  answer.fetch.partitions[0].error_code = 56;  // KAFKA_STORAGE_ERROR
  attributor.on_exchange(answer);
  attributor.on_object_read(get(50, 350, 450, "t", 0, 0, 0, /*status=*/0));  // started before
  attributor.on_object_read(get(50, 420, 500, "t", 0, 0, 100));  // started after: not a's
  attributor.expire(~0ull);
  REQUIRE(sink.reads.size() == 3);
  CHECK(sink.reads[1].client == "a");
  CHECK(sink.reads[1].error);
  CHECK(sink.reads[1].bytes == 0);
  CHECK(sink.reads[2].client == "__unattributed__");
}

TEST_CASE("answered_retain_ns = 0: an answered fetch finishes at once") {
  RecordingSink sink;
  attribution::Options options;
  options.answered_retain_ns = 0;
  attribution::Attributor attributor(sink, nullptr, options);
  const auto a = fetch(1, 1, "a", 100, {{"t", 0, 10}});
  attributor.on_request(a);
  attributor.on_object_read(get(50, 200, 300, "t", 0, 0, 4000));
  attributor.on_exchange(respond(a, 310, 5000));
  CHECK(sink.done.size() == 1);
  CHECK(attributor.pending() == 0);
}

TEST_CASE("a fetch answered without remote data takes no estimated read") {
  // Eligible by the tier map, but the broker answered it with nothing (offset at the high
  // watermark, budget spent…): it made no GET, and FIFO must not hand it the next one.
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"t", 0}] = 1000;
  attribution::Attributor attributor(sink, &tier);
  attributor.expect_estimates();
  const auto idle = fetch(1, 1, "idle", 100, {{"t", 0, 10}});
  const auto reader = fetch(2, 1, "reader", 110, {{"t", 0, 20}});
  attributor.on_request(idle);
  attributor.on_request(reader);
  attributor.on_exchange(respond(reader, 350, 4000));
  attributor.on_exchange(respond(idle, 400, 0));
  attributor.on_object_read(estimated(50, 200, 300, 4000));
  attributor.expire(300 + kSettle);
  REQUIRE(sink.reads.size() == 1);
  CHECK(sink.reads[0].client == "reader");
  CHECK(sink.bytes_by_client().count("idle") == 0);
}

TEST_CASE("an estimated read goes to the partition the broker read remotely") {
  // Kafka <= 4.1 reads one remote partition per fetch; the response shows which one got records.
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"t", 0}] = 1000;
  tier.starts[{"t", 1}] = 1000;
  attribution::Attributor attributor(sink, &tier);
  attributor.expect_estimates();
  auto x = fetch(1, 1, "c", 100, {{"t", 0, 10}, {"t", 1, 10}});
  attributor.on_request(x);
  auto answer = respond(x, 350, 0);
  answer.fetch.partitions[1].records_size = 3000;
  attributor.on_exchange(answer);
  attributor.on_object_read(estimated(50, 200, 300, 4000));
  attributor.expire(300 + kSettle);
  REQUIRE(sink.reads.size() == 1);
  CHECK(sink.reads[0].client == "c");
  CHECK(sink.reads[0].partition == 1);
  // Not answered yet when settled: the first eligible partition in request order.
  auto y = fetch(1, 2, "c", 1000, {{"t", 0, 10}, {"t", 1, 10}});
  attributor.on_request(y);
  attributor.on_object_read(estimated(50, 1100, 1200, 4000));
  attributor.expire(1200 + kSettle);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[1].partition == 0);
}

TEST_CASE("a response listing partitions in another order than its request answers each one") {
  // Each partition's answer is found whatever order the response lists them in, by name or (v13+,
  // no name known) by topic id: the read goes to the partition the response filled, and each
  // partition reports the bytes delivered for it.
  kafka::Uuid id;
  for (std::size_t i = 0; i < id.bytes.size(); ++i) id.bytes[i] = static_cast<std::uint8_t>(i + 7);
  for (bool by_id : {false, true}) {
    CAPTURE(by_id);
    RecordingSink sink;
    attribution::Attributor attributor(sink, nullptr);  // every partition possibly remote
    attributor.expect_estimates();
    auto x = fetch(1, 1, "c", 100, {{"t", 0, 10}, {"t", 1, 10}, {"t", 2, 10}, {"t", 3, 10}});
    if (by_id) {
      x.fetch.topics[0].name.clear();
      x.fetch.topics[0].id = id;
    }
    attributor.on_request(x);
    auto answer = respond(x, 350, 0);
    std::swap(answer.fetch.partitions[0], answer.fetch.partitions[1]);  // 1, 0, 2, 3
    std::swap(answer.fetch.partitions[2], answer.fetch.partitions[3]);  // 1, 0, 3, 2
    // Only partition 0 got records: the one found by looking back from the last match.
    for (auto& p : answer.fetch.partitions) p.records_size = p.partition == 0 ? 3000 : 0;
    attributor.on_exchange(answer);
    attributor.on_object_read(estimated(50, 200, 300, 4000));
    attributor.expire(~0ull);
    REQUIRE(sink.reads.size() == 1);
    CHECK(sink.reads[0].client == "c");
    CHECK(sink.reads[0].partition == 0);
    REQUIRE(sink.done.size() == 1);
    CHECK(sink.done[0].partition == 0);
    CHECK(sink.done[0].bytes_delivered == 3000);
  }
}

TEST_CASE("estimated reads are decided in start order, whatever order their cycles complete in") {
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"t", 0}] = 1000;
  attribution::Attributor attributor(sink, &tier);
  attributor.expect_estimates();
  attributor.on_request(fetch(1, 1, "first", 100, {{"t", 0, 10}}));
  attributor.on_request(fetch(2, 1, "second", 105, {{"t", 0, 20}}));
  // Thread 50 took the first fetch from the reader queue and started first, but its
  // connection's cycle completed after thread 51's.
  attributor.on_object_read(estimated(51, 210, 260, 3000));
  attributor.on_object_read(estimated(50, 200, 250, 4000));
  attributor.on_object_read(estimated(50, 255, 280, 500));  // first's second GET
  attributor.expire(280 + kSettle);
  REQUIRE(sink.reads.size() == 3);
  const auto by_client = sink.bytes_by_client();
  CHECK(by_client.at("first") == 4500);
  CHECK(by_client.at("second") == 3000);
}

TEST_CASE(
    "estimated reads with no fetch in their window stay unattributed, and settle at the end") {
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"t", 0}] = 1000;
  attribution::Attributor attributor(sink, &tier);
  attributor.expect_estimates();
  const auto a = fetch(1, 1, "a", 100, {{"t", 0, 10}});
  attributor.on_request(a);
  attributor.on_exchange(respond(a, 150, 4000));
  attributor.on_object_read(estimated(50, 200, 300, 4000));  // after a answered: not a's
  attributor.on_object_read(estimated(50, 50, 90, 4000));    // before a arrived: not a's
  CHECK(sink.reads.empty());
  attributor.expire(~0ull);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "__unattributed__");
  CHECK(sink.reads[1].client == "__unattributed__");
  CHECK(attributor.counters().reads_unattributed == 2);
}

TEST_CASE("Kafka <= 4.1 reads one partition of a fetch remotely: the first one below local start") {
  FixedTier tier;
  tier.starts[{"t", 0}] = 1000;
  tier.starts[{"t", 1}] = 1000;
  {
    RecordingSink sink;
    attribution::Attributor attributor(sink, &tier);
    // Both of this member's partitions are remote; the broker reads p0 for it, and p1 for the
    // scanner that asked for p1 alone (it came later, but p1 is its first remote partition).
    attributor.on_request(fetch(1, 1, "member", 100, {{"t", 0, 10}, {"t", 1, 10}}));
    attributor.on_request(fetch(2, 1, "scanner", 110, {{"t", 1, 10}}));
    attributor.on_object_read(get(41, 200, 250, "t", 0, 0, 100));
    attributor.on_object_read(get(42, 210, 260, "t", 1, 0, 200));
    auto bytes = sink.bytes_by_client();
    CHECK(bytes["member"] == 100);
    CHECK(bytes["scanner"] == 200);
  }
  {
    // Kafka 4.2 reads every remote partition of the fetch, on as many reader threads.
    RecordingSink sink;
    attribution::Options options;
    options.one_remote_partition_per_fetch = false;
    attribution::Attributor attributor(sink, &tier, options);
    attributor.on_request(fetch(1, 1, "member", 100, {{"t", 0, 10}, {"t", 1, 10}}));
    attributor.on_object_read(get(41, 200, 250, "t", 0, 0, 100));
    attributor.on_object_read(get(42, 210, 260, "t", 1, 0, 200));
    CHECK(sink.bytes_by_client()["member"] == 300);
  }
}

TEST_CASE("a reader thread's next task is a new fetch's, even before the last one answered") {
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  attributor.on_request(fetch(1, 1, "first", 100, {{"t", 0, 10}}));
  attributor.on_request(fetch(2, 1, "second", 110, {{"t", 0, 500}}));
  auto chunk = [&](std::uint64_t start, std::int64_t first, std::int64_t last, std::int64_t base) {
    auto r = get(41, start, start + 10, "t", 0, base, static_cast<std::uint64_t>(last - first + 1));
    r.range_first = first;
    r.range_last = last;
    attributor.on_object_read(r);
  };
  chunk(200, 0, 99, 0);  // first's task: chunks 0 and 1 of segment 0
  chunk(220, 100, 199, 0);
  chunk(240, 400, 499, 0);  // not the next chunk: thread 41 took its next task (second's)
  chunk(260, 500, 599, 0);
  auto bytes = sink.bytes_by_client();
  CHECK(bytes["first"] == 200);
  CHECK(bytes["second"] == 200);
}

TEST_CASE("a failed GET goes to the fetch answered with a storage error right after it") {
  // A client retrying a failed read without pause has a fetch in flight at every moment. Another
  // client's fetch of the same deleted segment arrived later, but a reader thread ran its GET
  // first: by arrival order the retrying client took it, and then its own GET too.
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  auto failed = [](kafka::Exchange x, std::uint64_t t) {
    x = respond(std::move(x), t, 0);
    for (auto& p : x.fetch.partitions) p.error_code = 56;  // KAFKA_STORAGE_ERROR
    return x;
  };
  const auto retrying = fetch(1, 1, "retrying", 100, {{"t", 0, 10}});
  const auto other = fetch(2, 1, "other", 110, {{"t", 0, 10}});
  attributor.on_request(retrying);
  attributor.on_request(other);
  attributor.on_object_read(get(42, 200, 210, "t", 0, 0, 0, 404));  // other's, on thread 42
  attributor.on_exchange(failed(other, 215));
  attributor.on_object_read(get(41, 300, 310, "t", 0, 0, 0, 404));  // retrying's, later
  attributor.on_exchange(failed(retrying, 315));
  const auto again = fetch(1, 2, "retrying", 320, {{"t", 0, 10}});
  attributor.on_request(again);
  attributor.on_object_read(get(41, 330, 340, "t", 0, 0, 0, 404));
  attributor.on_exchange(failed(again, 345));
  attributor.expire(~0ull);

  std::map<std::string, int> errors;
  for (const auto& r : sink.reads) errors[r.client] += r.error ? 1 : 0;
  CHECK(errors["retrying"] == 2);
  CHECK(errors["other"] == 1);
  CHECK(sink.reads.size() == 3);
}

TEST_CASE("a failed GET after a manifest on the same thread stays with that fetch's task") {
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  attributor.on_request(fetch(1, 1, "a", 100, {{"t", 0, 10}}));
  attributor.on_request(fetch(2, 1, "b", 110, {{"t", 0, 10}}));
  auto manifest = get(41, 200, 210, "t", 0, 0, 300, 200);
  attributor.on_object_read(manifest);                              // thread 41 takes a
  attributor.on_object_read(get(41, 215, 220, "t", 0, 0, 0, 404));  // its chunk fails: a's
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[1].client == "a");
  CHECK(sink.reads[1].error);
}

TEST_CASE("failed GETs ending together: each storage error gets one, whatever order they answer") {
  // b's GET ends first but a is answered first: the first answer after each GET would give a
  // both. Only a's GET started before b's request, so a must take it.
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  auto failed = [](kafka::Exchange x, std::uint64_t t) {
    x = respond(std::move(x), t, 0);
    for (auto& p : x.fetch.partitions) p.error_code = 56;
    return x;
  };
  const auto a = fetch(1, 40, "a", 1000, {{"t", 0, 0}});
  const auto b = fetch(2, 388, "b", 1200, {{"t", 0, 0}});
  attributor.on_request(a);
  attributor.on_object_read(get(39, 1005, 1380, "t", 0, 0, 0, 404));  // a's
  attributor.on_request(b);
  attributor.on_object_read(get(38, 1210, 1360, "t", 0, 0, 0, 404));  // b's, ends first
  attributor.on_exchange(failed(a, 1390));
  attributor.on_exchange(failed(b, 1391));
  attributor.expire(~0ull);
  std::map<std::string, int> errors;
  for (const auto& r : sink.reads) errors[r.client] += r.error ? 1 : 0;
  CHECK(errors["a"] == 1);
  CHECK(errors["b"] == 1);
}

TEST_CASE(
    "failed GETs that outlived remote.fetch.max.wait.ms go to the fetches answered without them") {
  // The object store stalls: fetches are answered without their remote data (no error) while
  // their GETs still run; the GETs then fail. Each goes to the fetch that was waiting for it.
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  const auto a1 = fetch(1, 1, "a", 1000, {{"t", 0, 0}});
  const auto s1 = fetch(2, 1, "s", 1200, {{"t", 0, 0}});
  const auto a2 = fetch(1, 2, "a", 1510, {{"t", 0, 0}});
  attributor.on_request(a1);
  attributor.on_request(s1);
  attributor.on_exchange(respond(a1, 1500, 0));  // timed out, no records, no error
  attributor.on_request(a2);
  attributor.on_exchange(respond(s1, 1700, 0));
  attributor.on_exchange(respond(a2, 2010, 0));
  attributor.on_object_read(get(71, 1001, 2200, "t", 0, 0, 0, 404));  // a1's
  attributor.on_object_read(get(72, 1201, 2300, "t", 0, 0, 0, 404));  // s1's
  attributor.on_object_read(get(73, 1511, 2310, "t", 0, 0, 0, 404));  // a2's
  attributor.expire(~0ull);
  std::map<std::string, int> errors;
  for (const auto& r : sink.reads) errors[r.client] += r.error ? 1 : 0;
  CHECK(errors["a"] == 2);
  CHECK(errors["s"] == 1);
}

TEST_CASE("a failed GET for a client that left goes to its unanswered fetch") {
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  auto failed = [](kafka::Exchange x, std::uint64_t t) {
    x = respond(std::move(x), t, 0);
    for (auto& p : x.fetch.partitions) p.error_code = 56;
    return x;
  };
  const auto a = fetch(1, 1, "a", 1000, {{"t", 0, 0}});
  const auto s = fetch(2, 1, "s", 1001, {{"t", 0, 0}});
  attributor.on_request(a);
  attributor.on_request(s);
  attributor.on_object_read(get(71, 1100, 1500, "t", 0, 0, 0, 404));
  attributor.on_object_read(get(72, 1101, 1501, "t", 0, 0, 0, 404));
  attributor.on_exchange(failed(a, 1502));
  attributor.close_connection(2, 1503);  // s left: its fetch is never answered
  attributor.expire(~0ull);
  std::map<std::string, int> errors;
  for (const auto& r : sink.reads) errors[r.client] += r.error ? 1 : 0;
  CHECK(errors["a"] == 1);
  CHECK(errors["s"] == 1);
}

TEST_CASE("a fetch answered without its remote data (max wait passed) keeps the rest of its read") {
  // A slow object store: the broker answers after remote.fetch.max.wait.ms without the remote
  // records, and its reader goes on reading the segment chunk by chunk. Those GETs are the
  // fetch's, as is the next fetch's GET that started before that answer.
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  auto chunk = [](std::uint32_t tid, std::uint64_t s, std::uint64_t e, std::int64_t first) {
    auto r = get(tid, s, e, "t", 1, 390, 65536);
    r.range_first = first;
    r.range_last = first + 65535;
    return r;
  };
  const auto f5 = fetch(1, 5, "a", 1000, {{"t", 1, 390}});
  attributor.on_request(f5);
  attributor.on_object_read(chunk(34, 1001, 1100, 0));
  attributor.on_exchange(respond(f5, 1500, 0));  // timed out: no records, no error
  const auto f6 = fetch(1, 6, "a", 1501, {{"t", 1, 390}});
  attributor.on_request(f6);
  attributor.on_object_read(chunk(34, 1101, 1600, 65536));   // f5's task, started before
  attributor.on_object_read(chunk(33, 1502, 2100, 0));       // f6's
  attributor.on_object_read(chunk(34, 1601, 1700, 131072));  // f5's task, after the answer
  attributor.on_exchange(respond(f6, 2000, 0));
  const auto other = fetch(2, 1, "b", 2050, {{"t", 1, 390}});
  attributor.on_request(other);
  attributor.on_object_read(chunk(33, 2101, 2200, 65536));  // still f6's task
  attributor.on_object_read(chunk(35, 2060, 2300, 0));      // b's
  attributor.expire(~0ull);
  auto bytes = sink.bytes_by_client();
  CHECK(bytes["a"] == 5 * 65536);
  CHECK(bytes["b"] == 65536);
  CHECK(bytes[std::string(attribution::kUnattributed)] == 0);
}

TEST_CASE("the reader tied to a fetch whose client left takes no later cycles for it") {
  // A scanner's last fetch is never answered (the scanner got its count and left). The cycles its
  // reader thread runs afterwards are other fetches' tasks.
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"t", 0}] = 1000;
  attribution::Attributor attributor(sink, &tier);
  const auto last = fetch(1, 25, "scanner", 100, {{"t", 0, 10}});
  attributor.on_request(last);
  attributor.on_object_read(estimated(50, 110, 150, 4000));  // its read, before it left
  attributor.close_connection(1, 160);
  const auto p1 = fetch(2, 1, "small", 170, {{"t", 0, 20}});
  const auto p2 = fetch(2, 2, "small", 260, {{"t", 0, 30}});
  attributor.on_request(p1);
  attributor.on_object_read(estimated(50, 180, 240, 3000));
  attributor.on_exchange(respond(p1, 250, 1000));
  attributor.on_request(p2);
  attributor.on_object_read(estimated(50, 270, 330, 3000));
  attributor.on_exchange(respond(p2, 340, 1000));
  attributor.expire(330 + kSettle);
  const auto bytes = sink.bytes_by_client();
  CHECK(bytes.at("scanner") == 4000);
  CHECK(bytes.at("small") == 6000);
}

TEST_CASE("a fetch whose client left still gets the task the broker had queued for it") {
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"t", 0}] = 1000;
  attribution::Attributor attributor(sink, &tier);
  const auto last = fetch(1, 25, "scanner", 100, {{"t", 0, 10}});
  attributor.on_request(last);
  attributor.close_connection(1, 105);
  const auto other = fetch(2, 1, "other", 150, {{"t", 0, 20}});
  attributor.on_request(other);
  attributor.on_object_read(estimated(50, 110, 140, 4000));  // its task, after it left
  attributor.on_object_read(estimated(50, 141, 170, 3000));  // still its task
  attributor.on_object_read(estimated(51, 155, 175, 2000));  // other's, on another thread
  attributor.on_exchange(respond(other, 180, 1000));
  attributor.expire(190 + kSettle);
  const auto bytes = sink.bytes_by_client();
  CHECK(bytes.at("scanner") == 7000);
  CHECK(bytes.at("other") == 2000);
}

TEST_CASE("a read goes only to fetches its own broker process received") {
  // A restarted broker (or a second broker on the host) reads the same topic/partition: the old
  // process's fetch, still pending after its client closed, must not take the new one's GETs.
  RecordingSink sink;
  attribution::Attributor attributor(sink, nullptr);
  attributor.set_process(1, 100);  // the old broker's client
  attributor.set_process(2, 200);  // the new broker's client
  attributor.on_request(fetch(1, 7, "old-client", 100, {{"orders", 0, 0}}));
  attributor.close_connection(1, 150);
  attributor.on_request(fetch(2, 9, "new-client", 200, {{"orders", 0, 0}}));
  auto read = get(31, 300, 400, "orders", 0, 0, 1 << 20);
  read.process = 200;
  attributor.on_object_read(read);
  auto stray = get(32, 310, 410, "orders", 0, 0, 1 << 10);
  stray.process = 300;  // a third process: no fetch of its own
  attributor.on_object_read(stray);
  auto unknown = get(33, 320, 420, "orders", 0, 0, 1 << 12);  // process unknown (a pcap): any
  attributor.on_object_read(unknown);
  attributor.expire(~0ull);
  REQUIRE(sink.reads.size() == 3);
  CHECK(sink.reads[0].client == "new-client");
  CHECK(sink.reads[1].client == std::string(attribution::kUnattributed));
  CHECK(sink.reads[2].client != std::string(attribution::kUnattributed));
}

// Expiry (the sweep finishes fetches from a queue of due times, not by walking all of them):
// each of the three rules at its boundary, and one sweep finishing several in arrival order.
TEST_CASE("fetches finish just after they are answered, closed or pending too long") {
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"orders", 0}] = 5000;
  tier.starts[{"orders", 1}] = 5000;
  tier.starts[{"orders", 2}] = 5000;
  attribution::Options options;
  options.answered_retain_ns = 1000;
  options.closed_grace_ns = 3000;
  options.max_pending_ns = 10'000;
  attribution::Attributor attributor(sink, &tier, options);

  auto answered = fetch(1, 1, "answered", 100, {{"orders", 0, 10}});
  auto closed = fetch(2, 1, "closed", 110, {{"orders", 1, 10}});
  auto lost = fetch(3, 1, "lost", 120, {{"orders", 2, 10}});
  for (const auto* x : {&answered, &closed, &lost}) attributor.on_request(*x);
  attributor.on_object_read(get(31, 130, 140, "orders", 0, 0, 100));
  attributor.on_object_read(get(32, 130, 140, "orders", 1, 0, 100));
  attributor.on_object_read(get(33, 130, 140, "orders", 2, 0, 100));
  attributor.on_exchange(respond(answered, 200, 100));  // due after 1200
  attributor.close_connection(2, 300);                  // due after 3300
  // "lost" is never answered: due after 120 + 10,000.
  REQUIRE(sink.reads.size() == 3);

  attributor.expire(1200);
  CHECK(sink.done.empty());
  attributor.expire(1201);
  CHECK(sink.done_clients == std::vector<std::string>{"answered"});
  attributor.expire(3300);
  CHECK(sink.done.size() == 1);
  attributor.expire(3301);
  CHECK(sink.done_clients == std::vector<std::string>{"answered", "closed"});
  attributor.expire(10'120);
  CHECK(sink.done.size() == 2);
  attributor.expire(10'121);
  CHECK(sink.done_clients == std::vector<std::string>{"answered", "closed", "lost"});
  CHECK(attributor.pending() == 0);

  // Several due in one sweep: in arrival order, whatever made each due.
  RecordingSink later_sink;
  attribution::Attributor again(later_sink, &tier, options);
  auto first = fetch(1, 2, "first", 100, {{"orders", 2, 10}});    // pending too long
  auto second = fetch(2, 2, "second", 150, {{"orders", 1, 10}});  // closed
  auto third = fetch(3, 2, "third", 160, {{"orders", 0, 10}});    // answered
  for (const auto* x : {&first, &second, &third}) again.on_request(*x);
  again.on_object_read(get(33, 170, 180, "orders", 2, 0, 100));
  again.on_object_read(get(32, 170, 180, "orders", 1, 0, 100));
  again.on_object_read(get(31, 170, 180, "orders", 0, 0, 100));
  again.on_exchange(respond(third, 9000, 100));
  again.close_connection(2, 8000);
  again.expire(20'000);
  CHECK(later_sink.done_clients == std::vector<std::string>{"first", "second", "third"});
}

TEST_CASE("a finished fetch takes only its own entries out of its partition's lists") {
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"orders", 0}] = 5000;
  attribution::Options options;
  options.answered_retain_ns = 1000;
  options.closed_grace_ns = 10;  // a closed fetch finishes before one answered earlier
  options.estimate_settle_ns = 5;
  attribution::Attributor attributor(sink, &tier, options);

  auto gone = fetch(2, 1, "gone", 100, {{"orders", 0, 10}});
  auto twice = fetch(3, 1, "twice", 110, {{"orders", 0, 10}, {"orders", 0, 10}});
  auto kept = fetch(1, 1, "kept", 115, {{"orders", 0, 10}});
  for (const auto* x : {&gone, &twice, &kept}) attributor.on_request(*x);
  attributor.on_object_read(get(32, 131, 141, "orders", 0, 0, 200));  // oldest first: "gone"
  attributor.on_object_read(get(33, 132, 142, "orders", 0, 0, 300));  // then "twice"
  auto kept_answer = respond(kept, 190, 0);  // its GET failed: a storage error, seen late
  kept_answer.fetch.partitions[0].error_code = 56;
  attributor.on_exchange(kept_answer);
  attributor.on_exchange(respond(twice, 200, 300));
  attributor.on_exchange(respond(gone, 210, 200));
  attributor.close_connection(3, 205);  // "twice" due after 215
  attributor.close_connection(2, 212);  // "gone" due after 222
  REQUIRE(sink.reads.size() == 2);

  // Both finish in one sweep, in arrival order; neither is at the front of the partition's list
  // of answered fetches ("kept", answered first, is).
  attributor.expire(230);
  CHECK(sink.done_clients == std::vector<std::string>{"gone", "twice"});
  CHECK(attributor.pending() == 1);
  // Its failed GET, known late (and held for estimate_settle_ns), still finds "kept" there.
  attributor.on_object_read(get(31, 150, 195, "orders", 0, 0, 0, /*status=*/0));
  attributor.expire(231);
  REQUIRE(sink.reads.size() == 3);
  CHECK(sink.reads.back().client == "kept");
  CHECK(sink.reads.back().error);
  // The lists still serve: a new fetch takes its GET.
  auto fourth = fetch(4, 1, "fourth", 240, {{"orders", 0, 10}});
  attributor.on_request(fourth);
  attributor.on_object_read(get(34, 250, 260, "orders", 0, 0, 400));
  CHECK(sink.reads.back().client == "fourth");
  attributor.on_exchange(respond(fourth, 270, 400));
  attributor.expire(1271);
  CHECK(sink.done_clients == std::vector<std::string>{"gone", "twice", "kept", "fourth"});
  CHECK(attributor.pending() == 0);
  attributor.on_object_read(get(35, 2300, 2310, "orders", 0, 0, 500));
  CHECK(sink.reads.back().client == attribution::kUnattributed);
}

TEST_CASE("a fetch answered behind an older open one finishes cleanly; the lists still serve") {
  // "young" is answered while "old", received first, still waits: young stays in the partition's
  // list of open fetches (removed lazily) and must leave it when it finishes, before old does.
  RecordingSink sink;
  FixedTier tier;
  tier.starts[{"orders", 0}] = 5000;
  attribution::Options options;
  options.answered_retain_ns = 1000;
  options.max_pending_ns = 100'000;
  attribution::Attributor attributor(sink, &tier, options);
  auto old = fetch(1, 1, "old", 100, {{"orders", 0, 10}});
  auto young = fetch(2, 1, "young", 110, {{"orders", 0, 10}});
  attributor.on_request(old);
  attributor.on_request(young);
  attributor.on_exchange(respond(young, 200, 0));  // answered from elsewhere: no GET
  attributor.expire(1201);
  CHECK(attributor.pending() == 1);
  attributor.on_object_read(get(31, 1300, 1310, "orders", 0, 0, 100));
  REQUIRE(sink.reads.size() == 1);
  CHECK(sink.reads[0].client == "old");
  attributor.on_exchange(respond(old, 1400, 100));
  attributor.expire(2401);
  CHECK(sink.done_clients == std::vector<std::string>{"old"});
  CHECK(attributor.pending() == 0);
  auto fresh = fetch(3, 1, "fresh", 2500, {{"orders", 0, 10}});
  attributor.on_request(fresh);
  attributor.on_object_read(get(32, 2510, 2520, "orders", 0, 0, 200));
  CHECK(sink.reads.back().client == "fresh");
}

// Where no tier knows the partitions, every partition of every fetch is pending until the fetch
// finishes: both bounds (fetches, and their partitions) finish the oldest first, and count it.
TEST_CASE("pending fetches stay bounded in number and in partitions; the oldest make room") {
  RecordingSink sink;
  attribution::Options options;
  options.max_pending = 4;
  options.max_pending_partitions = 10;
  attribution::Attributor attributor(sink, nullptr, options);
  auto three = [](int first) {
    return std::vector<std::tuple<std::string, std::int32_t, std::int64_t>>{
        {"t", first, 10}, {"t", first + 1, 10}, {"t", first + 2, 10}};
  };
  for (int i = 0; i < 4; ++i)  // 12 partitions: the first fetch makes room for the fourth
    attributor.on_request(fetch(i + 1, 1, "c" + std::to_string(i + 1), 100 + i, three(3 * i)));
  CHECK(attributor.pending() == 3);
  CHECK(attributor.counters().pending_evicted == 1);
  attributor.on_request(fetch(5, 1, "c5", 110, {{"t", 12, 10}}));  // 10 partitions, 4 fetches
  CHECK(attributor.pending() == 4);
  CHECK(attributor.counters().pending_evicted == 1);
  attributor.on_request(fetch(6, 1, "c6", 111, {{"t", 13, 10}}));  // a fifth fetch
  CHECK(attributor.pending() == 4);
  CHECK(attributor.counters().pending_evicted == 2);

  attributor.on_object_read(get(31, 200, 300, "t", 1, 0, 100));   // c1's, finished
  attributor.on_object_read(get(32, 200, 300, "t", 4, 0, 100));   // c2's, finished
  attributor.on_object_read(get(33, 200, 300, "t", 8, 0, 100));   // c3's
  attributor.on_object_read(get(34, 200, 300, "t", 13, 0, 100));  // c6's
  attributor.expire(~0ull);
  std::map<std::int32_t, std::string> client_of;
  for (const auto& r : sink.reads) client_of[r.partition] = r.client;
  CHECK(client_of[1] == std::string(attribution::kUnattributed));
  CHECK(client_of[4] == std::string(attribution::kUnattributed));
  CHECK(client_of[8] == "c3");
  CHECK(client_of[13] == "c6");

  // One request of more partitions than the bound keeps its first ones, alone.
  std::vector<std::tuple<std::string, std::int32_t, std::int64_t>> many;
  for (int p = 100; p < 120; ++p) many.emplace_back("u", p, 10);
  attributor.on_request(fetch(7, 1, "c7", 400, many));
  CHECK(attributor.pending() == 1);
  sink.reads.clear();
  attributor.on_object_read(get(35, 500, 600, "u", 109, 0, 100));
  attributor.on_object_read(get(36, 500, 600, "u", 110, 0, 100));
  attributor.expire(~0ull);
  REQUIRE(sink.reads.size() == 2);
  CHECK(sink.reads[0].client == "c7");
  CHECK(sink.reads[1].client == std::string(attribution::kUnattributed));
}
