// tiered-broker-load: drives a Kafka broker with Fetch v4 requests as fast as it answers and
// prints the rate and the round-trip times. Each connection keeps one request in flight, like a
// consumer. With --incremental-sessions each connection fetches as the Java client does: Fetch
// v11 in a fetch session (KIP-227), a full request that opens it, then incremental ones. For
// measuring the simulator (and fetchcost's overhead on it), not a test.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "wire.h"

namespace {

struct Conn {
  int fd = -1;
  std::string rbuf;
  std::chrono::steady_clock::time_point asked;  // when its request in flight was written
  // --incremental-sessions: the fetch session the broker gave it (0: none yet) and the epoch
  // of its next request (0: the full one that opens the session)
  int32_t session_id = 0, next_epoch = 0;
  int32_t correlation = 0;
};

// Where a request stands in its connection's fetch session (--incremental-sessions).
struct SessionFields {
  int32_t id = 0, epoch = 0;  // 0 and 0: the full request that opens the session; 0 and -1: none
  bool lists_partition = true;
};

// A request's size prefix (0 until the request is written: put_i32_at fills it in) and header.
tb::Writer request_header(int16_t api_key, int16_t version, int32_t corr,
                          const std::string& client_id) {
  tb::Writer w;
  w.i32(0);
  w.i16(api_key);
  w.i16(version);
  w.i32(corr);
  w.string(client_id);
  return w;
}

// A Fetch request of `partitions` partitions from `partition` on, each at `offset` (a consumer
// of many partitions on one broker; the response's max bytes still bound the whole answer): v4
// without `session`, else v11 in it (id 0 and epoch -1: v11 without a session, as librdkafka
// sends). An incremental request lists them (a busy Java consumer's lists the partitions whose
// fetch offset moved) unless !lists_partition: then the broker reads the session's partitions
// at the session's offsets, as for a Java consumer whose positions did not move.
std::string fetch_request(const std::string& client_id, const std::string& topic, int partition,
                          int64_t offset, int32_t max_wait_ms, int32_t max_bytes, int32_t corr,
                          const SessionFields* session = nullptr, int partitions = 1) {
  // Fetch v4, or v11 in a session.
  tb::Writer w = request_header(1, session ? 11 : 4, corr, client_id);
  w.i32(-1);  // replica id
  w.i32(max_wait_ms);
  w.i32(1);  // min bytes
  w.i32(max_bytes);
  w.i8(0);
  if (session) {
    w.i32(session->id);
    w.i32(session->epoch);
  }
  if (session && !session->lists_partition) {
    w.i32(0);
  } else {
    w.i32(1);
    w.string(topic);
    w.i32(partitions);
    for (int p = partition; p < partition + partitions; ++p) {
      w.i32(p);
      if (session) w.i32(-1);  // current leader epoch
      w.i64(offset);
      if (session) w.i64(-1);  // log start offset (followers only)
      w.i32(max_bytes);
    }
  }
  if (session) {
    w.i32(0);      // forgotten topics
    w.string("");  // rack id
  }
  w.put_i32_at(0, int32_t(w.size() - 4));
  return std::move(w.buf());
}

// A Produce v3 request of `size` bytes in all (at least 64), acks 1, one partition's records
// a filler: for a broker run with --accept-produce, which drops them unread.
std::string produce_request(const std::string& client_id, const std::string& topic, int partition,
                            size_t size) {
  // Produce v3.
  tb::Writer w = request_header(0, 3, 1, client_id);
  w.i16(-1);  // transactional id: null
  w.i16(1);   // acks
  w.i32(1000);
  w.i32(1);
  w.string(topic);
  w.i32(1);
  w.i32(partition);
  const size_t head = w.size() + 4;
  w.bytes(std::string(size > head ? size - head : 0, 'p'));
  w.put_i32_at(0, int32_t(w.size() - 4));
  return std::move(w.buf());
}

// The one request of a run without churn, built once.
const std::string& req_fixed(const std::string& client_id, const std::string& topic, int partition,
                             int64_t offset, int32_t max_wait_ms, int32_t max_bytes,
                             const SessionFields* session, int partitions) {
  static const std::string req = fetch_request(client_id, topic, partition, offset, max_wait_ms,
                                               max_bytes, 1, session, partitions);
  return req;
}

// The Fetch v11 response at the front of c.rbuf: its error code and session id (after the
// size prefix, the correlation id and throttle_time_ms). The session's next epoch follows.
bool take_session(Conn& c) {
  if (c.rbuf.size() < 18) return false;
  auto be32 = [&](size_t at) {
    return int32_t(ntohl(*reinterpret_cast<const uint32_t*>(&c.rbuf[at])));
  };
  const int16_t error = int16_t(ntohs(*reinterpret_cast<const uint16_t*>(&c.rbuf[12])));
  const int32_t session = be32(14);
  if (error != 0 || session == 0 || (c.session_id != 0 && session != c.session_id)) {
    std::fprintf(stderr, "fetch session refused: error %d, session %d (had %d)\n", error, session,
                 c.session_id);
    return false;
  }
  c.session_id = session;
  c.next_epoch = c.next_epoch == INT32_MAX ? 1 : c.next_epoch + 1;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"tiered-broker-load: Fetch v4 load against a broker; prints fetch requests/s"};
  std::string host = "127.0.0.1", topic = "scan", client_id = "load";
  int port = 0, connections = 16, partition = 0, max_wait_ms = 0, max_bytes = 1024;
  int64_t offset = -1;
  double seconds = 5;
  app.add_option("--host", host)->capture_default_str();
  app.add_option("--port", port, "Kafka port")->required();
  app.add_option("--topic", topic)->capture_default_str();
  app.add_option("--partition", partition)->capture_default_str();
  app.add_option("--offset", offset,
                 "fetch offset (a local offset reads with sendfile, a remote one goes to S3; "
                 "beyond the end gets OFFSET_OUT_OF_RANGE)")
      ->required();
  app.add_option("--max-bytes", max_bytes, "partition and response max bytes")
      ->capture_default_str();
  app.add_option("--max-wait-ms", max_wait_ms)->capture_default_str();
  app.add_option("--connections", connections)->capture_default_str();
  app.add_option("--seconds", seconds)->capture_default_str();
  app.add_option("--client-id", client_id)->capture_default_str();
  double rate = 0;
  app.add_option("--rate", rate,
                 "at most this many fetches per second in all (0: as fast as "
                 "the broker answers)")
      ->capture_default_str();
  uint64_t sent_total = 0;
  uint64_t client_ids = 0;
  app.add_option("--client-ids", client_ids,
                 "churn: each request uses the next of this many client-ids, "
                 "<client-id>-<n> (0: always --client-id)")
      ->capture_default_str();
  double latency_after = 0, latency_for = 0;
  app.add_option("--latency-after", latency_after,
                 "round-trip times count from this many seconds after the start (warm-up)")
      ->capture_default_str();
  app.add_option("--latency-for", latency_for,
                 "... for this many seconds (0: to the end): the caller's measured window")
      ->capture_default_str();
  bool incremental_sessions = false;
  app.add_flag("--incremental-sessions", incremental_sessions,
               "fetch as the Java client does: Fetch v11 in a fetch session per connection, "
               "the full request that opens it, then incremental ones");
  bool unchanged = false;
  app.add_flag("--sessions-unchanged", unchanged,
               "with --incremental-sessions: incremental requests list no partition (the "
               "session's own, at its offset, is read)");
  int partitions = 1;
  app.add_option("--partitions-per-fetch", partitions,
                 "each request lists this many partitions, --partition and the ones after it, "
                 "each at --offset (one consumer of them all; with --incremental-sessions, the "
                 "request that opens a session and those that list partitions); --max-bytes "
                 "still bounds the whole response")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  size_t produce_bytes = 0;
  app.add_option("--produce-bytes", produce_bytes,
                 "send Produce requests of this many bytes instead of fetches (a broker run with "
                 "--accept-produce answers them; fetchcost's receive path on large requests)")
      ->capture_default_str();
  bool sessionless_v11 = false;
  app.add_flag("--sessionless-v11", sessionless_v11,
               "without --incremental-sessions: Fetch v11 with session id 0 and epoch -1, as "
               "librdkafka sends (else v4)");
  CLI11_PARSE(app, argc, argv);
  if (incremental_sessions && sessionless_v11) {
    std::fprintf(stderr, "tiered-broker-load: --sessionless-v11 is for sessionless fetches\n");
    return 2;
  }
  uint64_t sent = 0;
  const SessionFields v11_sessionless{0, -1, true};
  const SessionFields* sessionless = sessionless_v11 ? &v11_sessionless : nullptr;
  const std::string produce =
      produce_bytes ? produce_request(client_id, topic, partition, produce_bytes) : "";
  auto next_request = [&](Conn& c) -> const std::string& {
    static std::string churned;
    if (!produce.empty()) return produce;
    if (incremental_sessions) {
      const SessionFields session{c.session_id, c.next_epoch, !unchanged || c.next_epoch == 0};
      churned = fetch_request(client_id, topic, partition, offset, max_wait_ms, max_bytes,
                              c.correlation, &session, partitions);
      ++c.correlation;
      return churned;
    }
    if (client_ids == 0)
      return req_fixed(client_id, topic, partition, offset, max_wait_ms, max_bytes, sessionless,
                       partitions);
    churned = fetch_request(client_id + "-" + std::to_string(sent++ % client_ids), topic, partition,
                            offset, max_wait_ms, max_bytes, 1, sessionless, partitions);
    return churned;
  };

