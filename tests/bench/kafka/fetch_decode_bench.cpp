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
#include <memory>
#include <string>
#include <vector>

#include "heap.h"
#include "kafka/kafka.h"
#include "kafka_frames.h"

namespace {

using fc::testing::fetch_request;
using fc::testing::fetch_response;
using fc::testing::FetchResponseFrame;
using fc::testing::SessionFields;

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
  std::vector<FetchResponseFrame> responses;
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
  std::uint64_t n = 0, bytes = 0;
  fc::testing::FetchFeeder feed{decoder, conn};
  auto exchange = [&](const std::vector<std::uint8_t>& req, const FetchResponseFrame& resp) {
    feed.request(req);
    feed.respond(resp);
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
          feed.request(req);
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

// A client that pipelines incremental fetches on a large session: each request in flight would
// hold the whole session. Prints the heap the decoder holds with them in flight, and once they
// are answered, with the default cap on carried session partitions and with a cap too high to
// bite (as before session 47).
void pipelined_session_memory(std::size_t max_session_partitions, const char* label) {
  constexpr int kSessionPartitions = 20'000, kInFlight = 256;
  constexpr std::int32_t kSession = 7;
  CountingSink sink;
  fc::kafka::Options options;
  options.max_session_partitions = max_session_partitions;
  auto decoder = std::make_unique<fc::kafka::Decoder>(sink, options);
  fc::testing::FetchFeeder feed{*decoder};
  const std::size_t before = fc::testing::heap_in_use();
  decoder->open(1, 0);
  feed.request(fetch_request(13, 0, kSessionPartitions, {0, 0}));
  feed.respond(fetch_response(13, 0, kSessionPartitions, kSession));
  const std::size_t session = fc::testing::heap_growth(before);
  for (int i = 1; i <= kInFlight; ++i) feed.request(fetch_request(13, i, 1, {kSession, i}));
  const std::size_t in_flight = fc::testing::heap_growth(before);
  for (int i = 1; i <= kInFlight; ++i) feed.respond(fetch_response(13, i, 1, kSession));
  const std::size_t answered = fc::testing::heap_growth(before);
  if (sink.exchanges != kInFlight + 1) {
    std::fprintf(stderr, "bench: %lu of %d exchanges\n", (unsigned long)sink.exchanges,
                 kInFlight + 1);
    std::exit(1);
  }
  std::printf("| %-32s | %7.1f MB | %8.1f MB | %8.1f MB | %9lu |\n", label, session / 1e6,
              in_flight / 1e6, answered / 1e6,
              (unsigned long)decoder->counters().session_partitions_capped);
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
  std::printf(
      "\nHeap the decoder holds: a session of 20,000 partitions, then 256 incremental requests "
      "in flight on it, then answered\n\n");
  std::printf("| max_session_partitions | session | in flight | answered | capped |\n");
  std::printf("|---|---|---|---|---|\n");
  pipelined_session_memory(fc::kafka::Options{}.max_session_partitions, "100,000 (default)");
  pipelined_session_memory(std::size_t{1} << 40, "no cap");
  return 0;
}
