#include "broker.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <unordered_map>

#include "wire.h"

namespace tb {

using Clock = std::chrono::steady_clock;

namespace api {
constexpr int16_t kProduce = 0, kFetch = 1, kListOffsets = 2, kMetadata = 3, kOffsetCommit = 8,
                  kOffsetFetch = 9, kFindCoordinator = 10, kJoinGroup = 11, kHeartbeat = 12,
                  kLeaveGroup = 13, kSyncGroup = 14, kSaslHandshake = 17, kApiVersions = 18,
                  kSaslAuthenticate = 36;
}
namespace err {
constexpr int16_t kNone = 0, kOffsetOutOfRange = 1, kUnknownTopicOrPartition = 3,
                  kIllegalGeneration = 22, kUnknownMemberId = 25, kRebalanceInProgress = 27,
                  kUnsupportedVersion = 35, kKafkaStorageError = 56, kFetchSessionIdNotFound = 70,
                  kInvalidFetchSessionEpoch = 71, kUnknownTopicId = 100,
                  kInconsistentGroupProtocol = 23, kUnsupportedSaslMechanism = 33,
                  kIllegalSaslState = 34, kSaslAuthenticationFailed = 58;
}

struct ApiRange {
  int16_t key, min, max, first_flexible;
};
// What the simulator answers. librdkafka needs Produce >= 3 and Fetch >= 4 advertised before it
// uses record batch v2 even as a pure consumer; Produce itself is never served.
constexpr ApiRange kApis[] = {
    {api::kProduce, 3, 8, 9},
    {api::kFetch, 4, 17, 12},
    {api::kListOffsets, 0, 9, 6},
    {api::kMetadata, 0, 12, 9},
    {api::kOffsetCommit, 0, 8, 8},
    {api::kOffsetFetch, 0, 8, 6},
    {api::kFindCoordinator, 0, 5, 3},
    {api::kJoinGroup, 0, 9, 6},
    {api::kHeartbeat, 0, 4, 4},
    {api::kLeaveGroup, 0, 5, 4},
    {api::kSyncGroup, 0, 5, 4},
    {api::kApiVersions, 0, 3, 3},
    // Advertised only with --sasl-plain (SASL_PLAINTEXT): SaslHandshake then framed tokens in
    // SaslAuthenticate (what clients do after handshake v1; raw v0 tokens are not served).
    {api::kSaslHandshake, 0, 1, 99},
    {api::kSaslAuthenticate, 0, 1, 2},
};
static bool is_sasl(int16_t key) {
  return key == api::kSaslHandshake || key == api::kSaslAuthenticate;
}

static const ApiRange* find_api(int16_t key) {
  for (const auto& a : kApis)
    if (a.key == key) return &a;
  return nullptr;
}

static void name_thread(const std::string& name) {
  prctl(PR_SET_NAME, name.c_str(), 0, 0, 0);  // the kernel keeps 15 chars, as for the JVM
}

// ---------------------------------------------------------------------------------------------
// Requests and responses

struct ConnRef {
  int net = 0;
  uint64_t id = 0;
};

struct Request {
  ConnRef conn;
  int16_t api_key = 0, api_version = 0;
  int32_t correlation_id = 0;
  std::string client_id;
  std::string frame;  // the whole frame without the size prefix
  size_t body_offset = 0;
  bool flexible = false;
  int listener_port = 0;
  Clock::time_point arrival;
};

struct Piece {
  std::string bytes;  // used when fd < 0
  int fd = -1;
  uint64_t offset = 0, length = 0;
  uint64_t size() const { return fd >= 0 ? length : bytes.size(); }
};

struct Response {
  ConnRef conn;
  std::vector<Piece> pieces;
  bool close = false;
};

// Accumulates a response as pieces: inline bytes, file regions (sendfile) and separately held
// record buffers (their own iovec), then patches the size prefix.
class ResponseBuilder {
 public:
  ResponseBuilder(int32_t correlation_id, bool header_tags, bool flexible) : w(flexible) {
    w.i32(0);  // size, patched in finish()
    w.i32(correlation_id);
    if (header_tags) w.uvarint(0);
  }
  void add_file(int fd, uint64_t offset, uint64_t length) {
    flush();
    Piece p;
    p.fd = fd;
    p.offset = offset;
    p.length = length;
    pieces_.push_back(std::move(p));
  }
  void add_buffer(std::string data) {
    flush();
    Piece p;
    p.bytes = std::move(data);
    pieces_.push_back(std::move(p));
  }
  Response finish(ConnRef conn) {
    flush();
    uint64_t total = 0;
    for (const auto& p : pieces_) total += p.size();
    std::string& first = pieces_.front().bytes;
    uint32_t size = uint32_t(total - 4);
    for (int i = 0; i < 4; ++i) first[i] = char((size >> (24 - 8 * i)) & 0xff);
    return Response{conn, std::move(pieces_), false};
  }
  Writer w;

 private:
  void flush() {
    if (w.buf().empty()) return;
    Piece p;
    p.bytes = std::move(w.buf());
    w.buf().clear();
    pieces_.push_back(std::move(p));
  }
  std::vector<Piece> pieces_;
};

// ---------------------------------------------------------------------------------------------
// Small concurrency helpers

template <typename T>
class BlockingQueue {
 public:
  void push(T v) {
    {
      std::lock_guard lock(mu_);
      q_.push_back(std::move(v));
    }
    cv_.notify_one();
  }
  std::optional<T> pop() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return closed_ || !q_.empty(); });
    if (q_.empty()) return std::nullopt;
    T v = std::move(q_.front());
    q_.pop_front();
    return v;
  }
  void close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<T> q_;
  bool closed_ = false;
};

class Timer {
 public:
  void start() {
    thread_ = std::thread([this] {
      name_thread("kafka-scheduler");
      std::unique_lock lock(mu_);
      while (!stop_) {
        if (heap_.empty()) {
          cv_.wait(lock);
          continue;
        }
        auto when = heap_.top().when;
        if (Clock::now() < when) {
          cv_.wait_until(lock, when);
          continue;
        }
        auto fn = std::move(const_cast<Item&>(heap_.top()).fn);
        heap_.pop();
        lock.unlock();
        fn();
        lock.lock();
      }
    });
  }
  void at(Clock::time_point when, std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      heap_.push(Item{when, seq_++, std::move(fn)});
    }
    cv_.notify_one();
  }
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct Item {
    Clock::time_point when;
    uint64_t seq;
    std::function<void()> fn;
    bool operator<(const Item& o) const {
      return when != o.when ? when > o.when : seq > o.seq;  // min-heap
    }
  };
  std::mutex mu_;
  std::condition_variable cv_;
  std::priority_queue<Item> heap_;
  uint64_t seq_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// ---------------------------------------------------------------------------------------------
// Network threads

struct Conn {
  int fd = -1;
  SSL* ssl = nullptr;
  bool tls_handshaking = false;
  int listener_port = 0;
  std::string rbuf;
  size_t rpos = 0;
  std::deque<std::string> frames;
  bool inflight = false;
  std::deque<Response> out;
  size_t piece = 0;
  uint64_t piece_done = 0;
  std::string tls_out;  // TLS: the current response flattened (no sendfile through TLS)
  size_t tls_out_done = 0;
  bool epollout = false;
  bool closing = false;
};

class NetThread {
 public:
  NetThread(Broker* broker, int index) : broker_(broker), index_(index) {
    epfd_ = epoll_create1(EPOLL_CLOEXEC);
    evfd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = 0;
    epoll_ctl(epfd_, EPOLL_CTL_ADD, evfd_, &ev);
  }
  ~NetThread() {
    for (auto& [id, c] : conns_) close_fd(c);
    close(epfd_);
    close(evfd_);
  }
  void start() {
    thread_ = std::thread([this] { run(); });
  }
  void join() {
    wake();
    if (thread_.joinable()) thread_.join();
  }
  void add_connection(int fd, SSL* ssl, int listener_port) {
    {
      std::lock_guard lock(mu_);
      new_conns_.push_back({fd, ssl, listener_port});
    }
    wake();
  }
  void respond(Response r) {
    bool was_empty;
    {
      std::lock_guard lock(mu_);
      was_empty = responses_.empty();
      responses_.push_back(std::move(r));
    }
    if (was_empty) wake();
  }
  size_t connection_count() {
    std::lock_guard lock(mu_);
    return conn_count_;
  }

 private:
  void wake() {
    uint64_t one = 1;
    [[maybe_unused]] auto n = write(evfd_, &one, sizeof one);
  }
  void run();
  void on_readable(uint64_t id, Conn& c);
  void on_readable_as_jvm(uint64_t id, Conn& c);
  void parse_frames(Conn& c);
  void dispatch_next(uint64_t id, Conn& c);
  void flush(uint64_t id, Conn& c);
  bool flush_plain(Conn& c);
  bool flush_tls(Conn& c);
  void set_epollout(uint64_t id, Conn& c, bool on) {
    if (c.epollout == on) return;
    c.epollout = on;
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLRDHUP | (on ? uint32_t(EPOLLOUT) : 0u);
    ev.data.u64 = id;
    epoll_ctl(epfd_, EPOLL_CTL_MOD, c.fd, &ev);
  }
  void close_fd(Conn& c) {
    if (c.ssl) SSL_free(c.ssl);
    c.ssl = nullptr;
    if (c.fd >= 0) close(c.fd);
    c.fd = -1;
  }
  void drop(uint64_t id) {
    auto it = conns_.find(id);
    if (it == conns_.end()) return;
    close_fd(it->second);
    conns_.erase(it);
    std::lock_guard lock(mu_);
    conn_count_ = conns_.size();
  }

