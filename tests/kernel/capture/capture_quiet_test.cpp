// Quiet fetches (Options::skip_quiet_fetches, sock variant): a sessionless Fetch request is held
// until its response starts, and left out with the response when the target made no send on a
// connection other than a Kafka client's meanwhile. The real BPF programs on a loopback Kafka
// connection whose both ends the target owns, with a second connection standing in for the
// object store.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "harness.h"
#include "testing.h"

namespace fc::capture_test {
namespace {

using capture::Variant;

void put16(std::string& s, std::uint16_t v) {
  s.push_back(char(v >> 8));
  s.push_back(char(v));
}
void put32(std::string& s, std::uint32_t v) {
  put16(s, std::uint16_t(v >> 16));
  put16(s, std::uint16_t(v));
}
void put64(std::string& s, std::uint64_t v) {
  put32(s, std::uint32_t(v >> 32));
  put32(s, std::uint32_t(v));
}

// A Fetch request as a consumer writes it, of `partitions` partitions of one topic: a version
// before sessions (4), v11, or a flexible version (12 and later: compact arrays, tagged fields),
// with the session id and epoch given (0 and -1: sessionless, as librdkafka sends). Without
// `lists` it lists no topic, as a Java consumer's incremental fetch does when none of its
// positions moved.
std::string fetch_request(std::int16_t version, std::int32_t correlation, std::int32_t session_id,
                          std::int32_t epoch, bool lists = true, std::uint32_t partitions = 1) {
  const bool flexible = version >= 12;
  std::string b;
  put16(b, 1);
  put16(b, std::uint16_t(version));
  put32(b, std::uint32_t(correlation));
  const std::string client = "quiet-consumer";
  put16(b, std::uint16_t(client.size()));
  b += client;
  if (flexible) b.push_back(0);             // header tagged fields
  if (version < 15) put32(b, 0xffffffffu);  // replica_id -1
  put32(b, 500);                            // max_wait_ms
  put32(b, 1);                              // min_bytes
  put32(b, 52428800);                       // max_bytes
  b.push_back(0);                           // isolation_level
  if (version >= 7) {
    put32(b, std::uint32_t(session_id));
    put32(b, std::uint32_t(epoch));
  }
  // An array's count: int32, or from v12 an unsigned varint of count + 1.
  auto count = [&](std::uint32_t n) {
    if (!flexible) return put32(b, n);
    for (++n; n >= 0x80; n >>= 7) b.push_back(char(0x80 | (n & 0x7f)));
    b.push_back(char(n));
  };
  count(lists ? 1 : 0);  // topics
  if (lists) {
    const std::string topic = "orders";
    if (version >= 13) {
      b += std::string(16, '\x07');  // topic id
    } else {
      flexible ? b.push_back(char(topic.size() + 1)) : put16(b, std::uint16_t(topic.size()));
      b += topic;
    }
    count(partitions);
    for (std::uint32_t p = 0; p < partitions; ++p) {
      put32(b, p);                              // partition
      if (version >= 9) put32(b, 0xffffffffu);  // current_leader_epoch
      put64(b, 4242 + p);                       // fetch_offset
      if (flexible) put32(b, 0xffffffffu);      // last_fetched_epoch
      if (version >= 5) put64(b, 0);            // log_start_offset
      put32(b, 1048576);                        // partition_max_bytes
      if (flexible) b.push_back(0);             // the partition's tagged fields
    }
    if (flexible) b.push_back(0);  // the topic's tagged fields
  }
  if (version >= 7) count(0);  // forgotten_topics_data
  if (flexible) {
    b.push_back(1);  // rack_id ""
    b.push_back(0);  // tagged fields
  } else if (version >= 11) {
    put16(b, 0);  // rack_id ""
  }
  std::string framed;
  put32(framed, std::uint32_t(b.size()));
  return framed + b;
}

// A request of API `key` from client `client` (a header of 14 bytes and the client id), its body
// `body`, after its size prefix.
std::string framed_request(std::uint16_t key, std::uint16_t version, std::int32_t correlation,
                           const std::string& client, const std::string& body) {
  std::string b;
  put16(b, key);
  put16(b, version);
  put32(b, std::uint32_t(correlation));
  put16(b, std::uint16_t(client.size()));
  b += client + body;
  std::string framed;
  put32(framed, std::uint32_t(b.size()));
  return framed + b;
}

// Another request (an ApiVersions-like header of key 18): never held.
std::string other_request(std::int32_t correlation) {
  return framed_request(18, 3, correlation, "test", std::string(10, 'x'));
}

// A Produce request (key 0) of `size` bytes in all, its records a pattern: never held.
std::string produce_request(std::int32_t correlation, std::size_t size) {
  const std::string client = "producer";
  return framed_request(0, 9, correlation, client,
                        pattern(size - 14 - client.size(), unsigned(correlation)));
}

// `count` ListOffsets-sized requests (key 2, 52 bytes) numbered from `correlation`, and then,
// with `fetch`, a sessionless Fetch of 35 partitions: what a client wrote in one segment.
std::string burst(std::int32_t correlation, int count, bool fetch) {
  std::string out;
  for (int i = 0; i < count; ++i)
    out += framed_request(2, 1, correlation + i, "kcat", std::string(34, 'o'));
  if (fetch) out += fetch_request(11, correlation + count, 0, -1, true, 35);
  return out;
}

// A response: a header of `head` bytes (its size prefix first) written with writev, then, if
// `file` > 0, that many bytes of records by sendfile.
struct Response {
  std::string head;
  std::string file;
};
Response response(std::size_t head, std::size_t file, unsigned seed) {
  Response r{pattern(head, seed), pattern(file, seed + 1)};
  std::string prefix;
  put32(prefix, std::uint32_t(head + file - 4));
  r.head.replace(0, 4, prefix);
  return r;
}

bool send_response(int fd, const Response& r) {
  iovec iov{const_cast<char*>(r.head.data()), r.head.size()};
  if (writev(fd, &iov, 1) != ssize_t(r.head.size())) return false;
  if (r.file.empty()) return true;
  char path[] = "/tmp/fc-quiet-XXXXXX";
  int f = mkstemp(path);
  if (f < 0) return false;
  unlink(path);
  bool ok = write(f, r.file.data(), r.file.size()) == ssize_t(r.file.size());
  off_t at = 0;
  ok = ok && sendfile(fd, f, &at, r.file.size()) == ssize_t(r.file.size());
  close(f);
  return ok;
}

// One exchange on the Kafka pair: the client writes `request`; the broker side reads it whole
// (or, `split`, its 4-byte prefix and then the rest, as a JVM broker does; or, `one_iovec`,
// with recvmsg into one buffer); with `store_send` it writes to the object-store stand-in (a GET)
// before it answers; the client reads the answer.
struct Exchange {
  std::string request;
  bool split = false;
  bool store_send = false;
  Response answer;
  bool one_iovec = false;
};

// The client writes the exchange's request and the broker side reads it.
bool take_request(const Pair& kafka, const Exchange& e) {
  const std::size_t n = e.request.size();
  if (write(kafka.client, e.request.data(), n) != ssize_t(n) || !wait_inq(kafka.server, n))
    return false;
  std::string got(n, '\0');
  if (e.split) {
    if (read(kafka.server, got.data(), 4) != 4 ||
        read(kafka.server, got.data() + 4, n - 4) != ssize_t(n - 4))
      return false;
  } else if (e.one_iovec) {
    iovec iov{got.data(), n};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    if (recvmsg(kafka.server, &m, 0) != ssize_t(n)) return false;
  } else if (read(kafka.server, got.data(), n) != ssize_t(n)) {
    return false;
  }
  return got == e.request;
}

bool send_get(const Pair& store) {
  const std::string get = "GET /orders/0 HTTP/1.1\r\n\r\n";
  std::string sink(get.size(), '\0');
  return write(store.client, get.data(), get.size()) == ssize_t(get.size()) &&
         wait_inq(store.server, get.size()) &&
         read(store.server, sink.data(), sink.size()) == ssize_t(sink.size());
}

// The broker side answers and the client reads the answer.
bool give_answer(const Pair& kafka, const Exchange& e) {
  if (!send_response(kafka.server, e.answer)) return false;
  const std::size_t total = e.answer.head.size() + e.answer.file.size();
  std::string sink(total, '\0');
  return wait_inq(kafka.client, total) && read(kafka.client, sink.data(), total) == ssize_t(total);
}

bool run_exchange(const Pair& kafka, const Pair& store, const Exchange& e) {
  return take_request(kafka, e) && (!e.store_send || send_get(store)) && give_answer(kafka, e);
}

// Each answer carries its request's correlation id, as Kafka's do.
std::vector<Exchange> answered(std::vector<Exchange> list) {
  for (auto& e : list) e.answer.head.replace(4, 4, e.request.substr(8, 4));
  return list;
}

// What happens on the Kafka connection, in order; which exchanges are quiet is in kQuiet.
std::vector<Exchange> exchanges() {
  return answered({
      {fetch_request(11, 1, 0, -1), false, false, response(30, 1000, 10)},  // quiet
      {fetch_request(4, 2, 0, -1), true, false, response(60, 0, 20)},       // quiet, read split
      {fetch_request(11, 3, 0, -1), false, true, response(30, 2000, 30)},   // a GET in between
      {fetch_request(11, 4, 5, 3), false, false, response(30, 500, 40)},    // incremental
      {other_request(5), false, false, response(40, 0, 50)},                // not a fetch
      {fetch_request(11, 6, 0, -1), true, false, response(24, 700, 60)},    // quiet, read split
      {fetch_request(11, 7, 0, -1), false, true, response(24, 0, 70)},      // a GET in between
      // A Java consumer's incremental fetches whose positions did not move (they list no
      // topic) are quiet too; ones that list a partition, open or close a session are not.
      {fetch_request(11, 10, 5, 4, false), false, false, response(30, 0, 100)},   // quiet
      {fetch_request(12, 11, 5, 5, false), true, false, response(30, 0, 110)},    // quiet, split
      {fetch_request(17, 12, 5, 6, false), false, true, response(30, 900, 120)},  // a GET
      {fetch_request(17, 13, 5, 7), false, false, response(30, 800, 130)},  // lists a partition
      {fetch_request(12, 14, 5, 8), false, false, response(30, 0, 140)},    // lists a partition
      {fetch_request(17, 15, 5, -1, false), false, false, response(30, 0, 150)},  // closes it
      {fetch_request(13, 16, 0, 0), false, false, response(30, 0, 160)},          // opens a session
      // Sessionless fetches of many partitions: held up to 4 KiB (64 partitions in v11, as a
      // librdkafka consumer of 64 partitions on one broker sends, 1.9 KiB; 200 in v4, 3.3 KiB).
      {fetch_request(11, 17, 0, -1, true, 64), false, false, response(30, 0, 170)},   // quiet
      {fetch_request(4, 18, 0, -1, true, 200), true, false, response(30, 0, 180)},    // quiet
      {fetch_request(12, 19, 0, -1, true, 64), false, true, response(30, 500, 190)},  // a GET
      {fetch_request(11, 20, 0, -1, true, 150), false, false, response(30, 0, 200)},  // > 4 KiB
      // Produce requests over 512 bytes are not copied into a slot: their API key is read
      // first, so one read split has its size prefix's record apart from its rest's.
      {produce_request(21, 2000), false, false, response(30, 0, 210)},
      {produce_request(22, 1500), true, false, response(30, 0, 220)},
      // Past the port's 4 KiB capture: a Fetch request is captured whole (attribution needs
      // every partition it lists), read whole (the one of 150 partitions above) or after its
      // size prefix (700 partitions in v4, 11 KiB); a Produce request is cut at 4 KiB.
      {fetch_request(4, 23, 0, -1, true, 700), true, false, response(30, 0, 230)},
      {produce_request(24, 6000), false, false, response(30, 0, 240)},
      // A burst of small requests read in one call with a Fetch behind them, as kcat's first
      // ListOffsets requests and Fetch came (7 KiB): captured whole, the Fetch with them. A
      // burst with no Fetch in it is cut at 4 KiB.
      {burst(25, 111, true), false, false, response(30, 0, 250)},
      {burst(137, 111, false), false, false, response(30, 0, 260)},
      // The same two read with recvmsg into one buffer.
      {burst(249, 111, true), false, false, response(30, 0, 270), true},
      {burst(361, 111, false), false, false, response(30, 0, 280), true},
  });
}
const bool kQuiet[] = {true,  true,  false, false, false, true,  false, true,  true,
                       false, false, false, false, false, true,  true,  false, false,
                       false, false, false, false, false, false, false, false};

// Then a client that pipelines: two sessionless fetches read before either is answered. The
// first is held, the second's arrival reports it; the first's answer (its correlation id is not
// the held one's) reports the second: both have their records, nothing is left out.
std::vector<Exchange> pipelined() {
  return answered({{fetch_request(11, 8, 0, -1), false, false, response(30, 300, 80)},
                   {fetch_request(11, 9, 0, -1), false, false, response(30, 400, 90)}});
}

bool run_pipelined(const Pair& kafka) {
  std::size_t answers = 0;
  for (const auto& e : pipelined()) {
    const std::size_t n = e.request.size();
    std::string got(n, '\0');
    if (write(kafka.client, e.request.data(), n) != ssize_t(n) || !wait_inq(kafka.server, n) ||
        read(kafka.server, got.data(), n) != ssize_t(n) || got != e.request)
      return false;
    answers += e.answer.head.size() + e.answer.file.size();
  }
  for (const auto& e : pipelined())
    if (!send_response(kafka.server, e.answer)) return false;
  std::string sink(answers, '\0');
  return wait_inq(kafka.client, answers) &&
         read(kafka.client, sink.data(), answers) == ssize_t(answers);
}

int quiet_scenario(Child& self) {
  if (!pin_to_this_cpu()) return 9;  // the checks below follow the records' delivery order
  Pair kafka, store;
  if (!open_pair(kafka) || !open_pair(store)) return 10;
  self.report(kafka.listen_port);
  self.wait_parent();  // the listener is a Kafka port now
  for (const auto& e : exchanges())
    if (!run_exchange(kafka, store, e)) return 11;
  if (!run_pipelined(kafka)) return 12;
  self.report(kafka.client_port);
  self.report(store.client_port);
  self.wait_parent();
  close(kafka.server);
  close(kafka.client);
  usleep(50000);
  self.report(0);
  self.wait_parent();
  return 0;
}

// The records of one direction of connection `conn`, real and stand-in, in delivery order.
std::vector<Record> direction_of(const Collector& col, fc_u64 conn, fc_u8 direction) {
  std::vector<Record> out;
  for (const auto& r : col.records)
    if (r.is_data && r.common.conn_id == conn && r.data.direction == direction) out.push_back(r);
  return out;
}

// Checks that `records` tile the stream `bytes` from its start: every byte once, captured bytes
// equal to what was sent; returns the stand-ins for whole messages left out, in order.
std::vector<Record> check_tiles(std::vector<Record> records, const std::string& bytes) {
  std::sort(records.begin(), records.end(),
            [](const Record& a, const Record& b) { return a.data.stream_pos < b.data.stream_pos; });
  std::vector<Record> skipped;
  std::uint64_t at = 0;
  for (const auto& r : records) {
    INFO("record at " << r.data.stream_pos << " length " << r.data.length);
    CHECK(r.data.stream_pos == at);
    std::size_t off = 0;
    for (const auto& seg : r.segments) {
      REQUIRE(r.data.stream_pos + seg.offset + seg.length <= bytes.size());
      CHECK(r.payload.substr(off, seg.length) ==
            bytes.substr(r.data.stream_pos + seg.offset, seg.length));
      off += seg.length;
    }
    if (r.skipped) skipped.push_back(r);
    at = r.data.stream_pos + r.data.length;
  }
  CHECK(at == bytes.size());
  return skipped;
}

// The sock variant with quiet fetches left out.
capture::Options quiet_options() {
  return {.ring_bytes_per_cpu = 1 << 20,
          .default_policy = {4096, 4096},
          .variant = Variant::kSockTracepoints,
          .skip_quiet_fetches = true};
}

// Watches `target`, starts it, makes its listener a Kafka port and waits until its exchanges
// are done: the ports it reports (its listener, its Kafka client's, its store client's).
struct Ports {
  std::uint16_t listen = 0, client = 0, store = 0;
};
Ports run_scenario(Collector& col, Child& target) {
  Ports ports;
  ports.listen = watch_kafka_listener(col, target);
  ports.client = static_cast<std::uint16_t>(target.receive());
  ports.store = static_cast<std::uint16_t>(target.receive());
  return ports;
}

// Appends `count` sessionless fetches of `version` (read `split` or whole, each causing a GET
// or not), numbered on from `correlation`, their answers of a 30-byte header and `file` bytes.
void add_fetches(std::vector<Exchange>& list, std::int16_t version, std::int32_t& correlation,
                 int count, bool split, bool store_send, std::size_t file) {
  for (int i = 0; i < count; ++i, ++correlation)
    list.push_back({fetch_request(version, correlation, 0, -1), split, store_send,
                    response(30, file, unsigned(correlation))});
}

// A consumer reading from the remote tier beside a local one, on two connections to the same
// Kafka port. The remote consumer's first FC_PAUSE_AFTER_REPORTS fetches each cause a GET, which
// pauses its holds. In the pause, each FC_PAUSE_PROBE_EVERY-th fetch (a probe, held) causes a
// GET too, and the others are quiet and read split (a size prefix, then the rest): the last
// probe is the FC_PAUSE_AFTER_REPORTS-th report in a row, which pauses it again. In the second
// pause every fetch is quiet and read split, so its first probe is left out and ends the pause;
// then a fetch with a GET, one more quiet fetch read whole (held again: left out) and one with a
// GET. The local consumer's first FC_PAUSE_AFTER_REPORTS - 1 fetches are held while the remote
// consumer's GETs leave, then it makes one quiet fetch and one with a GET of its own.
std::vector<Exchange> remote_consumer() {
  std::vector<Exchange> list;
  std::int32_t correlation = 100;
  add_fetches(list, 11, correlation, FC_PAUSE_AFTER_REPORTS, false, true, 200);
  for (int probe = 0; probe < FC_PAUSED_REQUESTS / FC_PAUSE_PROBE_EVERY; ++probe) {
    add_fetches(list, 11, correlation, FC_PAUSE_PROBE_EVERY - 1, true, false, 100);
    add_fetches(list, 11, correlation, 1, false, true, 200);
  }
  add_fetches(list, 11, correlation, FC_PAUSE_PROBE_EVERY, true, false, 100);  // the last quiet
  add_fetches(list, 11, correlation, 1, false, true, 200);
  add_fetches(list, 11, correlation, 1, false, false, 300);  // quiet
  add_fetches(list, 11, correlation, 1, false, true, 200);
  return answered(list);
}

std::vector<Exchange> local_consumer() {
  std::vector<Exchange> list;
  std::int32_t correlation = 1000;
  add_fetches(list, 4, correlation, FC_PAUSE_AFTER_REPORTS - 1, false, false, 100);
  add_fetches(list, 4, correlation, 1, false, false, 500);  // quiet
  add_fetches(list, 4, correlation, 1, false, true, 200);
  return answered(list);
}

int mixed_scenario(Child& self) {
  Pair remote, local, store;
  if (!open_pair(remote)) return 10;
  local.listener = remote.listener;  // a second connection to the same Kafka port
  if (!connect_pair(local) || !open_pair(store)) return 10;
  self.report(remote.listen_port);
  self.wait_parent();
  const auto r = remote_consumer();
  const auto l = local_consumer();
  // The local consumer's first fetches are in the broker while the remote one's GETs leave.
  for (std::size_t i = 0; i + 1 < FC_PAUSE_AFTER_REPORTS; ++i)
    if (!take_request(local, l[i]) || !run_exchange(remote, store, r[i]) ||
        !give_answer(local, l[i]))
      return 11;
  for (std::size_t i = FC_PAUSE_AFTER_REPORTS - 1; i < l.size(); ++i)
    if (!run_exchange(local, store, l[i])) return 12;
  for (std::size_t i = FC_PAUSE_AFTER_REPORTS - 1; i < r.size(); ++i)
    if (!run_exchange(remote, store, r[i])) return 13;
  self.report(remote.client_port);
  self.report(local.client_port);
  self.report(store.client_port);
  self.wait_parent();
  self.report(0);
  self.wait_parent();
  return 0;
}

}  // namespace

TEST_CASE("quiet fetches are left out whole; a store send reports the held request first") {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  Collector col(quiet_options());
  Child target(quiet_scenario);
  const auto [listen_port, client_port, store_port] = run_scenario(col, target);
  col.drain(5);
  const std::size_t before_close = col.records.size();
  target.nod();
  CHECK(target.receive() == 0);
  col.drain(5);
  target.nod();
  CHECK(target.wait() == 0);

  const fc_u64 conn = conn_by_ports(col, target.pid(), listen_port, client_port);
  REQUIRE(conn != 0);
  const auto all = exchanges();
  std::string requests, responses;
  std::vector<std::uint64_t> skipped_requests, skipped_responses;  // lengths of each quiet run
  bool in_run = false;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const auto& e = all[i];
    const std::size_t answer = e.answer.head.size() + e.answer.file.size();
    if (kQuiet[i]) {
      if (!in_run) {
        skipped_requests.push_back(0);
        skipped_responses.push_back(0);
      }
      skipped_requests.back() += e.request.size();
      skipped_responses.back() += answer;
    }
    in_run = kQuiet[i];
    requests += e.request;
    responses += e.answer.head + e.answer.file;
  }
  for (const auto& e : pipelined()) {
    requests += e.request;
    responses += e.answer.head + e.answer.file;
  }

