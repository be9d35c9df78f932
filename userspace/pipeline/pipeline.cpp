#include "pipeline/pipeline.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "kafka/kafka.h"
#include "objstore/objstore.h"
#include "opaque/opaque.h"

namespace fc::pipeline {

const char* role_name(Role role) {
  switch (role) {
    case Role::kKafka:
      return "kafka";
    case Role::kKafkaOpaque:
      return "kafka-opaque";
    case Role::kObjectStoreHttp:
      return "object-store-http";
    case Role::kObjectStoreOpaque:
      return "object-store-opaque";
    case Role::kOther:
      return "other";
    default:
      return "unknown";
  }
}

namespace {

bool starts_with(std::span<const std::uint8_t> bytes, std::string_view prefix) {
  return bytes.size() >= prefix.size() &&
         std::memcmp(bytes.data(), prefix.data(), prefix.size()) == 0;
}

bool looks_like_http_request(std::span<const std::uint8_t> b) {
  for (std::string_view m : {"GET ", "HEAD ", "PUT ", "POST ", "DELETE "})
    if (starts_with(b, m)) return true;
  return false;
}

bool looks_like_tls_record(std::span<const std::uint8_t> b) {
  return b.size() >= 3 && b[0] >= 0x14 && b[0] <= 0x17 && b[1] == 0x03 && b[2] <= 0x04;
}

bool contains(const std::vector<std::uint16_t>& ports, std::uint16_t port) {
  return port != 0 && std::find(ports.begin(), ports.end(), port) != ports.end();
}

// Calls `feed(position, length, bytes)` for each captured range and each hole of a piece, in order.
template <typename Feed>
void for_each_run(const Piece& p, Feed&& feed) {
  std::uint64_t cursor = p.position;
  const std::uint64_t end = p.position + p.length;
  for (const Segment& s : p.captured) {
    if (s.position < cursor || s.position + s.bytes.size() > end) continue;  // malformed: skip
    if (s.position > cursor) feed(cursor, s.position - cursor, std::span<const std::uint8_t>{});
    feed(s.position, s.bytes.size(), s.bytes);
    cursor = s.position + s.bytes.size();
  }
  if (cursor < end) feed(cursor, end - cursor, std::span<const std::uint8_t>{});
}

}  // namespace

struct Pipeline::Impl : kafka::Sink, attribution::Sink {
  PipelineConfig config;
  cost::CostMeter meter;
  sensors::SensorTable& sensors;
  exporter::Ledger* ledger;
  exporter::AuditLog* audit;
  std::unique_ptr<objstore::KeyLayout> layout;
  kafka::Decoder decoder;
  attribution::Attributor attributor;
  std::int64_t wall_offset_ns = 0;
  std::uint64_t now_ns = 0;
  PipelineStats stats;
  std::unordered_map<std::string, std::string> groups;  // client id → group id

  struct Conn {
    Role role = Role::kUnknown;
    std::uint16_t local_port = 0;
    std::uint16_t peer_port = 0;
    std::string peer_ip;
    bool opened = false;
    bool kafka_checked = false;
    std::uint32_t process = 0;  // the broker process that owns it (first call seen); 0: unknown  //
                                // the first bytes of a Kafka-port connection were looked at
    std::unique_ptr<objstore::HttpConnection> http;
    std::unique_ptr<opaque::CycleRecognizer> cycles;
    std::unique_ptr<objstore::TlsCycleEstimator> tls;
  };
  std::unordered_map<std::uint64_t, Conn> conns;
  // The connections with a cycle recognizer or TLS estimator, which tick() flushes when idle
  // (walking every connection for them took milliseconds with thousands open).
  std::unordered_set<std::uint64_t> flushed_when_idle;
  ObjectStoreEndpoints endpoints;
  // Per thread, the HTTP object-store connection it last wrote a request on, and the one before:
  // a blocking client that moves to another connection has given up on its request on the old
  // one (a retry after a stale keep-alive connection, see objstore::is_retry_of).
  struct HttpWriter {
    std::uint64_t current = 0;
    std::uint64_t previous = 0;
  };
  std::unordered_map<std::uint32_t, HttpWriter> http_writers;
  objstore::HttpStats http_closed;  // of the HTTP connections closed for good
  // HTTP connections closed with requests unanswered: kept a moment, as their client may retry them
  // elsewhere (one GET, not two); closed for good after kClosingHoldNs or at finish().
  struct Closing {
    std::unique_ptr<objstore::HttpConnection> http;
    std::uint64_t closed_ns = 0;
  };
  std::unordered_map<std::uint64_t, Closing> closing;
  static constexpr std::uint64_t kClosingHoldNs = 1'000'000'000;
  // Threads that wrote on opaque object-store connections: true when named like a reader.
  std::unordered_map<std::uint32_t, bool> opaque_writers;