  struct NewConn {
    int fd;
    SSL* ssl;
    int listener_port;
  };
  Broker* broker_;
  int index_;
  int epfd_, evfd_;
  std::thread thread_;
  std::mutex mu_;
  std::vector<NewConn> new_conns_;
  std::vector<Response> responses_;
  size_t conn_count_ = 0;
  std::unordered_map<uint64_t, Conn> conns_;
  uint64_t next_id_ = 1;
};

// ---------------------------------------------------------------------------------------------
// Fetch sessions (incremental fetch, KIP-227)

constexpr size_t kMaxFetchSessions = 1000;

struct SessionPartition {
  int64_t fetch_offset = 0;
  int32_t max_bytes = 0;
  int64_t last_hwm = -1, last_log_start = -1;
};

struct FetchSession {
  std::mutex mu;
  int32_t id = 0;
  int32_t next_epoch = 1;
  // (topic, partition) in insertion order; topic is the topic name (ids resolved on entry).
  std::vector<std::pair<std::string, int32_t>> order;
  std::map<std::pair<std::string, int32_t>, SessionPartition> parts;
  std::atomic<int64_t> last_used{0};  // steady clock ticks; read under sessions_mu_
};

// ---------------------------------------------------------------------------------------------
// Group coordinator (one broker, classic protocol)

struct Deferred {
  ConnRef conn;
  int16_t api_version;
  int32_t correlation_id;
  bool flexible;
};

struct Member {
  std::string id, client_id;
  std::optional<std::string> instance_id;
  std::vector<std::pair<std::string, std::string>> protocols;  // name, metadata
  int32_t session_timeout_ms = 10000, rebalance_timeout_ms = 30000;
  Clock::time_point last_seen;
  std::optional<Deferred> pending_join, pending_sync;
  std::string assignment;
};

struct Group {
  enum State { kEmpty, kPreparing, kCompleting, kStable } state = kEmpty;
  int32_t generation = 0;
  std::string protocol_type, protocol, leader;
  std::map<std::string, Member> members;
  Clock::time_point join_deadline, rebalance_deadline;
  bool initial_rebalance = false;
  std::map<std::pair<std::string, int32_t>, std::pair<int64_t, std::optional<std::string>>> offsets;
};

// ---------------------------------------------------------------------------------------------

class Broker {
 public:
  struct FetchPlan;
  Broker(BrokerConfig config, LogStore* log, Ledger* ledger)
      : config_(std::move(config)), log_(log), ledger_(ledger) {}
  std::string start();
  void stop();
  void respond(Response r) { nets_[r.conn.net]->respond(std::move(r)); }
  void submit(Request r) {
    auto req = std::make_shared<Request>(std::move(r));
    requests_.push([this, req] { handle_guarded(*req); });
  }
  void run_on_handler(std::function<void()> fn) { requests_.push(std::move(fn)); }
  // New records were appended: parked fetches run again now instead of at their deadline.
  void data_appended() {
    std::vector<std::shared_ptr<FetchPlan>> plans;
    {
      std::lock_guard lock(parked_mu_);
      plans.swap(parked_);
    }
    for (auto& plan : plans) run_on_handler([this, plan] { execute_fetch(plan, false); });
  }
  int port() const { return port_; }
  int tls_port() const { return tls_port_; }
  nlohmann::json stats();
  nlohmann::json groups();
  void handle(Request& r);
  void handle_guarded(Request& r);
  int16_t advertised_max(const ApiRange& a) const {
    return a.key == api::kFetch ? std::min<int16_t>(a.max, int16_t(config_.fetch_max_version))
                                : a.max;
  }

 private:
  friend class NetThread;
  int listen_on(int port, std::string* error);
  void accept_loop();
  void handler_loop(int n);
  void remote_loop(int n);

  void api_versions(Request& r, Reader& rd);
  void metadata(Request& r, Reader& rd);
  void sasl_handshake(Request& r, Reader& rd);
  void sasl_authenticate(Request& r, Reader& rd);
  void list_offsets(Request& r, Reader& rd);
  void fetch(Request& r, Reader& rd);
  void find_coordinator(Request& r, Reader& rd);
  void join_group(Request& r, Reader& rd);
  void sync_group(Request& r, Reader& rd);
  void heartbeat(Request& r, Reader& rd);
  void produce_dropped(Request& r);
  void leave_group(Request& r, Reader& rd);
  void offset_commit(Request& r, Reader& rd);
  void offset_fetch(Request& r, Reader& rd);

  void execute_fetch(std::shared_ptr<FetchPlan> plan, bool final_attempt);
  void finish_fetch(std::shared_ptr<FetchPlan> plan);

  // Group coordinator pieces; called with groups_mu_ held.
  void maybe_complete_join(Group& g, const std::string& group_id, Clock::time_point now);
  void start_rebalance(Group& g, Clock::time_point now);
  void group_tick();
  ResponseBuilder builder(const Deferred& d) {
    return ResponseBuilder(d.correlation_id, d.flexible, d.flexible);
  }
  void send_join(const Group& g, const Member& m, const Deferred& d, int16_t error);
  void send_sync(const Group& g, const Deferred& d, int16_t error, const std::string& assignment);

  BrokerConfig config_;
  LogStore* log_;
  Ledger* ledger_;
  int listen_fd_ = -1, tls_listen_fd_ = -1, port_ = 0, tls_port_ = 0;
  SSL_CTX* tls_ctx_ = nullptr;
  std::atomic<bool> stopping_{false};
  std::thread acceptor_;
  std::vector<std::unique_ptr<NetThread>> nets_;
  std::vector<std::thread> handlers_, readers_;
  BlockingQueue<std::function<void()>> requests_;  // request handler work
  BlockingQueue<std::function<void()>> remote_tasks_;
  Timer timer_;
  std::thread group_ticker_;

  std::mutex parked_mu_;
  std::vector<std::shared_ptr<FetchPlan>> parked_;

  std::mutex sessions_mu_;
  std::unordered_map<int32_t, std::shared_ptr<FetchSession>> sessions_;
  int32_t next_session_id_ = 1;

  std::mutex groups_mu_;
  std::map<std::string, Group> groups_;
  uint64_t next_member_ = 1;

  std::atomic<uint64_t> api_version_counts_[19][18] = {};  // [api key][version], for /stats
  std::atomic<uint64_t> stat_sasl_[2] = {0, 0};            // SASL/PLAIN authentications ok, failed
  std::atomic<uint64_t> stat_produces_dropped_{0};         // --accept-produce
  std::atomic<uint64_t> stat_requests_{0}, stat_fetches_{0}, stat_remote_reads_{0},
      stat_remote_timeouts_{0}, stat_local_bytes_{0}, stat_remote_bytes_{0};
  std::atomic<uint64_t> stat_plaintext_reads_{0};  // reads of client connections that got bytes
};

// ---------------------------------------------------------------------------------------------
// NetThread implementation

void NetThread::run() {
  name_thread("data-plane-kafka-network-thread-1-ListenerName(PLAINTEXT)-PLAINTEXT-" +
              std::to_string(index_));
  std::vector<epoll_event> events(256);
  while (!broker_->stopping_.load()) {
    int n = epoll_wait(epfd_, events.data(), int(events.size()), 200);
    for (int i = 0; i < n; ++i) {
      uint64_t id = events[i].data.u64;
      if (id == 0) {
        uint64_t v;
        [[maybe_unused]] auto r = read(evfd_, &v, sizeof v);
        continue;
      }
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;
      Conn& c = it->second;
      if (events[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) on_readable(id, c);
      it = conns_.find(id);
      if (it == conns_.end()) continue;
      if (events[i].events & EPOLLOUT || (it->second.ssl && it->second.tls_handshaking))
        flush(id, it->second);
    }
    std::vector<NewConn> fresh;
    std::vector<Response> ready;
    {
      std::lock_guard lock(mu_);
      fresh.swap(new_conns_);
      ready.swap(responses_);
    }
    for (auto& nc : fresh) {
      uint64_t id = (uint64_t(index_) << 48) | next_id_++;
      Conn& c = conns_[id];
      c.fd = nc.fd;
      c.ssl = nc.ssl;
      c.tls_handshaking = nc.ssl != nullptr;
      c.listener_port = nc.listener_port;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = id;
      epoll_ctl(epfd_, EPOLL_CTL_ADD, nc.fd, &ev);
      {
        std::lock_guard lock(mu_);
        conn_count_ = conns_.size();
      }
      if (c.ssl) on_readable(id, c);
    }
    for (auto& r : ready) {
      uint64_t id = r.conn.id;
      auto it = conns_.find(id);
      if (it == conns_.end()) continue;  // the client went away meanwhile
      it->second.out.push_back(std::move(r));
      flush(id, it->second);
    }
  }
}

void NetThread::on_readable(uint64_t id, Conn& c) {
  if (c.ssl && c.tls_handshaking) {
    // SSL_get_error reads this thread's error queue: an error left there by another connection
    // (a peer that closed without close_notify) would turn this one's WANT_READ into a failure
    // and drop a healthy client. OpenSSL's rule: clear the queue before every TLS I/O call.
    ERR_clear_error();
    int rc = SSL_accept(c.ssl);
    if (rc == 1) {
      c.tls_handshaking = false;
    } else {
      int e = SSL_get_error(c.ssl, rc);
      if (e == SSL_ERROR_WANT_READ) return;
      if (e == SSL_ERROR_WANT_WRITE) return set_epollout(id, c, true);
      return drop(id);
    }
  }
  if (!c.ssl && broker_->config_.read_size_prefix_first) return on_readable_as_jvm(id, c);
  char buf[65536];
  while (true) {
    ssize_t n;
    if (c.ssl) {
      ERR_clear_error();  // see SSL_accept above
      n = SSL_read(c.ssl, buf, sizeof buf);
      if (n <= 0) {
        int e = SSL_get_error(c.ssl, int(n));
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) break;
        return drop(id);
      }
    } else {
      n = read(c.fd, buf, sizeof buf);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
      if (n <= 0) return drop(id);
      broker_->stat_plaintext_reads_++;
    }
    c.rbuf.append(buf, size_t(n));
    if (size_t(n) < sizeof buf && !c.ssl) break;
  }
  parse_frames(c);
  if (!c.inflight) dispatch_next(id, c);
}

