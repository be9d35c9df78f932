// broker_load: real librdkafka consumers (Debian's librdkafka, unmodified) reading an offset range
// of every partition of a topic over and over, as fast as the broker answers, for
// tests/bench/broker/run. Prints one JSON line: messages, bytes, Fetch requests and librdkafka's
// own round-trip-time percentiles (its statistics, one window per second).
//
// Each consumer is its own rd_kafka_t (one broker connection, one Fetch in flight, like a
// separate application); when a partition reaches the end of its range the consumer seeks back
// to the start, so a "remote" range never strays into local offsets for long.
#include <librdkafka/rdkafka.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Range {
  std::int64_t lo = 0, hi = 0;  // [lo, hi)
};

// One librdkafka statistics window for the broker connection that carries the fetches.
struct Window {
  std::int64_t count = 0;
  double p50_us = 0, p99_us = 0;
};

struct Shared {
  std::mutex mutex;
  std::vector<Window> windows;
  std::atomic<std::uint64_t> messages{0}, bytes{0}, fetches{0}, errors{0};
  std::atomic<bool> measuring{false};
  std::string first_error;
};

struct Consumer {
  Shared* shared = nullptr;
  std::map<std::string, std::int64_t> last_fetch_req;  // per broker entry, cumulative
};

int on_stats(rd_kafka_t*, char* json, size_t len, void* opaque) {
  auto* c = static_cast<Consumer*>(opaque);
  if (std::getenv("BROKER_LOAD_DUMP_STATS")) std::fprintf(stderr, "%.*s\n", int(len), json);
  auto doc = nlohmann::json::parse(std::string_view(json, len), nullptr, false);
  if (doc.is_discarded() || !doc.contains("brokers")) return 0;
  for (auto& [name, b] : doc["brokers"].items()) {
    // Fetches go to the broker's node entry (nodeid >= 0), not the bootstrap or coordinator one.
    if (b.value("nodeid", -1) < 0 || !b.contains("req") || !b.contains("rtt")) continue;
    const std::int64_t fetch_total = b["req"].value("Fetch", std::int64_t{0});
    const std::int64_t delta = fetch_total - c->last_fetch_req[name];
    c->last_fetch_req[name] = fetch_total;
    const auto& rtt = b["rtt"];
    if (!c->shared->measuring || delta <= 0 || rtt.value("cnt", 0) <= 0) continue;
    c->shared->fetches += std::uint64_t(delta);
    std::lock_guard lock(c->shared->mutex);
    c->shared->windows.push_back(
        {rtt.value("cnt", std::int64_t{0}), rtt.value("p50", 0.0), rtt.value("p99", 0.0)});
  }
  return 0;  // librdkafka frees the JSON
}