  int ep = epoll_create1(0);
  std::vector<Conn> conns(connections);
  for (int i = 0; i < connections; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    inet_pton(AF_INET, host.c_str(), &a.sin_addr);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      std::perror("connect");
      return 1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conns[i].fd = fd;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u32 = uint32_t(i);
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    const std::string& req = next_request(conns[i]);
    ++sent_total;
    conns[i].asked = std::chrono::steady_clock::now();
    if (write(fd, req.data(), req.size()) != ssize_t(req.size())) return 1;
  }
  auto start = std::chrono::steady_clock::now();
  auto after = [](double seconds) {
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(seconds));
  };
  const auto window_from = start + after(latency_after);
  const auto window_to = latency_for > 0 ? window_from + after(latency_for)
                                         : std::chrono::steady_clock::time_point::max();
  std::vector<uint32_t> rtt_us;  // round trips that ended in the window
  rtt_us.reserve(1 << 20);
  auto end = start + std::chrono::duration<double>(seconds);
  uint64_t responses = 0, bytes = 0;
  std::vector<epoll_event> events(connections);
  char buf[1 << 16];
  // --rate: a connection whose answer came early waits here for its next request.
  std::vector<int> idle;
  auto due = [&] {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return rate <= 0 || double(sent_total) < rate * elapsed;
  };
  while (std::chrono::steady_clock::now() < end) {
    while (!idle.empty() && due()) {
      Conn& c = conns[idle.back()];
      idle.pop_back();
      const std::string& req = next_request(c);
      ++sent_total;
      c.asked = std::chrono::steady_clock::now();
      if (write(c.fd, req.data(), req.size()) != ssize_t(req.size())) return 1;
    }
    int n = epoll_wait(ep, events.data(), connections, idle.empty() ? 100 : 1);
    for (int i = 0; i < n; ++i) {
      Conn& c = conns[events[i].data.u32];
      ssize_t r = read(c.fd, buf, sizeof buf);
      if (r <= 0) {
        std::fprintf(stderr, "broker closed a connection\n");
        return 1;
      }
      c.rbuf.append(buf, size_t(r));
      while (c.rbuf.size() >= 4) {
        uint32_t size = ntohl(*reinterpret_cast<const uint32_t*>(c.rbuf.data()));
        if (c.rbuf.size() < 4 + size) break;
        if (incremental_sessions && !take_session(c)) return 1;
        c.rbuf.erase(0, 4 + size);
        responses++;
        bytes += 4 + size;
        const auto now = std::chrono::steady_clock::now();
        if (now >= window_from && now < window_to)
          rtt_us.push_back(uint32_t(
              std::chrono::duration_cast<std::chrono::microseconds>(now - c.asked).count()));
        if (!due()) {
          idle.push_back(int(events[i].data.u32));
          continue;
        }
        const std::string& req = next_request(c);
        ++sent_total;
        c.asked = now;
        if (write(c.fd, req.data(), req.size()) != ssize_t(req.size())) return 1;
      }
    }
  }
  auto percentile = [&](double q) -> double {
    if (rtt_us.empty()) return -1;
    const size_t k = std::min(rtt_us.size() - 1, size_t(q * double(rtt_us.size())));
    std::nth_element(rtt_us.begin(), rtt_us.begin() + long(k), rtt_us.end());
    return rtt_us[k];
  };
  const double p50 = percentile(0.50), p99 = percentile(0.99);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "{\"fetch_requests_per_second\": %.0f, \"responses\": %llu, \"response_mib\": %.1f, "
      "\"connections\": %d, \"seconds\": %.2f, \"client_ids_used\": %llu, \"rtt_p50_us\": %.0f, "
      "\"rtt_p99_us\": %.0f, \"rtt_samples\": %zu}\n",
      double(responses) / took, static_cast<unsigned long long>(responses),
      double(bytes) / (1 << 20), connections, took,
      static_cast<unsigned long long>(client_ids ? std::min(sent, client_ids) : 1), p50, p99,
      rtt_us.size());
  return 0;
}