// The size prefix of the frame at rbuf[at] (4 bytes there).
static size_t frame_size(const std::string& rbuf, size_t at) {
  const auto* p = reinterpret_cast<const uint8_t*>(rbuf.data() + at);
  return (size_t(p[0]) << 24) | (size_t(p[1]) << 16) | (size_t(p[2]) << 8) | p[3];
}

// As a JVM broker's Selector reads a plaintext connection: its 4-byte size prefix in one read,
// then the rest of the request (in reads of at most 64 KiB), and no more reads once a request is
// whole (Kafka mutes the channel; the next readiness reads the next one).
void NetThread::on_readable_as_jvm(uint64_t id, Conn& c) {
  char buf[65536];
  const size_t frames = c.frames.size();
  while (c.frames.size() == frames && !c.closing) {
    const size_t have = c.rbuf.size() - c.rpos;
    size_t want = 4 - std::min<size_t>(have, 4);
    if (want == 0) want = std::min(4 + frame_size(c.rbuf, c.rpos) - have, sizeof buf);
    const ssize_t n = read(c.fd, buf, want);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    if (n <= 0) return drop(id);
    broker_->stat_plaintext_reads_++;
    c.rbuf.append(buf, size_t(n));
    parse_frames(c);  // a whole request becomes a frame; a size over the limit closes
    if (size_t(n) < want) break;
  }
  if (!c.inflight) dispatch_next(id, c);
}

void NetThread::parse_frames(Conn& c) {
  while (c.rbuf.size() - c.rpos >= 4) {
    const size_t size = frame_size(c.rbuf, c.rpos);
    if (size > (100u << 20)) {
      c.closing = true;
      return;
    }
    if (c.rbuf.size() - c.rpos < 4 + size) break;
    c.frames.push_back(c.rbuf.substr(c.rpos + 4, size));
    c.rpos += 4 + size;
  }
  if (c.rpos == c.rbuf.size()) {
    c.rbuf.clear();
    c.rpos = 0;
  } else if (c.rpos > (1 << 20)) {
    c.rbuf.erase(0, c.rpos);
    c.rpos = 0;
  }
}

// Like Kafka, a connection has one request in flight: the next is read only after the response.
void NetThread::dispatch_next(uint64_t id, Conn& c) {
  if (c.closing) return drop(id);
  if (c.frames.empty()) return;
  Request r;
  r.frame = std::move(c.frames.front());
  c.frames.pop_front();
  r.conn = ConnRef{index_, id};
  r.listener_port = c.listener_port;
  r.arrival = Clock::now();
  try {
    Reader rd(reinterpret_cast<const uint8_t*>(r.frame.data()), r.frame.size());
    r.api_key = rd.i16();
    r.api_version = rd.i16();
    r.correlation_id = rd.i32();
    r.client_id = rd.legacy_nstring().value_or("");
    const ApiRange* a = find_api(r.api_key);
    if (!a) {
      spdlog::warn("client {} sent unsupported api key {}; closing", r.client_id, r.api_key);
      return drop(id);
    }
    r.flexible = r.api_version >= a->first_flexible;
    if (r.flexible) {
      rd.set_flexible(true);
      rd.tags();
    }
    r.body_offset = r.frame.size() - rd.remaining();
  } catch (const WireError& e) {
    spdlog::warn("malformed request header: {}; closing", e.what());
    return drop(id);
  }
  c.inflight = true;
  broker_->submit(std::move(r));
}

void NetThread::flush(uint64_t id, Conn& c) {
  if (c.ssl && c.tls_handshaking) {
    on_readable(id, c);
    if (conns_.find(id) == conns_.end()) return;
    if (c.tls_handshaking) return;
  }
  while (!c.out.empty()) {
    bool done = c.ssl ? flush_tls(c) : flush_plain(c);
    if (c.fd < 0) return drop(id);
    if (!done) return set_epollout(id, c, true);
    bool close_after = c.out.front().close;
    c.out.pop_front();
    c.piece = 0;
    c.piece_done = 0;
    c.inflight = false;
    if (close_after) return drop(id);
    dispatch_next(id, c);
    if (conns_.find(id) == conns_.end()) return;
  }
  set_epollout(id, c, false);
}

// Memory pieces go out with writev (headers and remote records as separate iovecs), local
// records with sendfile from the segment file, as Kafka does on a PLAINTEXT listener.
bool NetThread::flush_plain(Conn& c) {
  Response& r = c.out.front();
  while (c.piece < r.pieces.size()) {
    Piece& p = r.pieces[c.piece];
    if (p.fd >= 0) {
      off_t off = off_t(p.offset + c.piece_done);
      ssize_t n = sendfile(c.fd, p.fd, &off, p.length - c.piece_done);
      if (n < 0) {
        if (errno == EAGAIN || errno == EINTR) return false;
        close_fd(c);
        return false;
      }
      if (n == 0 && p.length > c.piece_done) {  // file shorter than promised: a bug; give up
        close_fd(c);
        return false;
      }
      c.piece_done += uint64_t(n);
      if (c.piece_done == p.length) {
        c.piece++;
        c.piece_done = 0;
      }
      continue;
    }
    iovec iov[64];
    int cnt = 0;
    for (size_t i = c.piece; i < r.pieces.size() && cnt < 64 && r.pieces[i].fd < 0; ++i) {
      size_t skip = i == c.piece ? c.piece_done : 0;
      iov[cnt].iov_base = r.pieces[i].bytes.data() + skip;
      iov[cnt].iov_len = r.pieces[i].bytes.size() - skip;
      cnt++;
    }
    ssize_t n = writev(c.fd, iov, cnt);
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) return false;
      close_fd(c);
      return false;
    }
    uint64_t left = uint64_t(n);
    while (left > 0 || (c.piece < r.pieces.size() && r.pieces[c.piece].fd < 0 &&
                        r.pieces[c.piece].bytes.size() == c.piece_done)) {
      Piece& q = r.pieces[c.piece];
      uint64_t rem = q.bytes.size() - c.piece_done;
      if (left >= rem) {
        left -= rem;
        c.piece++;
        c.piece_done = 0;
        if (c.piece >= r.pieces.size() || r.pieces[c.piece].fd >= 0) break;
      } else {
        c.piece_done += left;
        left = 0;
      }
    }
  }
  return true;
}

// TLS cannot use sendfile (Kafka's SSL listener copies too): flatten, then SSL_write.
bool NetThread::flush_tls(Conn& c) {
  Response& r = c.out.front();
  if (c.piece == 0 && c.tls_out.empty()) {
    for (auto& p : r.pieces) {
      if (p.fd < 0) {
        c.tls_out += p.bytes;
      } else {
        size_t at = c.tls_out.size();
        c.tls_out.resize(at + p.length);
        [[maybe_unused]] auto n = pread(p.fd, c.tls_out.data() + at, p.length, off_t(p.offset));
      }
    }
    c.tls_out_done = 0;
    c.piece = 1;
  }
  while (c.tls_out_done < c.tls_out.size()) {
    ERR_clear_error();  // see SSL_accept in on_readable
    int n = SSL_write(c.ssl, c.tls_out.data() + c.tls_out_done,
                      int(std::min<size_t>(c.tls_out.size() - c.tls_out_done, 1 << 20)));
    if (n <= 0) {
      int e = SSL_get_error(c.ssl, n);
      if (e == SSL_ERROR_WANT_WRITE || e == SSL_ERROR_WANT_READ) return false;
      close_fd(c);
      return false;
    }
    c.tls_out_done += size_t(n);
  }
  c.tls_out.clear();
  c.tls_out_done = 0;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Broker: threads

int Broker::listen_on(int port, std::string* error) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  if (inet_pton(AF_INET, config_.listen_host.c_str(), &addr.sin_addr) != 1) {
    *error = "listen host must be an IPv4 address: " + config_.listen_host;
    close(fd);
    return -1;
  }
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || listen(fd, 1024) != 0) {
    *error = "cannot listen on " + config_.listen_host + ":" + std::to_string(port) + ": " +
             strerror(errno);
    close(fd);
    return -1;
  }
  return fd;
}