  // Both streams: the records and the stand-ins tile them, every captured byte as sent. A run
  // of quiet fetches is reported by the next record in each direction.
  const auto skipped_in = check_tiles(direction_of(col, conn, FC_DIR_RECV), requests);
  const auto skipped_out = check_tiles(direction_of(col, conn, FC_DIR_SEND), responses);
  REQUIRE(skipped_in.size() == skipped_requests.size());
  REQUIRE(skipped_out.size() == skipped_responses.size());
  for (std::size_t i = 0; i < skipped_in.size(); ++i) {
    CHECK(skipped_in[i].data.source == FC_SRC_SKIPPED);
    CHECK(skipped_in[i].data.length == skipped_requests[i]);
    CHECK(skipped_out[i].data.length == skipped_responses[i]);
  }

  // The requests with a GET in their window were reported before the GET's record, and carry
  // what was left out before them; the incremental fetch and the other request were never held.
  fc_u64 store = 0;
  for (const auto& r : col.of(target.pid(), FC_EVENT_CONNECT))
    if (r.conn.local_port == store_port) store = r.common.conn_id;
  REQUIRE(store != 0);
  std::vector<std::size_t> request_at, get_at;  // delivery indexes
  std::vector<const Record*> request_records;
  for (std::size_t i = 0; i < col.records.size(); ++i) {
    const auto& r = col.records[i];
    if (!r.is_data || r.skipped) continue;
    if (r.common.conn_id == conn && r.data.direction == FC_DIR_RECV) {
      request_at.push_back(i);
      request_records.push_back(&r);
    }
    if (r.common.conn_id == store && r.data.direction == FC_DIR_SEND) get_at.push_back(i);
  }
  // Exchanges 3, 4, 5, 7, 10-14 and 17-26 (20 and 21 in two: a size prefix, its rest); the
  // two pipelined.
  REQUIRE(request_records.size() == 23);
  REQUIRE(get_at.size() == 4);
  CHECK(request_records[0]->payload == all[2].request);
  CHECK(request_records[0]->data.c.skipped_before == skipped_requests[0]);
  CHECK(request_at[0] < get_at[0]);
  CHECK(request_records[1]->payload == all[3].request);
  CHECK(request_records[2]->payload == all[4].request);
  CHECK(request_records[3]->payload == all[6].request);
  CHECK(request_records[3]->data.c.skipped_before == skipped_requests[1]);
  CHECK(request_at[3] < get_at[1]);
  CHECK(request_records[4]->payload == all[9].request);
  CHECK(request_records[4]->data.c.skipped_before == skipped_requests[2]);
  CHECK(request_at[4] < get_at[2]);
  for (std::size_t i = 5; i < 9; ++i) CHECK(request_records[i]->payload == all[i + 5].request);
  CHECK(request_records[9]->payload == all[16].request);
  CHECK(request_records[9]->data.c.skipped_before == skipped_requests[3]);
  CHECK(request_at[9] < get_at[3]);
  CHECK(request_records[10]->payload == all[17].request);
  CHECK(request_records[11]->payload == all[18].request);
  CHECK(request_records[12]->payload == all[19].request.substr(0, 4));
  CHECK(request_records[13]->payload == all[19].request.substr(4));
  CHECK(request_records[14]->payload == all[20].request.substr(0, 4));
  CHECK(request_records[15]->payload == all[20].request.substr(4));
  CHECK(request_records[16]->payload == all[21].request.substr(0, 4096));  // the port's policy
  CHECK(request_records[16]->data.length == all[21].request.size());
  CHECK(request_records[17]->payload == all[22].request);  // the burst with a Fetch, whole
  CHECK(request_records[18]->payload == all[23].request.substr(0, 4096));
  CHECK(request_records[18]->data.length == all[23].request.size());
  CHECK(request_records[19]->payload == all[24].request);  // the same, by recvmsg
  CHECK(request_records[20]->payload == all[25].request.substr(0, 4096));
  CHECK(request_records[20]->data.length == all[25].request.size());
  CHECK(request_records[21]->payload == pipelined()[0].request);
  CHECK(request_records[22]->payload == pipelined()[1].request);
  CHECK(col.capture->totals().quiet_fetches == 7);