  bool reader_thread_name(std::string_view name) const {
    if (name.empty() || config.opaque_reader_threads.empty()) return true;
    for (const std::string& prefix : config.opaque_reader_threads)
      if (name.substr(0, prefix.size()) == prefix) return true;
    return false;
  }

  Impl(const PipelineConfig& c, cost::PriceTable prices, sensors::SensorTable& s,
       const attribution::LocalTier* tier, exporter::Ledger* l, exporter::AuditLog* a,
       std::unique_ptr<objstore::KeyLayout> key_layout)
      : config(c),
        meter(std::move(prices)),
        sensors(s),
        ledger(l),
        audit(a),
        layout(std::move(key_layout)),
        decoder(*this),
        attributor(*this, tier) {
    endpoints.ports = c.object_store_ports;
    endpoints.cidrs = c.object_store_cidrs;
    endpoints.hosts = c.object_store_hosts;
    if (!c.unix_timestamps) {
      timespec mono{}, real{};
      clock_gettime(CLOCK_MONOTONIC, &mono);
      clock_gettime(CLOCK_REALTIME, &real);
      wall_offset_ns = (static_cast<std::int64_t>(real.tv_sec) - mono.tv_sec) * 1'000'000'000LL +
                       (real.tv_nsec - mono.tv_nsec);
    }
  }

  std::int64_t unix_seconds(std::uint64_t t) const {
    return (static_cast<std::int64_t>(t) + wall_offset_ns) / 1'000'000'000LL;
  }

  // ---- kafka::Sink ----
  void on_request(const kafka::Exchange& x) override { attributor.on_request(x); }
  void on_exchange(const kafka::Exchange& x) override {
    if (!x.group_id.empty() && !x.client_id.empty()) {
      auto& g = groups[x.client_id];
      if (g != x.group_id && groups.size() < 100'000) {
        g = x.group_id;
        sensors.set_group(x.client_id, x.group_id);
      }
    }
    attributor.on_exchange(x);
  }

  // ---- attribution::Sink ----
  void on_attributed(const attribution::Attributed& a) override {
    const cost::Cost c = meter.add(a.body_bytes, 1);
    const bool estimated = a.method == attribution::Method::kEstimated;
    sensors::Observation o;
    o.client_id = a.client_id;
    o.peer_ip = a.peer;
    o.topic = a.topic.empty() ? std::string_view("__unknown__") : a.topic;
    o.partition = sensors.config().partition_label ? a.partition : sensors::kNoPartition;
    o.method = estimated ? sensors::Method::kEstimated : sensors::Method::kExact;
    o.remote_bytes = a.body_bytes;
    o.requests = 1;
    o.errors = a.error ? 1 : 0;
    o.cost_api = c.api;
    o.cost_egress = c.egress;
    o.now_ns = now_ns;
    sensors.record(o);
    std::string_view group;
    if (auto g = groups.find(std::string(a.client_id)); g != groups.end()) group = g->second;
    const std::string_view method = sensors::method_name(o.method);
    if (ledger) {
      ledger->add(unix_seconds(a.read->end_ns),
                  {0, std::string(a.client_id), std::string(group), std::string(o.topic),
                   std::string(method)},
                  {a.body_bytes, 1, a.error ? 1u : 0u, c.api, c.egress});
    }
    if (audit) {
      exporter::AuditRecord r;
      r.unix_ms = (static_cast<std::int64_t>(a.read->end_ns) + wall_offset_ns) / 1'000'000;
      r.client_id = a.client_id;
      r.group_id = group;
      r.topic = o.topic;
      r.partition = a.partition;
      r.fetch_offset = a.fetch_offset;
      r.max_bytes = a.partition_max_bytes;
      r.object_key = a.read->object_key;
      r.bytes = a.body_bytes;
      r.status = a.read->status;
      r.method = method;
      audit->write(r);
    }
  }