static int bound_port(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

std::string Broker::start() {
  std::string error;
  listen_fd_ = listen_on(config_.port, &error);
  if (listen_fd_ < 0) return error;
  port_ = bound_port(listen_fd_);
  if (config_.tls_port >= 0) {
    tls_ctx_ = SSL_CTX_new(TLS_server_method());
    if (SSL_CTX_use_certificate_chain_file(tls_ctx_, config_.tls_cert.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(tls_ctx_, config_.tls_key.c_str(), SSL_FILETYPE_PEM) != 1)
      return "cannot load the TLS listener certificate/key (" + config_.tls_cert + ", " +
             config_.tls_key + ")";
    tls_listen_fd_ = listen_on(config_.tls_port, &error);
    if (tls_listen_fd_ < 0) return error;
    tls_port_ = bound_port(tls_listen_fd_);
  }
  timer_.start();
  for (int i = 0; i < config_.network_threads; ++i) {
    nets_.push_back(std::make_unique<NetThread>(this, i));
    nets_.back()->start();
  }
  for (int i = 0; i < config_.handler_threads; ++i)
    handlers_.emplace_back([this, i] { handler_loop(i); });
  for (int i = 0; i < config_.remote_reader_threads; ++i)
    readers_.emplace_back([this, i] { remote_loop(i); });
  acceptor_ = std::thread([this] { accept_loop(); });
  group_ticker_ = std::thread([this] {
    name_thread("group-metadata-manager");
    while (!stopping_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      group_tick();
    }
  });
  return "";
}

void Broker::stop() {
  stopping_ = true;
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
  if (tls_listen_fd_ >= 0) shutdown(tls_listen_fd_, SHUT_RDWR);
  if (acceptor_.joinable()) acceptor_.join();
  requests_.close();
  for (auto& t : handlers_) t.join();
  remote_tasks_.close();
  for (auto& t : readers_) t.join();
  timer_.stop();
  if (group_ticker_.joinable()) group_ticker_.join();
  for (auto& n : nets_) n->join();
  nets_.clear();
  if (listen_fd_ >= 0) close(listen_fd_);
  if (tls_listen_fd_ >= 0) close(tls_listen_fd_);
  if (tls_ctx_) SSL_CTX_free(tls_ctx_);
}

void Broker::accept_loop() {
  name_thread("data-plane-kafka-socket-acceptor-ListenerName(PLAINTEXT)-PLAINTEXT-9092");
  size_t next = 0;
  std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
  if (tls_listen_fd_ >= 0) fds.push_back({tls_listen_fd_, POLLIN, 0});
  while (!stopping_.load()) {
    if (poll(fds.data(), fds.size(), 200) <= 0) continue;
    for (auto& p : fds) {
      if (!(p.revents & POLLIN)) continue;
      int fd = accept4(p.fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) continue;
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      SSL* ssl = nullptr;
      if (p.fd == tls_listen_fd_) {
        ssl = SSL_new(tls_ctx_);
        SSL_set_fd(ssl, fd);
      }
      nets_[next++ % nets_.size()]->add_connection(fd, ssl,
                                                   p.fd == tls_listen_fd_ ? tls_port_ : port_);
    }
  }
}

void Broker::handler_loop(int n) {
  name_thread("data-plane-kafka-request-handler-" + std::to_string(n));
  while (auto task = requests_.pop()) (*task)();
}

void Broker::handle_guarded(Request& r) {
  stat_requests_++;
  if (r.api_key >= 0 && r.api_key < 19 && r.api_version >= 0 && r.api_version < 18)
    api_version_counts_[r.api_key][r.api_version]++;
  try {
    handle(r);
  } catch (const std::exception& e) {
    spdlog::warn("request api {} v{} from {}: {}; closing the connection", r.api_key, r.api_version,
                 r.client_id, e.what());
    Response resp;
    resp.conn = r.conn;
    resp.close = true;
    resp.pieces.push_back(Piece{});
    respond(std::move(resp));
  }
}

void Broker::remote_loop(int n) {
  name_thread("remote-log-reader" + std::to_string(n));
  while (auto task = remote_tasks_.pop()) (*task)();
}

nlohmann::json Broker::groups() {
  static const char* states[] = {"Empty", "PreparingRebalance", "CompletingRebalance", "Stable"};
  std::lock_guard lock(groups_mu_);
  nlohmann::json out = nlohmann::json::object();
  for (auto& [id, g] : groups_) {
    nlohmann::json members = nlohmann::json::array(), offsets = nlohmann::json::object();
    for (auto& [mid, m] : g.members)
      members.push_back({{"member_id", mid}, {"client_id", m.client_id}});
    for (auto& [key, value] : g.offsets)
      offsets[key.first + "/" + std::to_string(key.second)] = value.first;
    out[id] = {{"state", states[g.state]}, {"generation", g.generation},
               {"protocol", g.protocol},   {"leader", g.leader},
               {"members", members},       {"committed_offsets", offsets}};
  }
  return out;
}

nlohmann::json Broker::stats() {
  size_t conns = 0;
  for (auto& n : nets_) conns += n->connection_count();
  nlohmann::json versions = nlohmann::json::object();
  static const char* names[19] = {"Produce",
                                  "Fetch",
                                  "ListOffsets",
                                  "Metadata",
                                  "",
                                  "",
                                  "",
                                  "",
                                  "OffsetCommit",
                                  "OffsetFetch",
                                  "FindCoordinator",
                                  "JoinGroup",
                                  "Heartbeat",
                                  "LeaveGroup",
                                  "SyncGroup",
                                  "",
                                  "",
                                  "",
                                  "ApiVersions"};
  for (int k = 0; k < 19; ++k)
    for (int v = 0; v < 18; ++v)
      if (uint64_t n = api_version_counts_[k][v].load())
        versions[std::string(names[k]) + " v" + std::to_string(v)] = n;
  return {
      {"requests", stat_requests_.load()},
      {"plaintext_reads", stat_plaintext_reads_.load()},
      {"fetches", stat_fetches_.load()},
      {"produces_dropped", stat_produces_dropped_.load()},
      {"sasl_authentications", {{"ok", stat_sasl_[0].load()}, {"failed", stat_sasl_[1].load()}}},
      {"remote_reads", stat_remote_reads_.load()},
      {"remote_read_timeouts", stat_remote_timeouts_.load()},
      {"local_bytes", stat_local_bytes_.load()},
      {"remote_bytes", stat_remote_bytes_.load()},
      {"connections", conns},
      {"requests_by_api_version", versions}};
}

void Broker::handle(Request& r) {
  Reader rd(reinterpret_cast<const uint8_t*>(r.frame.data()) + r.body_offset,
            r.frame.size() - r.body_offset, r.flexible);
  const ApiRange* a = find_api(r.api_key);
  if (r.api_key == api::kApiVersions) return api_versions(r, rd);
  if (is_sasl(r.api_key) && config_.sasl_plain_users.empty())
    throw WireError("SASL is not enabled (--sasl-plain)");
  if (r.api_key == api::kProduce && config_.accept_produce && r.api_version >= 3 &&
      r.api_version <= 8)
    return produce_dropped(r);
  if (r.api_version < a->min || r.api_version > advertised_max(*a) || r.api_key == api::kProduce)
    throw WireError("unsupported version " + std::to_string(r.api_version));
  switch (r.api_key) {
    case api::kMetadata:
      return metadata(r, rd);
    case api::kListOffsets:
      return list_offsets(r, rd);
    case api::kFetch:
      return fetch(r, rd);
    case api::kFindCoordinator:
      return find_coordinator(r, rd);
    case api::kJoinGroup:
      return join_group(r, rd);
    case api::kSyncGroup:
      return sync_group(r, rd);
    case api::kHeartbeat:
      return heartbeat(r, rd);
    case api::kLeaveGroup:
      return leave_group(r, rd);
    case api::kOffsetCommit:
      return offset_commit(r, rd);
    case api::kOffsetFetch:
      return offset_fetch(r, rd);
    case api::kSaslHandshake:
      return sasl_handshake(r, rd);
    case api::kSaslAuthenticate:
      return sasl_authenticate(r, rd);
  }
  throw WireError("unhandled api");
}

// ---------------------------------------------------------------------------------------------
// ApiVersions, Metadata, ListOffsets, FindCoordinator

void Broker::api_versions(Request& r, Reader&) {
  // The response header never has tags (clients must parse it before knowing the version).
  bool supported = r.api_version <= 3;
  ResponseBuilder b(r.correlation_id, false, supported && r.api_version >= 3);
  Writer& w = b.w;
  w.i16(supported ? err::kNone : err::kUnsupportedVersion);
  const bool sasl = !config_.sasl_plain_users.empty();
  w.array_len(int32_t(std::size(kApis)) - (sasl ? 0 : 2));
  for (const auto& a : kApis) {
    if (is_sasl(a.key) && !sasl) continue;
    w.i16(a.key);
    w.i16(a.min);
    w.i16(advertised_max(a));
    w.tags();
  }
  if (supported && r.api_version >= 1) w.i32(0);
  w.tags();
  respond(b.finish(r.conn));
}

// SASL/PLAIN (RFC 4616) for SASL_PLAINTEXT clients: SaslHandshake v1 names the mechanism, then
// SaslAuthenticate carries "authzid\0user\0password". The password is compared and forgotten:
// never logged (the point of the fixture is to check that nobody else logs it either).
void Broker::sasl_handshake(Request& r, Reader& rd) {
  const std::string mechanism = rd.string();
  ResponseBuilder b(r.correlation_id, false, false);
  b.w.i16(mechanism == "PLAIN" ? err::kNone : err::kUnsupportedSaslMechanism);
  b.w.array_len(1);
  b.w.string("PLAIN");
  respond(b.finish(r.conn));
}

void Broker::sasl_authenticate(Request& r, Reader& rd) {
  const std::string token = rd.bytes();
  const auto first = token.find('\0');
  const auto second = first == std::string::npos ? first : token.find('\0', first + 1);
  bool ok = false;
  std::string user;
  if (second != std::string::npos) {
    user = token.substr(first + 1, second - first - 1);
    const std::string password = token.substr(second + 1);
    auto it = config_.sasl_plain_users.find(user);
    ok = it != config_.sasl_plain_users.end() && it->second == password;
  }
  ResponseBuilder b(r.correlation_id, r.flexible, r.flexible);
  b.w.i16(ok ? err::kNone : err::kSaslAuthenticationFailed);
  b.w.nstring(ok ? std::nullopt
                 : std::optional<std::string>("Authentication failed: invalid "
                                              "username or password"));
  b.w.bytes("");
  if (r.api_version >= 1) b.w.i64(0);  // session lifetime: no re-authentication
  b.w.tags();
  Response resp = b.finish(r.conn);
  resp.close = !ok;  // Kafka closes the connection after a failed authentication
  stat_sasl_[ok ? 0 : 1]++;
  spdlog::info("SASL/PLAIN authentication of user {} from client {}: {}", user, r.client_id,
               ok ? "ok" : "failed");
  respond(std::move(resp));
}

void Broker::metadata(Request& r, Reader& rd) {
  int v = r.api_version;
  std::vector<Topic*> topics;
  std::vector<std::string> unknown;
  std::vector<Uuid> unknown_ids;
  int32_t n = rd.array_len();
  if (n < 0 || (n == 0 && v == 0)) {
    for (auto& t : log_->topics()) topics.push_back(t.get());
  } else {
    for (int32_t i = 0; i < n; ++i) {
      Uuid id{};
      if (v >= 10) id = rd.uuid();
      auto name = rd.nstring();
      rd.tags();
      Topic* t = name ? log_->topic(*name) : log_->topic(id);
      if (t)
        topics.push_back(t);
      else if (name)
        unknown.push_back(*name);
      else
        unknown_ids.push_back(id);
    }
  }
  ResponseBuilder b(r.correlation_id, r.flexible, r.flexible);
  Writer& w = b.w;
  if (v >= 3) w.i32(0);
  w.array_len(1);
  w.i32(config_.node_id);
  w.string(config_.advertised_host);
  w.i32(r.listener_port);
  if (v >= 1) w.nstring(std::nullopt);
  w.tags();
  if (v >= 2) w.nstring(std::string("tiered-broker-sim"));
  if (v >= 1) w.i32(config_.node_id);
  w.array_len(int32_t(topics.size() + unknown.size() + unknown_ids.size()));
  for (Topic* t : topics) {
    w.i16(err::kNone);
    w.string(t->name);
    if (v >= 10) w.uuid(t->id);
    if (v >= 1) w.boolean(false);
    w.array_len(int32_t(t->partitions.size()));
    for (auto& p : t->partitions) {
      w.i16(err::kNone);
      w.i32(p->index);
      w.i32(config_.node_id);
      if (v >= 7) w.i32(0);
      w.array_len(1);
      w.i32(config_.node_id);
      w.array_len(1);
      w.i32(config_.node_id);
      if (v >= 5) w.array_len(0);
      w.tags();
    }
    if (v >= 8) w.i32(INT32_MIN);
    w.tags();
  }
  auto write_unknown = [&](std::optional<std::string> name, const Uuid& id) {
    w.i16(name ? err::kUnknownTopicOrPartition : err::kUnknownTopicId);
    if (v >= 12)
      w.nstring(name);
    else
      w.string(name.value_or(""));
    if (v >= 10) w.uuid(id);
    if (v >= 1) w.boolean(false);
    w.array_len(0);
    if (v >= 8) w.i32(INT32_MIN);
    w.tags();
  };
  for (auto& name : unknown) write_unknown(name, Uuid{});
  for (auto& id : unknown_ids) write_unknown(std::nullopt, id);
  if (v >= 8 && v <= 10) w.i32(INT32_MIN);
  w.tags();
  respond(b.finish(r.conn));
}

void Broker::list_offsets(Request& r, Reader& rd) {
  int v = r.api_version;
  rd.i32();  // replica id
  if (v >= 2) rd.i8();
  ResponseBuilder b(r.correlation_id, r.flexible, r.flexible);
  Writer& w = b.w;
  if (v >= 2) w.i32(0);
  int32_t nt = rd.array_len();
  w.array_len(nt);
  for (int32_t i = 0; i < nt; ++i) {
    std::string name = rd.string();
    Topic* t = log_->topic(name);
    w.string(name);
    int32_t np = rd.array_len();
    w.array_len(np);
    for (int32_t j = 0; j < np; ++j) {
      int32_t index = rd.i32();
      if (v >= 4) rd.i32();
      int64_t ts = rd.i64();
      if (v == 0) rd.i32();
      rd.tags();
      w.i32(index);
      Partition* p = t && index >= 0 && index < int32_t(t->partitions.size())
                         ? t->partitions[index].get()
                         : nullptr;
      int64_t offset = -1;
      if (p) {
        int64_t hwm = p->high_watermark.load();
        if (ts == -1 || ts == -3)
          offset = ts == -1 ? hwm : std::max<int64_t>(hwm - 1, 0);
        else if (ts == -4)
          offset = p->local_log_start_offset;
        else if (ts == -5)
          offset = p->local_log_start_offset - 1;
        else
          offset = p->log_start_offset;  // -2 (earliest) and any timestamp: seeded data is old
      }
      w.i16(p ? err::kNone : err::kUnknownTopicOrPartition);
      if (v == 0) {
        w.array_len(p ? 1 : 0);
        if (p) w.i64(offset);
      } else {
        w.i64(-1);
        w.i64(offset);
        if (v >= 4) w.i32(0);
      }
      w.tags();
    }
    rd.tags();
    w.tags();
  }
  w.tags();
  respond(b.finish(r.conn));
}

void Broker::find_coordinator(Request& r, Reader& rd) {
  int v = r.api_version;
  std::vector<std::string> keys;
  if (v <= 3) {
    keys.push_back(rd.string());
    if (v >= 1) rd.i8();
  } else {
    rd.i8();
    int32_t n = rd.array_len();
    for (int32_t i = 0; i < n; ++i) keys.push_back(rd.string());
  }
  ResponseBuilder b(r.correlation_id, r.flexible, r.flexible);
  Writer& w = b.w;
  if (v >= 1) w.i32(0);
  if (v <= 3) {
    w.i16(err::kNone);
    if (v >= 1) w.nstring(std::nullopt);
    w.i32(config_.node_id);
    w.string(config_.advertised_host);
    w.i32(r.listener_port);
  } else {
    w.array_len(int32_t(keys.size()));
    for (auto& k : keys) {
      w.string(k);
      w.i32(config_.node_id);
      w.string(config_.advertised_host);
      w.i32(r.listener_port);
      w.i16(err::kNone);
      w.nstring(std::nullopt);
      w.tags();
    }
  }
  w.tags();
  respond(b.finish(r.conn));
}

// ---------------------------------------------------------------------------------------------
// Fetch

struct Broker::FetchPlan {
  Request req;
  int32_t max_wait_ms = 0, min_bytes = 0, max_bytes = 0;
  int32_t session_id = 0;
  int16_t top_error = 0;
  std::shared_ptr<FetchSession> session;  // incremental: only changed partitions are returned
  bool incremental = false;
  struct Part {
    std::string topic_name;  // as requested (or resolved from the id)
    Uuid topic_id{};
    Topic* topic = nullptr;
    Partition* partition = nullptr;
    int32_t index = 0;
    int64_t fetch_offset = 0;
    int32_t max_bytes = 0;
    int16_t error = 0;
    // results of the current attempt
    ReadResult result;
    int64_t hwm = 0;
    bool remote = false, remote_done = false;
  };
  std::vector<Part> parts;
  std::mutex mu;
  int remote_pending = 0;
  bool responded = false;
  // A parked fetch (no data yet) runs again at its deadline or, earlier, when data is appended;
  // exec_mu and `executed` make sure exactly one of those answers it.
  std::mutex exec_mu;
  bool executed = false, deadline_armed = false;
};

void Broker::fetch(Request& r, Reader& rd) {
  stat_fetches_++;
  int v = r.api_version;
  auto plan = std::make_shared<FetchPlan>();
  if (v <= 14) rd.i32();  // replica id
  plan->max_wait_ms = rd.i32();
  plan->min_bytes = rd.i32();
  plan->max_bytes = rd.i32();
  rd.i8();  // isolation level: no transactions here, both levels read the same
  int32_t session_id = 0, session_epoch = -1;
  if (v >= 7) {
    session_id = rd.i32();
    session_epoch = rd.i32();
  }
  struct Wanted {
    std::string name;
    Uuid id{};
    int32_t index;
    int64_t offset;
    int32_t max_bytes;
  };
  std::vector<Wanted> wanted;
  int32_t nt = rd.array_len();
  for (int32_t i = 0; i < nt; ++i) {
    std::string name;
    Uuid id{};
    if (v <= 12)
      name = rd.string();
    else
      id = rd.uuid();
    if (v >= 13) {
      Topic* t = log_->topic(id);
      if (t) name = t->name;
    }
    int32_t np = rd.array_len();
    for (int32_t j = 0; j < np; ++j) {
      Wanted w{name, id, rd.i32(), 0, 0};
      if (v >= 9) rd.i32();  // current leader epoch
      w.offset = rd.i64();
      if (v >= 12) rd.i32();  // last fetched epoch
      if (v >= 5) rd.i64();   // log start offset (followers only)
      w.max_bytes = rd.i32();
      rd.tags();
      wanted.push_back(w);
    }
    rd.tags();
  }
  std::vector<std::pair<std::string, int32_t>> forgotten;
  if (v >= 7) {
    int32_t nf = rd.array_len();
    for (int32_t i = 0; i < nf; ++i) {
      std::string name;
      if (v <= 12) {
        name = rd.string();
      } else {
        Topic* t = log_->topic(rd.uuid());
        if (t) name = t->name;
      }
      int32_t np = rd.array_len();
      for (int32_t j = 0; j < np; ++j) forgotten.emplace_back(name, rd.i32());
      rd.tags();
    }
  }
  // rack id and tagged fields (cluster id, replica state) are irrelevant to a lone broker

  auto make_part = [&](const std::string& name, const Uuid& id, int32_t index, int64_t offset,
                       int32_t max_bytes) {
    FetchPlan::Part p;
    p.topic_name = name;
    p.topic_id = id;
    p.index = index;
    p.fetch_offset = offset;
    p.max_bytes = max_bytes;
    p.topic = name.empty() ? nullptr : log_->topic(name);
    if (p.topic) p.topic_id = p.topic->id;
    if (!p.topic)
      p.error = v >= 13 ? err::kUnknownTopicId : err::kUnknownTopicOrPartition;
    else if (index < 0 || index >= int32_t(p.topic->partitions.size()))
      p.error = err::kUnknownTopicOrPartition;
    else
      p.partition = p.topic->partitions[index].get();
    return p;
  };

  // Session handling (KIP-227).
  if (session_id == 0 && session_epoch == 0) {
    auto s = std::make_shared<FetchSession>();
    s->last_used = Clock::now().time_since_epoch().count();
    {
      std::lock_guard lock(sessions_mu_);
      // Like max.incremental.fetch.session.cache.slots: evict the least recently used session.
      if (sessions_.size() >= kMaxFetchSessions) {
        auto oldest = sessions_.begin();
        for (auto it = sessions_.begin(); it != sessions_.end(); ++it)
          if (it->second->last_used < oldest->second->last_used) oldest = it;
        sessions_.erase(oldest);
      }
      s->id = next_session_id_++;
      if (next_session_id_ == INT32_MAX) next_session_id_ = 1;
      sessions_[s->id] = s;
    }
    for (auto& w : wanted) {
      auto key = std::make_pair(w.name, w.index);
      if (!s->parts.count(key)) s->order.push_back(key);
      s->parts[key] = SessionPartition{w.offset, w.max_bytes};
    }
    plan->session = s;
    plan->session_id = s->id;
  } else if (session_id != 0) {
    std::shared_ptr<FetchSession> s;
    {
      std::lock_guard lock(sessions_mu_);
      auto it = sessions_.find(session_id);
      if (it != sessions_.end()) s = it->second;
      if (s && session_epoch == -1) sessions_.erase(it);
    }
    if (!s) {
      plan->top_error = err::kFetchSessionIdNotFound;
    } else if (session_epoch != -1) {
      std::lock_guard lock(s->mu);
      if (session_epoch != s->next_epoch) {
        plan->top_error = err::kInvalidFetchSessionEpoch;
      } else {
        s->last_used = Clock::now().time_since_epoch().count();
        s->next_epoch = session_epoch == INT32_MAX ? 1 : session_epoch + 1;
        for (auto& f : forgotten) {
          s->parts.erase(f);
          s->order.erase(std::remove(s->order.begin(), s->order.end(), f), s->order.end());
        }
        for (auto& w : wanted) {
          auto key = std::make_pair(w.name, w.index);
          auto it = s->parts.find(key);
          if (it == s->parts.end()) {
            s->order.push_back(key);
            s->parts[key] = SessionPartition{w.offset, w.max_bytes};
          } else {
            it->second.fetch_offset = w.offset;
            it->second.max_bytes = w.max_bytes;
          }
        }
        plan->session = s;
        plan->session_id = s->id;
        plan->incremental = true;
      }
    }
  }
  if (plan->top_error == 0) {
    if (plan->session) {
      std::lock_guard lock(plan->session->mu);
      for (auto& key : plan->session->order) {
        auto& sp = plan->session->parts[key];
        plan->parts.push_back(
            make_part(key.first, Uuid{}, key.second, sp.fetch_offset, sp.max_bytes));
      }
      // Unknown topics in a v13+ request have no name: keep them visible with their error.
      for (auto& w : wanted)
        if (w.name.empty()) plan->parts.push_back(make_part("", w.id, w.index, 0, 0));
    } else {
      for (auto& w : wanted)
        plan->parts.push_back(make_part(w.name, w.id, w.index, w.offset, w.max_bytes));
    }
  }
  plan->req = std::move(r);
  execute_fetch(plan, false);
}

void Broker::execute_fetch(std::shared_ptr<FetchPlan> plan, bool final_attempt) {
  std::lock_guard exec_lock(plan->exec_mu);
  if (plan->executed) return;
  if (plan->top_error) {
    plan->executed = true;
    return finish_fetch(plan);
  }
  int64_t budget = plan->max_bytes > 0 ? plan->max_bytes : INT32_MAX;
  uint64_t total = 0;
  bool remote_taken = false;
  std::vector<FetchPlan::Part*> remote_parts;
  for (auto& part : plan->parts) {
    part.result = ReadResult{};
    part.remote = false;
    if (part.error && !part.partition) continue;
    part.error = 0;
    Partition& p = *part.partition;
    part.hwm = p.high_watermark.load();
    if (part.fetch_offset < p.log_start_offset || part.fetch_offset > part.hwm) {
      part.error = err::kOffsetOutOfRange;
      continue;
    }
    if (part.fetch_offset == part.hwm || budget <= 0) continue;
    uint64_t limit = uint64_t(std::min<int64_t>(part.max_bytes, budget));
    if (total == 0) limit = std::max<uint64_t>(limit, 1);  // the first batch always goes out
    if (part.fetch_offset < p.local_log_start_offset) {
      // Kafka <= 4.1 reads one remote partition per fetch; 4.2 reads all of them.
      if (remote_taken && !config_.all_remote_partitions) continue;
      remote_taken = true;
      part.remote = true;
      part.remote_done = false;
      part.result.length = limit;  // reserved budget; replaced by the real read
      remote_parts.push_back(&part);
      budget -= int64_t(limit);
      continue;
    }
    part.result = log_->read_local(p, part.fetch_offset, limit, part.hwm);
    total += part.result.length;
    budget -= int64_t(part.result.length);
  }
  if (remote_parts.empty()) {
    bool enough = total >= uint64_t(std::max(plan->min_bytes, 1));  // fetch.min.bytes
    if (!enough && !final_attempt && plan->max_wait_ms > 0) {
      // Nothing to send yet: park like Kafka's DelayedFetch; answer at the deadline with what
      // exists, or as soon as the appender adds data.
      if (!plan->deadline_armed) {
        plan->deadline_armed = true;
        timer_.at(plan->req.arrival + std::chrono::milliseconds(plan->max_wait_ms),
                  [this, plan] { run_on_handler([this, plan] { execute_fetch(plan, true); }); });
      }
      if (config_.wake_parked_fetches) {
        std::lock_guard lock(parked_mu_);
        parked_.push_back(plan);
      }
      return;
    }
    plan->executed = true;
    return finish_fetch(plan);
  }
  plan->executed = true;
  {
    std::lock_guard lock(plan->mu);
    plan->remote_pending = int(remote_parts.size());
  }
  std::string client_id = plan->req.client_id;
  for (auto* part : remote_parts) {
    stat_remote_reads_++;
    uint64_t limit = part->result.length;  // the reserved budget; part->result is not ours
    remote_tasks_.push([this, plan, part, client_id, limit] {
      ReadResult res = log_->read_remote(*part->topic, *part->partition, part->fetch_offset, limit);
      bool late;
      bool complete;
      {
        std::lock_guard lock(plan->mu);
        late = plan->responded;
        if (!late) {
          part->result = std::move(res);
          part->remote_done = true;
        }
        complete = --plan->remote_pending == 0 && !plan->responded;
        if (complete) plan->responded = true;
      }
      ledger_->record(client_id, part->topic->name, part->index,
                      late ? res.gets : part->result.gets, late);
      if (late) stat_remote_timeouts_++;
      if (complete) finish_fetch(plan);
    });
  }
  // remote.fetch.max.wait.ms: answer without the remote data when the read takes too long.
  timer_.at(Clock::now() + std::chrono::milliseconds(config_.remote_fetch_max_wait_ms),
            [this, plan] {
              {
                std::lock_guard lock(plan->mu);
                if (plan->responded) return;
                plan->responded = true;
              }
              finish_fetch(plan);
            });
}

void Broker::finish_fetch(std::shared_ptr<FetchPlan> plan) {
  Request& r = plan->req;
  int v = r.api_version;
  ResponseBuilder b(r.correlation_id, r.flexible, r.flexible);
  Writer& w = b.w;
  w.i32(0);  // throttle
  if (v >= 7) {
    w.i16(plan->top_error);
    w.i32(plan->top_error ? 0 : plan->session_id);
  }
  // Decide which partitions go in the response (incremental sessions: only changed ones).
  std::vector<FetchPlan::Part*> out;
  {
    std::unique_lock<std::mutex> slock;
    if (plan->session) slock = std::unique_lock(plan->session->mu);
    for (auto& part : plan->parts) {
      if (part.remote && !part.remote_done) {
        part.result = ReadResult{};  // timed out: the partition gets no records this time
      }
      bool include = true;
      if (plan->session && part.partition) {
        auto it = plan->session->parts.find({part.topic_name, part.index});
        if (it != plan->session->parts.end()) {
          auto& sp = it->second;
          bool changed = part.result.length > 0 || part.error || sp.last_hwm != part.hwm ||
                         sp.last_log_start != part.partition->log_start_offset;
          include = !plan->incremental || changed;
          sp.last_hwm = part.hwm;
          sp.last_log_start = part.partition->log_start_offset;
        }
      }
      if (include) out.push_back(&part);
    }
  }
  // Group partitions by topic, keeping request order.
  std::vector<std::pair<std::string, std::vector<FetchPlan::Part*>>> topics;
  for (auto* p : out) {
    std::string key = p->topic_name.empty() ? base64url(p->topic_id) : p->topic_name;
    if (topics.empty() || topics.back().first != key) topics.push_back({key, {}});
    topics.back().second.push_back(p);
  }
  w.array_len(int32_t(topics.size()));
  for (auto& [key, parts] : topics) {
    if (v <= 12)
      w.string(parts[0]->topic_name);
    else
      w.uuid(parts[0]->topic_id);
    w.array_len(int32_t(parts.size()));
    for (auto* p : parts) {
      int16_t error = p->error ? p->error : p->result.error;
      w.i32(p->index);
      w.i16(error);
      w.i64(p->partition ? p->hwm : -1);
      w.i64(p->partition ? p->hwm : -1);  // last stable offset: no transactions
      if (v >= 5) w.i64(p->partition ? p->partition->log_start_offset : -1);
      w.array_len(v >= 4 ? 0 : -1);  // aborted transactions
      if (v >= 11) w.i32(-1);        // preferred read replica
      const ReadResult& res = p->result;
      if (error == 0 && res.fd >= 0 && res.length > 0) {
        w.bytes_len(int64_t(res.length));
        b.add_file(res.fd, res.file_offset, res.length);
        stat_local_bytes_ += res.length;
      } else if (error == 0 && !res.data.empty()) {
        w.bytes_len(int64_t(res.data.size()));
        stat_remote_bytes_ += res.data.size();
        b.add_buffer(res.data);
      } else {
        w.bytes_len(0);
      }
      w.tags();
    }
    w.tags();
  }
  w.tags();
  respond(b.finish(r.conn));
}

// ---------------------------------------------------------------------------------------------
// Group coordinator

void Broker::send_join(const Group& g, const Member& m, const Deferred& d, int16_t error) {
  int v = d.api_version;
  ResponseBuilder b = builder(d);
  Writer& w = b.w;
  if (v >= 2) w.i32(0);
  w.i16(error);
  w.i32(error ? -1 : g.generation);
  if (v >= 7) w.nstring(error ? std::nullopt : std::optional<std::string>(g.protocol_type));
  if (v >= 7)
    w.nstring(error ? std::nullopt : std::optional<std::string>(g.protocol));
  else
    w.string(error ? "" : g.protocol);
  w.string(error ? "" : g.leader);
  if (v >= 9) w.boolean(false);
  w.string(m.id);
  bool leader = !error && m.id == g.leader;
  w.array_len(leader ? int32_t(g.members.size()) : 0);
  if (leader) {
    for (auto& [id, member] : g.members) {
      w.string(id);
      if (v >= 5) w.nstring(member.instance_id);
      std::string meta;
      for (auto& [name, md] : member.protocols)
        if (name == g.protocol) meta = md;
      w.bytes(meta);
      w.tags();
    }
  }
  w.tags();
  respond(b.finish(d.conn));
}

void Broker::send_sync(const Group& g, const Deferred& d, int16_t error,
                       const std::string& assignment) {
  int v = d.api_version;
  ResponseBuilder b = builder(d);
  Writer& w = b.w;
  if (v >= 1) w.i32(0);
  w.i16(error);
  if (v >= 5) {
    w.nstring(g.protocol_type);
    w.nstring(g.protocol);
  }
  w.bytes(error ? "" : assignment);
  w.tags();
  respond(b.finish(d.conn));
}

void Broker::start_rebalance(Group& g, Clock::time_point now) {
  if (g.state == Group::kPreparing) return;
  g.initial_rebalance = g.state == Group::kEmpty;
  g.state = Group::kPreparing;
  int32_t max_rebalance = 0;
  for (auto& [id, m] : g.members) max_rebalance = std::max(max_rebalance, m.rebalance_timeout_ms);
  g.rebalance_deadline = now + std::chrono::milliseconds(max_rebalance);
  // group.initial.rebalance.delay.ms: an empty group waits for more members; a running group
  // rebalances as soon as every known member has rejoined.
  g.join_deadline =
      now + std::chrono::milliseconds(g.initial_rebalance ? config_.group_initial_delay_ms : 0);
  // Members waiting in SyncGroup learn about the new round right away.
  for (auto& [id, m] : g.members)
    if (m.pending_sync) {
      send_sync(g, *m.pending_sync, err::kRebalanceInProgress, "");
      m.pending_sync.reset();
    }
}

void Broker::maybe_complete_join(Group& g, const std::string& group_id, Clock::time_point now) {
  if (g.state != Group::kPreparing) return;
  bool all_joined = true;
  for (auto& [id, m] : g.members) all_joined &= m.pending_join.has_value();
  if (now < g.join_deadline || (!all_joined && now < g.rebalance_deadline)) return;
  for (auto it = g.members.begin(); it != g.members.end();)
    it = it->second.pending_join ? std::next(it) : g.members.erase(it);
  if (g.members.empty()) {
    g.state = Group::kEmpty;
    return;
  }
  // The protocol: the first of the leader's protocols that every member supports.
  if (!g.members.count(g.leader)) g.leader = g.members.begin()->first;
  g.protocol.clear();
  for (auto& [name, md] : g.members[g.leader].protocols) {
    bool everyone = true;
    for (auto& [id, m] : g.members) {
      bool has = false;
      for (auto& pr : m.protocols) has |= pr.first == name;
      everyone &= has;
    }
    if (everyone) {
      g.protocol = name;
      break;
    }
  }
  g.generation++;
  g.state = Group::kCompleting;
  spdlog::info("group {} generation {}: {} members, leader {}, protocol {}", group_id, g.generation,
               g.members.size(), g.leader, g.protocol);
  for (auto& [id, m] : g.members) {
    send_join(g, m, *m.pending_join, g.protocol.empty() ? err::kInconsistentGroupProtocol : 0);
    m.pending_join.reset();
    m.last_seen = now;
  }
}

void Broker::group_tick() {
  std::lock_guard lock(groups_mu_);
  auto now = Clock::now();
  for (auto& [gid, g] : groups_) {
    // Session expiry: a member silent for its session timeout leaves the group.
    bool expired = false;
    for (auto it = g.members.begin(); it != g.members.end();) {
      Member& m = it->second;
      if (!m.pending_join && !m.pending_sync &&
          now - m.last_seen > std::chrono::milliseconds(m.session_timeout_ms)) {
        spdlog::info("group {}: member {} session expired", gid, m.id);
        it = g.members.erase(it);
        expired = true;
      } else {
        ++it;
      }
    }
    if (expired) {
      if (g.members.empty())
        g.state = Group::kEmpty;
      else
        start_rebalance(g, now);
    }
    maybe_complete_join(g, gid, now);
  }
}

void Broker::join_group(Request& r, Reader& rd) {
  int v = r.api_version;
  std::string group_id = rd.string();
  int32_t session_timeout = rd.i32();
  int32_t rebalance_timeout = v >= 1 ? rd.i32() : session_timeout;
  std::string member_id = rd.string();
  std::optional<std::string> instance_id;
  if (v >= 5) instance_id = rd.nstring();
  std::string protocol_type = rd.string();
  std::vector<std::pair<std::string, std::string>> protocols;
  int32_t n = rd.array_len();
  for (int32_t i = 0; i < n; ++i) {
    std::string name = rd.string();
    std::string meta = rd.bytes();
    rd.tags();
    protocols.emplace_back(name, meta);
  }
  ledger_->set_group(r.client_id, group_id);
  Deferred d{r.conn, r.api_version, r.correlation_id, r.flexible};
  std::lock_guard lock(groups_mu_);
  Group& g = groups_[group_id];
  auto now = Clock::now();
  if (!member_id.empty() && !g.members.count(member_id)) {
    Member ghost;
    ghost.id = member_id;
    return send_join(g, ghost, d, err::kUnknownMemberId);
  }
  if (member_id.empty()) member_id = r.client_id + "-" + std::to_string(next_member_++);
  bool is_new = !g.members.count(member_id);
  Member& m = g.members[member_id];
  m.id = member_id;
  m.client_id = r.client_id;
  m.instance_id = instance_id;
  m.protocols = protocols;
  m.session_timeout_ms = session_timeout;
  m.rebalance_timeout_ms = rebalance_timeout;
  m.last_seen = now;
  if (m.pending_join) send_join(g, m, *m.pending_join, err::kRebalanceInProgress);
  m.pending_join = d;
  if (g.protocol_type.empty()) g.protocol_type = protocol_type;
  if (g.state != Group::kPreparing) start_rebalance(g, now);
  if (is_new) {
    if (g.initial_rebalance)
      g.join_deadline = std::min(g.rebalance_deadline,
                                 now + std::chrono::milliseconds(config_.group_initial_delay_ms));
    if (g.leader.empty() || !g.members.count(g.leader)) g.leader = member_id;
  }
  maybe_complete_join(g, group_id, now);
}

void Broker::sync_group(Request& r, Reader& rd) {
  int v = r.api_version;
  std::string group_id = rd.string();
  int32_t generation = rd.i32();
  std::string member_id = rd.string();
  if (v >= 3) rd.nstring();
  if (v >= 5) {
    rd.nstring();
    rd.nstring();
  }
  std::map<std::string, std::string> assignments;
  int32_t n = rd.array_len();
  for (int32_t i = 0; i < n; ++i) {
    std::string id = rd.string();
    assignments[id] = rd.bytes();
    rd.tags();
  }
  ledger_->set_group(r.client_id, group_id);
  Deferred d{r.conn, r.api_version, r.correlation_id, r.flexible};
  std::lock_guard lock(groups_mu_);
  Group& g = groups_[group_id];
  auto it = g.members.find(member_id);
  if (it == g.members.end()) return send_sync(g, d, err::kUnknownMemberId, "");
  if (generation != g.generation) return send_sync(g, d, err::kIllegalGeneration, "");
  if (g.state == Group::kPreparing) return send_sync(g, d, err::kRebalanceInProgress, "");
  Member& m = it->second;
  m.last_seen = Clock::now();
  if (g.state == Group::kStable) return send_sync(g, d, 0, m.assignment);
  if (member_id == g.leader) {
    for (auto& [id, member] : g.members) {
      member.assignment = assignments.count(id) ? assignments[id] : "";
      if (member.pending_sync) {
        send_sync(g, *member.pending_sync, 0, member.assignment);
        member.pending_sync.reset();
      }
    }
    g.state = Group::kStable;
    return send_sync(g, d, 0, m.assignment);
  }
  m.pending_sync = d;
}

// --accept-produce: the records are dropped unread, and the answer lists no topic.
void Broker::produce_dropped(Request& r) {
  stat_produces_dropped_++;
  ResponseBuilder b(r.correlation_id, false, false);
  b.w.i32(0);  // responses
  b.w.i32(0);  // throttle_time_ms
  respond(b.finish(r.conn));
}

void Broker::heartbeat(Request& r, Reader& rd) {
  int v = r.api_version;
  std::string group_id = rd.string();
  int32_t generation = rd.i32();
  std::string member_id = rd.string();
  if (v >= 3) rd.nstring();
  ledger_->set_group(r.client_id, group_id);
  int16_t error = 0;
  {
    std::lock_guard lock(groups_mu_);
    Group& g = groups_[group_id];
    auto it = g.members.find(member_id);
    if (it == g.members.end())
      error = err::kUnknownMemberId;
    else if (g.state == Group::kPreparing)
      error = err::kRebalanceInProgress;
    else if (generation != g.generation)
      error = err::kIllegalGeneration;
    if (it != g.members.end()) it->second.last_seen = Clock::now();
  }
  ResponseBuilder b(r.correlation_id, r.flexible, r.flexible);
  if (v >= 1) b.w.i32(0);
  b.w.i16(error);
  b.w.tags();
  respond(b.finish(r.conn));
}

void Broker::leave_group(Request& r, Reader& rd) {
  int v = r.api_version;
  std::string group_id = rd.string();
  std::vector<std::pair<std::string, std::optional<std::string>>> leaving;
  if (v <= 2) {
    leaving.emplace_back(rd.string(), std::nullopt);
  } else {
    int32_t n = rd.array_len();
    for (int32_t i = 0; i < n; ++i) {
      std::string id = rd.string();
      auto inst = rd.nstring();
      if (v >= 5) rd.nstring();  // reason
      rd.tags();
      leaving.emplace_back(id, inst);
    }
  }
  {
    std::lock_guard lock(groups_mu_);
    Group& g = groups_[group_id];
    for (auto& [id, inst] : leaving) {
      auto it = g.members.find(id);
      if (it == g.members.end()) continue;
      if (it->second.pending_join)
        send_join(g, it->second, *it->second.pending_join, err::kUnknownMemberId);
      g.members.erase(it);
    }
    auto now = Clock::now();
    if (g.members.empty()) {
      g.state = Group::kEmpty;
      g.leader.clear();
    } else {
      start_rebalance(g, now);
      maybe_complete_join(g, group_id, now);
    }
  }
  ResponseBuilder b(r.correlation_id, r.flexible, r.flexible);
  Writer& w = b.w;
  if (v >= 1) w.i32(0);
  w.i16(0);
  if (v >= 3) {
    w.array_len(int32_t(leaving.size()));
    for (auto& [id, inst] : leaving) {
      w.string(id);
      w.nstring(inst);
      w.i16(0);
      w.tags();
    }
  }
  w.tags();
  respond(b.finish(r.conn));
}

void Broker::offset_commit(Request& r, Reader& rd) {
  int v = r.api_version;
  std::string group_id = rd.string();
  if (v >= 1) {
    rd.i32();
    rd.string();
  }
  if (v >= 7) rd.nstring();
  if (v >= 2 && v <= 4) rd.i64();
  ledger_->set_group(r.client_id, group_id);
  ResponseBuilder b(r.correlation_id, r.flexible, r.flexible);
  Writer& w = b.w;
  if (v >= 3) w.i32(0);
  std::lock_guard lock(groups_mu_);
  Group& g = groups_[group_id];
  int32_t nt = rd.array_len();
  w.array_len(nt);
  for (int32_t i = 0; i < nt; ++i) {
    std::string topic = rd.string();
    w.string(topic);
    int32_t np = rd.array_len();
    w.array_len(np);
    for (int32_t j = 0; j < np; ++j) {
      int32_t index = rd.i32();
      int64_t offset = rd.i64();
      if (v >= 6) rd.i32();
      if (v == 1) rd.i64();
      auto meta = rd.nstring();
      rd.tags();
      g.offsets[{topic, index}] = {offset, meta};
      w.i32(index);
      w.i16(0);
      w.tags();
    }
    rd.tags();
    w.tags();
  }
  w.tags();
  respond(b.finish(r.conn));
}

void Broker::offset_fetch(Request& r, Reader& rd) {
  int v = r.api_version;
  struct GroupQuery {
    std::string id;
    bool all = false;
    std::vector<std::pair<std::string, std::vector<int32_t>>> topics;
  };
  std::vector<GroupQuery> queries;
  auto read_topics = [&](GroupQuery& q) {
    int32_t nt = rd.array_len();
    if (nt < 0) q.all = true;
    for (int32_t i = 0; i < nt; ++i) {
      std::string name = rd.string();
      std::vector<int32_t> parts;
      int32_t np = rd.array_len();
      for (int32_t j = 0; j < np; ++j) parts.push_back(rd.i32());
      rd.tags();
      q.topics.emplace_back(name, parts);
    }
  };
  if (v <= 7) {
    GroupQuery q;
    q.id = rd.string();
    read_topics(q);
    queries.push_back(q);
  } else {
    int32_t ng = rd.array_len();
    for (int32_t i = 0; i < ng; ++i) {
      GroupQuery q;
      q.id = rd.string();
      read_topics(q);
      rd.tags();
      queries.push_back(q);
    }
  }
  for (auto& q : queries) ledger_->set_group(r.client_id, q.id);
  ResponseBuilder b(r.correlation_id, r.flexible, r.flexible);
  Writer& w = b.w;
  if (v >= 3) w.i32(0);
  std::lock_guard lock(groups_mu_);
  auto write_topics = [&](GroupQuery& q) {
    Group& g = groups_[q.id];
    if (q.all) {
      std::map<std::string, std::vector<int32_t>> by_topic;
      for (auto& [key, val] : g.offsets) by_topic[key.first].push_back(key.second);
      for (auto& [t, ps] : by_topic) q.topics.emplace_back(t, ps);
    }
    w.array_len(int32_t(q.topics.size()));
    for (auto& [name, parts] : q.topics) {
      w.string(name);
      w.array_len(int32_t(parts.size()));
      for (int32_t index : parts) {
        auto it = g.offsets.find({name, index});
        w.i32(index);
        w.i64(it == g.offsets.end() ? -1 : it->second.first);
        if (v >= 5) w.i32(-1);
        w.nstring(it == g.offsets.end() ? std::optional<std::string>("") : it->second.second);
        w.i16(0);
        w.tags();
      }
      w.tags();
    }
  };
  if (v <= 7) {
    write_topics(queries[0]);
    if (v >= 2) w.i16(0);
  } else {
    w.array_len(int32_t(queries.size()));
    for (auto& q : queries) {
      w.string(q.id);
      write_topics(q);
      w.i16(0);
      w.tags();
    }
  }
  w.tags();
  respond(b.finish(r.conn));
}

// ---------------------------------------------------------------------------------------------

void BrokerDeleter::operator()(Broker* b) const {
  delete b;
}

BrokerPtr start_broker(BrokerConfig config, LogStore* log, Ledger* ledger, std::string* error) {
  BrokerPtr b(new Broker(std::move(config), log, ledger));
  *error = b->start();
  if (!error->empty()) {
    b->stop();
    return nullptr;
  }
  return b;
}
void stop_broker(Broker* b) {
  b->stop();
}
void notify_appended(Broker* b) {
  b->data_appended();
}
int broker_port(Broker* b) {
  return b->port();
}
int broker_tls_port(Broker* b) {
  return b->tls_port();
}
nlohmann::json broker_stats(Broker* b) {
  return b->stats();
}
nlohmann::json broker_groups(Broker* b) {
  return b->groups();
}

}  // namespace tb