  // The close reports every byte, the quiet fetches' included.
  bool closed = false;
  for (std::size_t i = before_close; i < col.records.size(); ++i) {
    const auto& r = col.records[i];
    if (r.common.kind == FC_EVENT_CLOSE && r.common.conn_id == conn) {
      closed = true;
      CHECK(r.conn.bytes[FC_DIR_RECV] == requests.size());
      CHECK(r.conn.bytes[FC_DIR_SEND] == responses.size());
    }
  }
  CHECK(closed);
}

TEST_CASE("without skip_quiet_fetches every fetch has its records") {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  Collector col({.ring_bytes_per_cpu = 1 << 20,
                 .default_policy = {4096, 4096},
                 .variant = Variant::kSockTracepoints});
  Child target(quiet_scenario);
  const auto ports = run_scenario(col, target);
  col.drain(5);
  target.nod();
  CHECK(target.receive() == 0);
  target.nod();
  CHECK(target.wait() == 0);
  const fc_u64 conn = conn_by_ports(col, target.pid(), ports.listen, ports.client);
  REQUIRE(conn != 0);
  std::string requests;
  for (const auto& e : exchanges()) requests += e.request;
  for (const auto& e : pipelined()) requests += e.request;
  const auto skipped = check_tiles(direction_of(col, conn, FC_DIR_RECV), requests);
  CHECK(skipped.empty());
  CHECK(col.capture->totals().quiet_fetches == 0);
}