  void on_fetch_done(const attribution::FetchDone& d) override {
    sensors::Observation o;
    o.client_id = d.client_id;
    o.peer_ip = d.peer;
    o.topic = d.topic.empty() ? std::string_view("__unknown__") : d.topic;
    o.partition = sensors.config().partition_label ? d.partition : sensors::kNoPartition;
    o.method = d.method == attribution::Method::kEstimated ? sensors::Method::kEstimated
                                                           : sensors::Method::kExact;
    if (d.response_seen) {
      o.object_bytes_read = d.object_bytes;
      o.bytes_delivered = d.bytes_delivered;
    }
    o.latency_seconds = d.object_reads > 0 ? d.remote_latency_seconds : -1;
    o.now_ns = now_ns;
    sensors.record(o);
  }

  // ---- object reads ----
  void on_get(const objstore::ObjectGet& g) {
    // Uploads (PUT) and listings are the broker's own work, not reads a client caused.
    if (g.method == objstore::Method::kExact && g.http_method != "GET" && !g.http_method.empty())
      return;
    if (g.method == objstore::Method::kEstimated) {
      auto writer = opaque_writers.find(g.thread_id);
      if (writer != opaque_writers.end() && !writer->second) {
        ++stats.opaque_cycles_not_reads;
        return;
      }
    }
    ++stats.object_reads;
    attributor.on_object_read(object_read(g));
  }

  // A GET's request head was read: exact GETs are matched to their fetch now, in the order the
  // broker's reader threads start them (they take queued fetches oldest first), not in the order
  // their responses complete.
  void on_get_request(const objstore::ObjectGet& g) {
    if (g.http_method == "GET" && g.key_fields.parsed) attributor.on_object_request(object_read(g));
  }

  attribution::ObjectRead object_read(const objstore::ObjectGet& g) const {
    attribution::ObjectRead r;
    r.connection = g.connection;
    if (auto c = conns.find(g.connection); c != conns.end()) r.process = c->second.process;
    r.thread_id = g.thread_id;
    r.start_ns = g.request_ns;
    r.end_ns = g.response_end_ns ? g.response_end_ns : g.response_start_ns;
    r.status = g.status;
    r.body_bytes = g.billable_bytes();
    r.method = g.method == objstore::Method::kEstimated ? attribution::Method::kEstimated
                                                        : attribution::Method::kExact;
    r.object_key = g.target.key;
    if (g.key_fields.parsed) {
      r.topic = g.key_fields.topic;
      r.topic_id = g.key_fields.topic_id;
      r.partition = g.key_fields.partition;
      r.segment_base_offset = g.key_fields.base_offset;
      if (g.range && g.range->first) {
        r.range_first = static_cast<std::int64_t>(*g.range->first);
        r.range_last = g.range->last ? static_cast<std::int64_t>(*g.range->last) : -1;
      }
    }
    return r;
  }

  objstore::HttpConnection* http_of(std::uint64_t id) {
    if (auto c = conns.find(id); c != conns.end() && c->second.http) return c->second.http.get();
    if (auto c = closing.find(id); c != closing.end()) return c->second.http.get();
    return nullptr;
  }

  // A thread wrote a request on `id` after writing on another HTTP connection before. A blocking
  // client (a reader thread: one request at a time) has left its request there: a retry of it
  // (same object and range; the old connection was stale) makes one GET with this one, and any
  // other is given up (unanswered, a failed GET) now rather than when, or if, its close is seen.
  void moved_on(std::uint64_t id, std::uint32_t thread_id, std::string_view thread_name,
                std::uint64_t time_ns) {
    auto writer = http_writers.find(thread_id);
    if (writer == http_writers.end() || writer->second.previous == 0) return;
    objstore::HttpConnection* old = http_of(writer->second.previous);
    objstore::HttpConnection* now = http_of(id);
    if (!old || !now || old == now) return;
    if (auto request = now->newest_pending(); request && request->thread_id == thread_id)
      old->forget_retried(*request);
    if (reader_thread_name(thread_name)) old->abandon(thread_id, time_ns);
  }

  // Closes an HTTP connection for good; its counts go to http_closed.
  void close_http(std::unique_ptr<objstore::HttpConnection> http, std::uint64_t time_ns) {
    http->close(time_ns);
    http_closed += http->stats();
  }

  void expire_closing(std::uint64_t now, bool all) {
    for (auto it = closing.begin(); it != closing.end();) {
      if (all || now >= it->second.closed_ns + kClosingHoldNs) {
        close_http(std::move(it->second.http), it->second.closed_ns);
        it = closing.erase(it);
      } else {
        ++it;
      }
    }
  }

