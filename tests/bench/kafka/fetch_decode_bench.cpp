// Prints Fetch decoding throughput per core: typical consumer requests (1–50 partitions, v11
// classic and v13 flexible encodings) fed to kafka::Decoder the way the capture layer does (one
// piece per request read), alone and with their responses (headers captured, records as
// sendfile holes). Not a timed test: it prints figures for docs/performance.md.
#include <time.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kafka/kafka.h"

namespace {

struct Encoder {
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
};

// Where a request stands in a fetch session: sessionless (0, -1), the full request that opens
// one (0, 0), or an incremental one (the session's id, epoch > 0).
struct SessionFields {
  std::int32_t id = 0, epoch = -1;
};

// A consumer's Fetch request: partitions spread over topics of 10 partitions each.
std::vector<std::uint8_t> fetch_request(int version, int correlation, int partitions,
                                        SessionFields session = {}) {
  const bool flexible = version >= 12;
  Encoder e;
  e.i16(1), e.i16(version), e.i32(correlation), e.str("consumer-orders-app-1", false);
  if (flexible) e.uvarint(0);
  if (version <= 14) e.i32(-1);
  e.i32(500), e.i32(1), e.i32(52428800), e.i8(0), e.i32(session.id), e.i32(session.epoch);
  int topics = (partitions + 9) / 10;
  flexible ? e.uvarint(topics + 1) : e.i32(topics);
  for (int t = 0, left = partitions; t < topics; ++t) {
    int n = left < 10 ? left : 10;
    left -= n;
    if (version >= 13) {
      e.topic_id(t);
    } else {
      e.str("orders-topic-" + std::to_string(t), flexible);
    }
    flexible ? e.uvarint(n + 1) : e.i32(n);
    for (int p = 0; p < n; ++p) {
      e.i32(p), e.i32(5), e.i64(123456789 + p * 1000);
      if (version >= 12) e.i32(4);
      e.i64(-1), e.i32(1048576);
      if (flexible) e.uvarint(0);
    }
    if (flexible) e.uvarint(0);
  }
  flexible ? e.uvarint(1) : e.i32(0);  // forgotten
  e.str("", flexible);                 // rack
  if (flexible) e.uvarint(0);
  e.frame_size_prefix();
  return e.b;
}

// The response's bytes up to each partition's records; `records` bytes of each are a hole.
struct Response {
  std::vector<std::vector<std::uint8_t>> captured;  // piece i precedes records hole i
  std::uint32_t records = 4096;
};

Response fetch_response(int version, int correlation, int partitions, std::int32_t session_id = 0) {
  const bool flexible = version >= 12;
  Response r;
  Encoder e;
  std::vector<std::uint8_t> body;
  // Build the whole frame with records placeholders to get the size right, then cut.
  std::vector<std::size_t> records_at;
  e.i32(correlation);
  if (flexible) e.uvarint(0);
  e.i32(0), e.i16(0), e.i32(session_id);
  int topics = (partitions + 9) / 10;
  flexible ? e.uvarint(topics + 1) : e.i32(topics);
  for (int t = 0, left = partitions; t < topics; ++t) {
    int n = left < 10 ? left : 10;
    left -= n;
    if (version >= 13) {
      e.topic_id(t);
    } else {
      e.str("orders-topic-" + std::to_string(t), flexible);
    }
    flexible ? e.uvarint(n + 1) : e.i32(n);
    for (int p = 0; p < n; ++p) {
      e.i32(p), e.i16(0), e.i64(200000000), e.i64(200000000), e.i64(0);
      flexible ? e.uvarint(1) : e.i32(-1);
      e.i32(-1);
      flexible ? e.uvarint(r.records + 1) : e.i32(static_cast<std::int32_t>(r.records));
      records_at.push_back(e.b.size());
      if (flexible) e.uvarint(0);
    }
    if (flexible) e.uvarint(0);
  }
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

struct CountingSink : fc::kafka::Sink {
  std::uint64_t exchanges = 0, partitions = 0;
  void on_exchange(const fc::kafka::Exchange& ex) override {
    ++exchanges;
    partitions += ex.fetch.partitions.size();
  }
};

// CPU time of this thread: the figure is per core even when the machine is shared.
double now_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// With `session_partitions` > 0 the requests are incremental ones of a fetch session that
// holds that many partitions (opened first), each listing `partitions` of them, as a busy Java
// consumer's do; the decoder adds the session's unlisted ones to each request.
void bench(int version, int partitions, bool with_responses, int session_partitions = 0) {
  constexpr int kDistinct = 64;  // distinct correlation ids, cycled
  constexpr std::int32_t kSession = 7;
  const SessionFields incremental =
      session_partitions > 0 ? SessionFields{kSession, 1} : SessionFields{};
  std::vector<std::vector<std::uint8_t>> requests;
  std::vector<Response> responses;
  for (int i = 0; i < kDistinct; ++i) {
    requests.push_back(fetch_request(version, i, partitions, incremental));
    responses.push_back(fetch_response(version, i, partitions, incremental.id));
  }
  CountingSink sink;
  fc::kafka::Options options;
  // Without responses requests pile up in flight; a consumer has a few per connection at most.
  options.max_in_flight = 16;
  fc::kafka::Decoder decoder(sink, options);
  const std::uint64_t conn = 1;
  decoder.open(conn, 0);
  std::uint64_t req_pos = 0, resp_pos = 0, time = 1, n = 0, bytes = 0;
  auto exchange = [&](const std::vector<std::uint8_t>& req, const Response& resp) {
    decoder.data(conn, fc::kafka::Direction::kRequest, time++, req_pos, req.size(), req);
    req_pos += req.size();
    for (std::size_t i = 0; i < resp.captured.size(); ++i) {
      const auto& piece = resp.captured[i];
      decoder.data(conn, fc::kafka::Direction::kResponse, time, resp_pos, piece.size(), piece);
      resp_pos += piece.size();
      if (i + 1 < resp.captured.size()) {  // records: a sendfile hole, length only
        decoder.data(conn, fc::kafka::Direction::kResponse, time, resp_pos, resp.records, {});
        resp_pos += resp.records;
      }
    }
  };
  if (session_partitions > 0) {  // the full request that opens the session
    exchange(fetch_request(version, kDistinct, session_partitions, {0, 0}),
             fetch_response(version, kDistinct, session_partitions, kSession));
    if (sink.exchanges != 1) {
      std::fprintf(stderr, "bench: the session's full fetch was not decoded\n");
      std::exit(1);
    }
  }
  const std::uint64_t partitions_before = sink.partitions;
  // Best of 5 runs of ~0.25 s CPU time each: the machine may be shared, and interference only
  // ever makes a run slower.
  double best_rate = 0, best_bytes_rate = 0;
  for (int run = 0; run < 5; ++run) {
    std::uint64_t run_n = 0, run_bytes = 0;
    double start = now_s(), elapsed = 0;
    while (elapsed < 0.25) {
      for (int batch = 0; batch < 2048; ++batch, ++n, ++run_n) {
        const auto& req = requests[n % kDistinct];
        run_bytes += req.size();
        if (!with_responses) {
          decoder.data(conn, fc::kafka::Direction::kRequest, time++, req_pos, req.size(), req);
          req_pos += req.size();
          continue;
        }
        exchange(req, responses[n % kDistinct]);
      }
      elapsed = now_s() - start;
    }
    bytes += run_bytes;
    if (run_n / elapsed > best_rate) {
      best_rate = run_n / elapsed;
      best_bytes_rate = run_bytes / elapsed;
    }
  }
  const auto& c = decoder.counters();
  // Each incremental exchange carries the whole session: its listed partitions and the rest.
  const bool whole_sessions =
      session_partitions == 0 || sink.partitions - partitions_before ==
                                     (sink.exchanges - 1) * std::uint64_t(session_partitions);
  if (c.parse_errors || c.resyncs || (with_responses && sink.exchanges + 1 < n) ||
      !whole_sessions) {
    std::fprintf(stderr,
                 "bench: decoding went wrong (errors %lu, resyncs %lu, exchanges %lu/%lu)\n",
                 (unsigned long)c.parse_errors, (unsigned long)c.resyncs,
                 (unsigned long)sink.exchanges, (unsigned long)n);
    std::exit(1);
  }
  const std::string input =
      session_partitions > 0
          ? "incremental, session of " + std::to_string(session_partitions) + ", + response"
      : with_responses ? "request + response"
                       : "request stream only";
  std::printf("| v%-2d | %3d | %-22s | %8.2f M/s | %8.1f MB/s | %5.0f ns |\n", version, partitions,
              input.c_str(), best_rate / 1e6, best_bytes_rate / 1e6, 1e9 / best_rate);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4) {  // one case, for profiling: VERSION PARTITIONS WITH_RESPONSES(0|1)
    bench(std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]) != 0);
    return 0;
  }
  std::printf(
      "Fetch decoding, one core (one Decoder, one connection; thread CPU time, best of 5)\n\n");
  std::printf("| ver | partitions | input | Fetch requests/s | request bytes/s | per request |\n");
  std::printf("|-----|-----|------------------------|--------------|---------------|----------|\n");
  for (int version : {11, 13}) {
    for (int partitions : {1, 5, 10, 50}) {
      bench(version, partitions, false);
      bench(version, partitions, true);
    }
    for (int session_partitions : {10, 100, 1000}) bench(version, 1, true, session_partitions);
  }
  return 0;
}
