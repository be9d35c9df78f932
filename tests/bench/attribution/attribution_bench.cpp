// Prints what attribution costs per GET and per fetch as the rates grow (docs/performance.md,
// "Attribution at high GET rates"): consumers fetch the partitions of a topic whose old data is
// remote, a pool of reader threads makes one ranged GET per remote fetch, and the broker answers
// each fetch after its GET; answered fetches are kept answered_retain_ns (2 s) for reads known
// late, so the pending set grows with the fetch rate. Simulated time, fed to a real
// attribution::Attributor the way the pipeline does (expire() at every 10 ms sweep); the CPU time
// is this thread's. Not a timed test. It also prints how many GETs went to the client whose fetch
// caused them (the simulation's own record), so a faster matcher that matches wrongly shows.
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <queue>
#include <string>
#include <vector>

#include "attribution/attribution.h"
#include "heap.h"

namespace {

constexpr std::int64_t kLocalLogStart = 1'000'000;
constexpr std::int64_t kRemoteOffset = 1000;      // below the local log start: read remotely
constexpr std::int64_t kLocalOffset = 2'000'000;  // a fetch at the log's end: never tracked

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

struct Tier : fc::attribution::LocalTier {
  std::optional<std::int64_t> local_log_start(std::string_view, std::int32_t) const override {
    return kLocalLogStart;
  }
};

struct Counting : fc::attribution::Sink {
  const std::string* expected = nullptr;  // the client whose fetch the GET being fed was for
  std::uint64_t reads = 0, right = 0, unattributed = 0, fetches_done = 0;
  void on_attributed(const fc::attribution::Attributed& a) override {
    ++reads;
    if (a.client_id == fc::attribution::kUnattributed)
      ++unattributed;
    else if (expected && a.client_id == *expected)
      ++right;
  }
  void on_fetch_done(const fc::attribution::FetchDone&) override { ++fetches_done; }
};

struct Result {
  double ns_per_fetch = 0;  // all attribution work (requests, GETs, answers, sweeps) per fetch
  double ns_per_get = 0;    // the same, per GET
  std::size_t pending_max = 0;
  std::size_t heap_max = 0;  // the attributor's heap at its largest (sweeps), bytes
  std::uint64_t evicted = 0;
  double right_share = 0;
  std::uint64_t unattributed = 0;
};

constexpr int kConsumers = 64;
constexpr std::uint64_t kMs = 1'000'000;
const std::string kTopic = "orders";

// fetches_s consumer fetches per second, of which gets_s read remotely (one GET each, on one of
// 16 reader threads, 1 ms after the request, 4 ms long; the answer 1-8 ms after the GET, so that
// fetches are answered in another order than they came, and 6 ms after a local fetch), over
// `partitions` partitions in turn (1: a hot partition every consumer re-reads, whose answered
// fetches all wait in one list).
// With `session` > 1 each fetch carries session - 1 more partitions read locally, as an
// incremental fetch of a Java consumer carries its whole session. Without a tier (`with_tier`
// false: no log dirs readable) every partition of every fetch is possibly remote and kept.
Result run(double fetches_s, double gets_s, std::int32_t partitions, double seconds,
           std::int32_t session, bool with_tier, const fc::attribution::Options& options) {
  const std::size_t heap_before = fc::testing::heap_in_use();
  Tier tier;
  Counting sink;
  fc::attribution::Attributor attributor(sink, with_tier ? &tier : nullptr, options);
  std::vector<std::string> clients;
  for (int c = 0; c < kConsumers; ++c) clients.push_back("consumer-" + std::to_string(c));

  struct Event {
    std::uint64_t at;
    int kind;  // 0 GET done, 1 answer
    std::int32_t correlation;
    int consumer;
    std::int32_t partition;
    std::uint64_t request_ns;
    std::uint64_t get_start;
    bool remote;
  };
  struct Later {
    bool operator()(const Event& a, const Event& b) const { return a.at > b.at; }
  };
  std::priority_queue<Event, std::vector<Event>, Later> gets_due, answers_due;  // soonest on top
  const auto step = static_cast<std::uint64_t>(1e9 / fetches_s);
  const double get_share = gets_s / fetches_s;
  double get_credit = 0;
  std::uint64_t next_sweep = 10 * kMs, offset = 0;
  std::uint32_t reader = 0;
  Result r;
  std::uint64_t fetches = 0, gets = 0;

  fc::kafka::Exchange request;
  request.api_key = fc::kafka::api::kFetch;
  request.api_version = 12;
  request.body_decoded = true;
  request.fetch.topics.push_back({kTopic, {}});
  request.fetch.partitions.resize(static_cast<std::size_t>(session));
  for (std::int32_t k = 1; k < session; ++k) {
    auto& p = request.fetch.partitions[static_cast<std::size_t>(k)];
    p.partition = 100'000 + k;
    p.fetch_offset = kLocalOffset;
    p.partition_max_bytes = 1 << 20;
    p.from_session = true;
  }

  auto deliver = [&](const Event& e) {
    if (e.kind == 0) {
      fc::attribution::ObjectRead read;
      read.connection = 1'000'000 + (reader % 4);
      read.thread_id = 100 + (reader++ % 16);
      read.start_ns = e.get_start;
      read.end_ns = e.at;
      read.status = 206;
      read.body_bytes = 65536;
      read.topic = kTopic;
      read.partition = e.partition;
      read.segment_base_offset = 0;
      read.range_first = static_cast<std::int64_t>(offset);
      read.range_last = static_cast<std::int64_t>(offset + 65535);
      offset += 1 << 20;  // a new task each time: no thread continues its last range
      sink.expected = &clients[static_cast<std::size_t>(e.consumer)];
      attributor.on_object_read(read);
      ++gets;
      return;
    }
    fc::kafka::Exchange answer = request;
    answer.connection = static_cast<std::uint64_t>(e.consumer) + 1;
    answer.correlation_id = e.correlation;
    answer.client_id = clients[static_cast<std::size_t>(e.consumer)];
    answer.request_time_ns = e.request_ns;
    answer.response_seen = true;
    answer.response_start_ns = e.at;
    answer.response_end_ns = e.at;
    auto& p = answer.fetch.partitions[0];
    p.partition = e.partition;
    p.fetch_offset = e.remote ? kRemoteOffset : kLocalOffset;
    p.in_request = true;
    p.in_response = true;
    p.records_size = e.remote ? 65536 : 0;
    attributor.on_exchange(answer);
  };

  const auto end = static_cast<std::uint64_t>(seconds * 1e9);
  const double cpu0 = thread_cpu_seconds();
  for (std::uint64_t now = 0; now < end; now += step) {
    for (;;) {  // what is due, in time order
      const bool get = !gets_due.empty() && gets_due.top().at <= now;
      const bool answer = !answers_due.empty() && answers_due.top().at <= now;
      if (!get && !answer) break;
      auto& from =
          get && (!answer || gets_due.top().at <= answers_due.top().at) ? gets_due : answers_due;
      deliver(from.top());
      from.pop();
    }
    if (now >= next_sweep) {
      attributor.expire(now);
      next_sweep = now + 10 * kMs;
      r.pending_max = std::max(r.pending_max, attributor.pending());
      r.heap_max = std::max(r.heap_max, fc::testing::heap_growth(heap_before));
    }
    const int consumer = static_cast<int>(fetches % kConsumers);
    const auto partition = static_cast<std::int32_t>((fetches / kConsumers) % partitions);
    const auto correlation = static_cast<std::int32_t>(fetches / kConsumers);
    request.connection = static_cast<std::uint64_t>(consumer) + 1;
    request.correlation_id = correlation;
    request.client_id = clients[static_cast<std::size_t>(consumer)];
    request.request_time_ns = now;
    get_credit += get_share;
    const bool remote = get_credit >= 1;
    auto& p = request.fetch.partitions[0];
    p.partition = partition;
    p.fetch_offset = remote ? kRemoteOffset : kLocalOffset;
    p.partition_max_bytes = 1 << 20;
    p.in_request = true;
    attributor.on_request(request);
    ++fetches;
    const std::uint64_t get_end = now + 5 * kMs;
    // The answer's delay after the GET, 1-8 ms: a fixed spread, the same in every run.
    const std::uint64_t answer_after = (1 + (fetches * 2654435761u >> 7) % 8) * kMs;
    if (remote) {
      get_credit -= 1;
      gets_due.push({get_end, 0, correlation, consumer, partition, now, now + kMs, true});
    }
    answers_due.push({remote ? get_end + answer_after : now + 6 * kMs, 1, correlation, consumer,
                      partition, now, 0, remote});
  }
  for (; !gets_due.empty(); gets_due.pop()) deliver(gets_due.top());
  for (; !answers_due.empty(); answers_due.pop()) deliver(answers_due.top());
  attributor.expire(~0ull);
  const double cpu = thread_cpu_seconds() - cpu0;
  r.ns_per_fetch = cpu * 1e9 / static_cast<double>(fetches);
  r.ns_per_get = gets ? cpu * 1e9 / static_cast<double>(gets) : 0;
  r.right_share =
      sink.reads ? static_cast<double>(sink.right) / static_cast<double>(sink.reads) : 0;
  r.unattributed = sink.unattributed;
  r.evicted = attributor.counters().pending_evicted;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 20.0;
  const int only_row = argc > 2 ? std::atoi(argv[2]) : 0;  // 1-based, for a profiler; 0: all
  std::printf(
      "attribution: %d consumers, 1 GET per remote fetch, answered fetches kept 2 s; %.0f s "
      "simulated per row, this thread's CPU time\n\n",
      kConsumers, seconds);
  std::printf(
      "| fetches/s | GETs/s | partitions | partitions per fetch | pending fetches (max) | CPU ns "
      "per fetch | CPU ns per GET | CPU share at that rate | GETs to their own client | "
      "unattributed | heap (max) | evicted |\n");
  std::printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  const fc::attribution::Options defaults;
  fc::attribution::Options unbounded;
  unbounded.max_pending_partitions = std::size_t{1} << 40;
  struct Row {
    double fetches_s, gets_s;
    std::int32_t partitions, session = 1;
    bool with_tier = true;  // false: no tier knows the partitions (every one possibly remote)
    const fc::attribution::Options* options = nullptr;
    const char* note = "";
  };
  const Row rows[] = {{1000, 500, 8},
                      {5000, 1000, 8},
                      {10000, 5000, 8},
                      {50000, 5000, 8},
                      {10000, 5000, 1},
                      {50000, 5000, 1},
                      {1000, 500, 8, 100},
                      {1000, 500, 8, 1000},
                      {8000, 500, 8, 100, false, nullptr, ", no tier"},
                      {8000, 500, 8, 100, false, &unbounded, ", no tier, no partition bound"}};
  for (const Row& row : rows) {
    if (only_row > 0 && &row != &rows[only_row - 1]) continue;
    const Result r = run(row.fetches_s, row.gets_s, row.partitions, seconds, row.session,
                         row.with_tier, row.options ? *row.options : defaults);
    std::printf(
        "| %.0f | %.0f | %d | %d%s | %zu | %.0f | %.0f | %.2f%% | %.2f%% | %llu | %.0f MB | "
        "%llu |\n",
        row.fetches_s, row.gets_s, row.partitions, row.session, row.note, r.pending_max,
        r.ns_per_fetch, r.ns_per_get, r.ns_per_fetch * row.fetches_s / 1e7, 100 * r.right_share,
        static_cast<unsigned long long>(r.unattributed), static_cast<double>(r.heap_max) / 1e6,
        static_cast<unsigned long long>(r.evicted));
    std::fflush(stdout);
  }
  return 0;
}