  Role classify(Conn& conn, const Piece& p) {
    std::span<const std::uint8_t> first;
    if (!p.captured.empty() && p.captured.front().position == p.position)
      first = p.captured.front().bytes;
    if (contains(config.kafka_ports, conn.local_port)) return kafka_role(conn, p, first);
    if (first.empty()) return Role::kUnknown;  // length-only pieces before anything readable
    const bool store_endpoint =
        endpoints.port_matches(conn.peer_port) || endpoints.address_matches(conn.peer_ip);
    if (!p.to_target) {  // the broker speaks first on connections it opened
      if (looks_like_http_request(first)) return Role::kObjectStoreHttp;
      if (looks_like_tls_record(first)) {
        // The ClientHello names the server: configured object-store hosts are recognised on any
        // port; with hosts configured, another name is not the object store.
        const auto name = client_hello_server_name(first);
        if (name && endpoints.host_matches(*name)) return Role::kObjectStoreOpaque;
        if (store_endpoint || endpoints.empty()) return Role::kObjectStoreOpaque;
        return Role::kOther;
      }
      return store_endpoint ? Role::kObjectStoreHttp : Role::kKafka;
    }
    if (store_endpoint)
      return looks_like_tls_record(first) ? Role::kObjectStoreOpaque : Role::kObjectStoreHttp;
    return looks_like_tls_record(first) ? Role::kOther : Role::kKafka;
  }

  // A Kafka-port connection whose client speaks TLS records (a Kafka frame never starts with
  // 0x14-0x17 0x03: that would be a >300 MB request) is opaque unless its plaintext shows up
  // (the TLS library is hooked: its raw bytes then stop coming, see capture_feed.h).
  Role kafka_role(Conn& conn, const Piece& p, std::span<const std::uint8_t> first) {
    if (!first.empty()) conn.kafka_checked = true;
    return p.to_target && looks_like_tls_record(first) ? Role::kKafkaOpaque : Role::kKafka;
  }

  // The plaintext of connection `id` arrives (its TLS library is hooked): not opaque after all.
  void readable(std::uint64_t id) {
    auto it = conns.find(id);
    if (it == conns.end() || it->second.role != Role::kKafkaOpaque) return;
    it->second.cycles.reset();
    it->second.role = Role::kOther;
    attributor.forget_opaque(id);
  }

  void start_role(std::uint64_t id, Conn& conn, Role role) {
    conn.role = role;
    switch (role) {
      case Role::kKafka:
        ++stats.kafka_connections;
        if (conn.opened) decoder.open(id, now_ns);
        break;
      case Role::kKafkaOpaque: {
        ++stats.opaque_kafka_connections;
        opaque::CycleCallbacks callbacks;
        const std::string peer = conn.peer_ip;
        callbacks.on_open = [this, peer](std::uint64_t connection, std::uint64_t request_ns) {
          auto c = conns.find(connection);
          attributor.on_opaque_open(connection, peer, request_ns,
                                    c != conns.end() ? c->second.process : 0);
        };
        callbacks.on_cycle = [this](const opaque::Cycle& c) {
          ++stats.opaque_kafka_cycles;
          attribution::OpaqueCycle oc;
          oc.connection = c.connection;
          oc.request_ns = c.request_ns;
          oc.response_start_ns = c.response_start_ns;
          oc.response_end_ns = c.response_end_ns;
          oc.response_bytes = c.response_plaintext;
          attributor.on_opaque_cycle(oc);
        };
        conn.cycles = std::make_unique<opaque::CycleRecognizer>(id, std::move(callbacks));
        flushed_when_idle.insert(id);
        break;
      }
      case Role::kObjectStoreHttp: {
        ++stats.object_store_connections;
        objstore::HttpOptions options;
        options.virtual_host_suffixes = config.virtual_host_suffixes;
        conn.http = std::make_unique<objstore::HttpConnection>(
            id, layout.get(), options, [this](const objstore::ObjectGet& g) { on_get(g); },
            [this](const objstore::ObjectGet& g) { on_get_request(g); });
        break;
      }
      case Role::kObjectStoreOpaque:
        ++stats.opaque_connections;
        attributor.expect_estimates();
        conn.tls = std::make_unique<objstore::TlsCycleEstimator>(
            id, objstore::TlsEstimateOptions{},
            [this](const objstore::ObjectGet& g) { on_get(g); });
        flushed_when_idle.insert(id);
        break;
      default:
        break;
    }
  }