TEST_CASE("a consumer whose fetches keep causing GETs is not held for a while; one beside it is") {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  Collector col(quiet_options());
  Child target(mixed_scenario);
  const auto listen_port = watch_kafka_listener(col, target);
  const auto remote_port = static_cast<std::uint16_t>(target.receive());
  const auto local_port = static_cast<std::uint16_t>(target.receive());
  target.receive();  // the store's
  col.drain(5);
  target.nod();
  CHECK(target.receive() == 0);
  target.nod();
  CHECK(target.wait() == 0);

  struct Consumer {
    std::uint16_t port;
    std::vector<Exchange> exchanges;
    std::vector<std::size_t> quiet;  // the indices of the fetches to be left out
  };
  const std::size_t probe_left_out =
      FC_PAUSE_AFTER_REPORTS + FC_PAUSED_REQUESTS + FC_PAUSE_PROBE_EVERY - 1;
  const Consumer consumers[] = {
      {remote_port, remote_consumer(), {probe_left_out, probe_left_out + 2}},
      {local_port, local_consumer(), {FC_PAUSE_AFTER_REPORTS - 1}}};
  for (const auto& c : consumers) {
    INFO("consumer on port " << c.port);
    const fc_u64 conn = conn_by_ports(col, target.pid(), listen_port, c.port);
    REQUIRE(conn != 0);
    std::string requests, responses;
    for (const auto& e : c.exchanges) {
      requests += e.request;
      responses += e.answer.head + e.answer.file;
    }
    // Every byte recorded but the quiet fetches', whose bytes the next record reports.
    const auto in = direction_of(col, conn, FC_DIR_RECV);
    const auto skipped_in = check_tiles(in, requests);
    const auto skipped_out = check_tiles(direction_of(col, conn, FC_DIR_SEND), responses);
    REQUIRE(skipped_in.size() == c.quiet.size());
    REQUIRE(skipped_out.size() == c.quiet.size());
    for (std::size_t k = 0; k < c.quiet.size(); ++k) {
      const Exchange& quiet = c.exchanges[c.quiet[k]];
      CHECK(skipped_in[k].data.length == quiet.request.size());
      CHECK(skipped_out[k].data.length == quiet.answer.head.size() + quiet.answer.file.size());
    }
    // One record per request, those read split while holds were paused included: a size
    // prefix read alone waits for its rest, as when the request is held.
    std::size_t whole = 0, prefixes = 0;
    for (const auto& rec : in) {
      whole += !rec.skipped && rec.data.length > 4;
      prefixes += !rec.skipped && rec.data.length == 4;
    }
    CHECK(whole == c.exchanges.size() - c.quiet.size());
    CHECK(prefixes == 0);
  }
  CHECK(col.capture->totals().quiet_fetches == 3);
  // The remote consumer's pause and its renewal; the local one's 7 reports in a row started none.
  CHECK(col.capture->totals().hold_pauses == 2);
}

}  // namespace fc::capture_test