// The count-weighted median of one percentile over the windows.
double weighted_median(std::vector<Window> w, double Window::*field) {
  if (w.empty()) return 0;
  std::sort(w.begin(), w.end(),
            [&](const Window& a, const Window& b) { return a.*field < b.*field; });
  std::int64_t total = 0;
  for (const auto& x : w) total += x.count;
  std::int64_t seen = 0;
  for (const auto& x : w) {
    seen += x.count;
    if (2 * seen >= total) return x.*field;
  }
  return w.back().*field;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"broker_load: librdkafka consumers reading offset ranges at the maximum rate"};
  std::string bootstrap, topic, client_id = "bench-load";
  int partitions = 1, consumers = 4, partition_fetch_bytes = 1 << 20;
  double seconds = 10, warmup = 2;
  std::vector<std::int64_t> los, his;
  app.add_option("--bootstrap", bootstrap)->required();
  app.add_option("--topic", topic)->required();
  app.add_option("--partitions", partitions)->capture_default_str();
  app.add_option("--lo", los, "first offset of the range, one per partition")->required();
  app.add_option("--hi", his, "end of the range (exclusive), one per partition")->required();
  app.add_option("--consumers", consumers, "librdkafka instances, each reading every partition")
      ->capture_default_str();
  app.add_option("--partition-fetch-bytes", partition_fetch_bytes, "max.partition.fetch.bytes")
      ->capture_default_str();
  app.add_option("--seconds", seconds, "measured time")->capture_default_str();
  app.add_option("--warmup", warmup, "seconds before measuring")->capture_default_str();
  app.add_option("--client-id", client_id)->capture_default_str();
  double rate = 0;
  app.add_option("--rate", rate,
                 "messages per second per consumer (0 = as fast as the broker answers); a paced "
                 "load compares the broker's CPU at the same fetch rate")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (int(los.size()) != partitions || int(his.size()) != partitions) {
    std::fprintf(stderr, "broker_load: give --lo and --hi once per partition\n");
    return 2;
  }

  Shared shared;
  std::atomic<bool> stop{false};
  std::vector<Consumer> states(consumers);
  std::vector<std::thread> threads;
  for (int i = 0; i < consumers; ++i) {
    threads.emplace_back([&, i] {
      char err[512];
      rd_kafka_conf_t* conf = rd_kafka_conf_new();
      auto set = [&](const char* k, const std::string& v) {
        if (rd_kafka_conf_set(conf, k, v.c_str(), err, sizeof err) != RD_KAFKA_CONF_OK) {
          std::fprintf(stderr, "broker_load: %s: %s\n", k, err);
          std::exit(2);
        }
      };
      set("bootstrap.servers", bootstrap);
      set("client.id", client_id + "-" + std::to_string(i));
      set("group.id", client_id + "-" + std::to_string(i));  // offsets are never committed
      set("enable.auto.commit", "false");
      set("enable.auto.offset.store", "false");
      set("enable.partition.eof", "true");
      set("max.partition.fetch.bytes", std::to_string(partition_fetch_bytes));
      set("fetch.wait.max.ms", "100");
      // A small prefetch queue keeps the consumer inside its range (it seeks back at the end).
      set("queued.min.messages", "2000");
      set("statistics.interval.ms", "1000");
      rd_kafka_conf_set_stats_cb(conf, on_stats);
      states[i].shared = &shared;
      rd_kafka_conf_set_opaque(conf, &states[i]);
      rd_kafka_t* rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
      if (!rk) {
        std::fprintf(stderr, "broker_load: %s\n", err);
        std::exit(2);
      }
      rd_kafka_poll_set_consumer(rk);  // statistics arrive through consumer_poll
      rd_kafka_topic_partition_list_t* list = rd_kafka_topic_partition_list_new(partitions);
      for (int p = 0; p < partitions; ++p)
        rd_kafka_topic_partition_list_add(list, topic.c_str(), p)->offset =
            los[p] + (his[p] - los[p]) * i / std::max(consumers, 1);  // spread the consumers
      rd_kafka_assign(rk, list);
      rd_kafka_topic_partition_list_destroy(list);
      auto seek_start = [&](int p) {
        rd_kafka_topic_partition_list_t* s = rd_kafka_topic_partition_list_new(1);
        rd_kafka_topic_partition_list_add(s, topic.c_str(), p)->offset = los[p];
        if (auto* e = rd_kafka_seek_partitions(rk, s, 0)) rd_kafka_error_destroy(e);
        rd_kafka_topic_partition_list_destroy(s);
      };
      // Pacing: every 256 messages, wait until the schedule catches up (librdkafka then
      // fetches only as fast as its prefetch queue drains).
      auto due = std::chrono::steady_clock::now();
      std::uint64_t taken = 0;
      while (!stop) {
        rd_kafka_message_t* m = rd_kafka_consumer_poll(rk, 100);
        if (!m) continue;
        if (rate > 0 && ++taken % 256 == 0) {
          due += std::chrono::duration_cast<std::chrono::steady_clock::duration>(
              std::chrono::duration<double>(256 / rate));
          std::this_thread::sleep_until(due);
        }
        const int p = m->partition;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
          if (p >= 0 && p < partitions) seek_start(p);
        } else if (m->err) {
          ++shared.errors;
          std::lock_guard lock(shared.mutex);
          if (shared.first_error.empty()) shared.first_error = rd_kafka_message_errstr(m);
        } else {
          if (shared.measuring) {
            ++shared.messages;
            shared.bytes += m->len + m->key_len;
          }
          if (p >= 0 && p < partitions && m->offset + 1 >= his[p]) seek_start(p);
        }
        rd_kafka_message_destroy(m);
      }
      rd_kafka_consumer_close(rk);
      rd_kafka_destroy(rk);
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(warmup));
  // The driver samples the broker's and fetchcostd's counters on these two lines.
  shared.measuring = true;
  std::printf("measuring\n");
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  shared.measuring = false;
  std::printf("stopped\n");
  std::fflush(stdout);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stop = true;
  for (auto& t : threads) t.join();

  std::lock_guard lock(shared.mutex);
  nlohmann::json out{{"seconds", took},
                     {"consumers", consumers},
                     {"messages", shared.messages.load()},
                     {"bytes", shared.bytes.load()},
                     {"client_fetches", shared.fetches.load()},
                     {"errors", shared.errors.load()},
                     {"first_error", shared.first_error},
                     {"rtt_windows", shared.windows.size()},
                     {"rtt_p50_us", weighted_median(shared.windows, &Window::p50_us)},
                     {"rtt_p99_us", weighted_median(shared.windows, &Window::p99_us)}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