  void feed(std::uint64_t id, Conn& conn, const Piece& p) {
    switch (conn.role) {
      case Role::kKafka: {
        const auto dir = p.to_target ? kafka::Direction::kRequest : kafka::Direction::kResponse;
        if (p.whole_messages) {
          decoder.skip(id, dir, p.time_ns, p.position, p.length);
          break;
        }
        for_each_run(p, [&](std::uint64_t pos, std::uint64_t len, std::span<const std::uint8_t> b) {
          decoder.data(id, dir, p.time_ns, pos, len, b);
        });
        break;
      }
      case Role::kObjectStoreHttp: {
        const auto dir =
            p.to_target ? objstore::Direction::kResponse : objstore::Direction::kRequest;
        bool moved = false;
        if (!p.to_target) {
          if (http_writers.size() > 100'000) http_writers.clear();  // thread ids churned
          HttpWriter& w = http_writers[p.thread_id];
          if (w.current != id) {
            w.previous = w.current;
            w.current = id;
            moved = w.previous != 0;
          }
        }
        for_each_run(p, [&](std::uint64_t pos, std::uint64_t len, std::span<const std::uint8_t> b) {
          conn.http->on_piece(dir, pos, len, b, p.time_ns, p.thread_id);
        });
        if (moved) moved_on(id, p.thread_id, p.thread_name, p.time_ns);
        break;
      }
      case Role::kKafkaOpaque: {
        std::span<const std::uint8_t> first;
        if (!p.captured.empty() && p.captured.front().position == p.position)
          first = p.captured.front().bytes;
        conn.cycles->on_piece(p.to_target, p.position, p.length, first, p.time_ns);
        break;
      }
      case Role::kObjectStoreOpaque: {
        const auto dir =
            p.to_target ? objstore::Direction::kResponse : objstore::Direction::kRequest;
        std::span<const std::uint8_t> first;
        if (!p.captured.empty() && p.captured.front().position == p.position)
          first = p.captured.front().bytes;
        if (!p.to_target) {
          if (opaque_writers.size() > 100'000) opaque_writers.clear();  // thread ids churned
          opaque_writers[p.thread_id] = reader_thread_name(p.thread_name);
        }
        conn.tls->on_piece(dir, p.length, first, p.time_ns, p.thread_id);
        break;
      }
      default:
        break;
    }
  }
};

Result<std::unique_ptr<Pipeline>> Pipeline::create(
    const PipelineConfig& config, cost::PriceTable prices, sensors::SensorTable& sensors,
    const attribution::LocalTier* tier, exporter::Ledger* ledger, exporter::AuditLog* audit) {
  auto layout = objstore::make_key_layout(config.key_layout);
  if (!layout) return make_error("object_store.key_layout: " + layout.error().message);
  auto impl = std::make_unique<Impl>(config, std::move(prices), sensors, tier, ledger, audit,
                                     std::move(*layout));
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(impl)));
}

Pipeline::Pipeline(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Pipeline::~Pipeline() = default;

void Pipeline::open(std::uint64_t connection, std::uint64_t time_ns, std::uint16_t local_port,
                    std::uint16_t peer_port, std::string_view peer_ip) {
  impl_->now_ns = std::max(impl_->now_ns, time_ns);
  auto& conn = impl_->conns[connection];
  conn.opened = true;
  conn.local_port = local_port;
  conn.peer_port = peer_port;
  conn.peer_ip = std::string(peer_ip);
  if (!peer_ip.empty()) impl_->attributor.set_peer(connection, peer_ip);
  ++impl_->stats.connections;
  if (contains(impl_->config.kafka_ports, local_port))
    impl_->start_role(connection, conn, Role::kKafka);
}

void Pipeline::describe(std::uint64_t connection, std::uint16_t local_port, std::uint16_t peer_port,
                        std::string_view peer_ip) {
  auto [it, fresh] = impl_->conns.try_emplace(connection);
  if (fresh) ++impl_->stats.connections;
  it->second.local_port = local_port;
  it->second.peer_port = peer_port;
  it->second.peer_ip = std::string(peer_ip);
  if (!peer_ip.empty()) impl_->attributor.set_peer(connection, peer_ip);
}

void Pipeline::piece(const Piece& p) {
  impl_->now_ns = std::max(impl_->now_ns, p.time_ns);
  ++impl_->stats.pieces;
  auto [it, fresh] = impl_->conns.try_emplace(p.connection);
  Impl::Conn& conn = it->second;
  if (fresh) ++impl_->stats.connections;
  if (p.connection & kTlsStreamBit) impl_->readable(p.connection & ~kTlsStreamBit);
  if (conn.role == Role::kKafka && !conn.kafka_checked) {
    // Kafka by its port before a byte was seen: its first bytes may still show TLS.
    std::span<const std::uint8_t> first;
    if (!p.captured.empty() && p.captured.front().position == p.position)
      first = p.captured.front().bytes;
    if (impl_->kafka_role(conn, p, first) == Role::kKafkaOpaque) {
      impl_->decoder.close(p.connection, p.time_ns);
      impl_->start_role(p.connection, conn, Role::kKafkaOpaque);
    }
  }
  if (conn.role == Role::kUnknown) {
    const Role role = impl_->classify(conn, p);
    if (role == Role::kUnknown) return;  // length-only pieces before anything readable
    impl_->start_role(p.connection, conn, role);
  }
  if (p.process != 0 && conn.process == 0) {  // reads match only fetches of the same broker
    conn.process = p.process;
    if (conn.role == Role::kKafka) impl_->attributor.set_process(p.connection, p.process);
  }
  impl_->feed(p.connection, conn, p);
}

void Pipeline::close(std::uint64_t connection, std::uint64_t time_ns) {
  impl_->now_ns = std::max(impl_->now_ns, time_ns);
  auto it = impl_->conns.find(connection);
  if (it == impl_->conns.end()) return;
  Impl::Conn& conn = it->second;
  if (conn.role == Role::kKafka) {
    impl_->decoder.close(connection, time_ns);
    impl_->attributor.close_connection(connection, time_ns);
  }
  if (conn.cycles) conn.cycles->close(time_ns);
  if (conn.http && conn.http->has_pending()) {
    auto& held = impl_->closing[connection];
    if (held.http) impl_->close_http(std::move(held.http), held.closed_ns);  // id reused meanwhile
    held = {std::move(conn.http), time_ns};
  } else if (conn.http) {
    impl_->close_http(std::move(conn.http), time_ns);
  }
  if (conn.tls) conn.tls->close();
  if (conn.tls || conn.cycles) impl_->flushed_when_idle.erase(connection);
  impl_->conns.erase(it);
}

void Pipeline::tick(std::uint64_t now_ns) {
  impl_->now_ns = std::max(impl_->now_ns, now_ns);
  impl_->decoder.close_gaps(now_ns);
  impl_->decoder.expire(now_ns);
  // Cycles that went quiet first, so that expire() can settle them with the fetches they belong to.
  for (std::uint64_t id : impl_->flushed_when_idle) {
    auto it = impl_->conns.find(id);
    if (it == impl_->conns.end()) continue;
    Impl::Conn& conn = it->second;
    if (conn.tls) conn.tls->flush_if_idle(now_ns, 50'000'000);
    if (conn.cycles) conn.cycles->flush_if_idle(now_ns, 50'000'000);
  }
  impl_->expire_closing(now_ns, false);
  impl_->attributor.expire(now_ns);
  impl_->sensors.expire_idle(now_ns);
}

void Pipeline::finish(std::uint64_t time_ns) {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, conn] : impl_->conns) ids.push_back(id);
  for (std::uint64_t id : ids) close(id, time_ns);
  impl_->expire_closing(time_ns, true);
  impl_->decoder.close_all(time_ns);
  impl_->attributor.expire(~0ull);
}

void Pipeline::set_price_table(cost::PriceTable prices) {
  cost::CostMeter meter(std::move(prices));
  (void)meter.add(impl_->meter.period_bytes(), 0);
  impl_->meter = std::move(meter);
}

void Pipeline::add_kafka_ports(const std::vector<std::uint16_t>& ports) {
  for (std::uint16_t port : ports)
    if (!contains(impl_->config.kafka_ports, port)) impl_->config.kafka_ports.push_back(port);
}

const attribution::Counters& Pipeline::attribution_counters() const {
  return impl_->attributor.counters();
}

PipelineStats Pipeline::stats() const {
  PipelineStats s = impl_->stats;
  const auto& kafka = impl_->decoder.counters();
  s.kafka_parse_errors = kafka.parse_errors;
  s.kafka_frames_truncated = kafka.frames_truncated;
  s.kafka_requests_truncated = kafka.requests_truncated;
  s.kafka_resyncs = kafka.resyncs;
  s.kafka_session_misses = kafka.session_misses;
  s.kafka_session_partitions_capped = kafka.session_partitions_capped;
  s.http = impl_->http_closed;
  for (const auto& [id, conn] : impl_->conns)
    if (conn.http) s.http += conn.http->stats();
  for (const auto& [id, held] : impl_->closing) s.http += held.http->stats();
  return s;
}

}  // namespace fc::pipeline
