#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <unordered_map>

#include "kafka/bodies.h"
#include "kafka/kafka.h"
#include "kafka/wire.h"

namespace fc::kafka {

namespace {

constexpr std::int16_t kFetchSessionIdNotFound = 70;
constexpr std::int16_t kInvalidFetchSessionEpoch = 71;
constexpr std::size_t kMaxSessionsPerConnection = 8;
// Entries kept per vector of a recycled exchange (partitions: 56 KiB).
constexpr std::size_t kKeptEntries = 1024;
constexpr std::size_t kMaxClientIdScan = 255;  // longer client ids are not trusted when resyncing
// Response bytes held while waiting for the request they answer (see DirectionState::holding).
constexpr std::size_t kMaxHeldResponseBytes = 64u << 10;
// Frames claiming more are not trusted when resyncing (Produce requests are ~1 MiB by default).
constexpr std::uint32_t kMaxResyncFrame = 16u << 20;

// Topic key for session state: the name up to v12, the id from v13 (distinct key spaces).
std::string topic_key(const FetchTopic& topic, bool by_id) {
  if (by_id) return std::string(reinterpret_cast<const char*>(topic.id.bytes.data()), 16) + "#";
  return topic.name;
}

// The topic a session key stands for: topic_key's inverse.
FetchTopic topic_of_key(const std::string& key, bool by_id) {
  FetchTopic topic;
  if (by_id)
    std::memcpy(topic.id.bytes.data(), key.data(), topic.id.bytes.size());
  else
    topic.name = key;
  return topic;
}

struct SessionPartition {
  std::int64_t fetch_offset;
  std::int32_t partition_max_bytes;
  std::int32_t current_leader_epoch;
  // the incremental request that last listed it (Impl::incremental_fetches)
  std::uint64_t listed_by = 0;
};

struct FetchSession {
  std::int32_t id = 0;
  std::int32_t epoch = 0;
  bool by_id = false;
  std::map<std::string, std::unordered_map<std::int32_t, SessionPartition>> topics;
  std::size_t size() const {
    std::size_t n = 0;
    for (auto& [_, parts] : topics) n += parts.size();
    return n;
  }
};

enum class Mode : std::uint8_t { kResync, kFrameStart, kBody, kFetchResponse };
enum class FetchStep : std::uint8_t {
  kHeader,
  kTopic,
  kPartition,
  kPartitionTags,
  kTopicTags,
  kTail
};

struct DirectionState {
  explicit DirectionState(const stream::Limits& limits) : stream(limits) {}
  stream::ByteStream stream;
  Mode mode = Mode::kResync;
  std::uint64_t frame_end = 0;
  std::uint32_t header_size = 0;  // bytes from frame start to the body
  Exchange* exchange = nullptr;   // the exchange whose frame is in progress
  // A response that arrived before its request (events of one connection come from different
  // CPUs' ring buffers): held while nothing is in flight, since then it can only answer a request
  // not seen yet.
  bool holding = false;
  // Fetch response streaming state.
  FetchStep step = FetchStep::kHeader;
  std::uint32_t topics_left = 0;
  std::uint32_t partitions_left = 0;
  std::uint32_t topic_index = 0;
  std::size_t partition_hint = 0;
};

struct Connection {
  Connection(std::uint64_t conn_id, const stream::Limits& limits)
      : id(conn_id), requests(limits), responses(limits) {}
  std::uint64_t id;
  DirectionState requests;
  DirectionState responses;
  std::vector<Exchange*> in_flight;  // request order (Kafka answers in order per connection)
  std::vector<std::unique_ptr<Exchange>> owned;
  std::vector<Exchange*> free;
  std::vector<FetchSession> sessions;
  std::uint64_t last_time_ns = 0;
  // After SaslHandshake v0 the client sends raw SASL tokens (size-prefixed, no Kafka header)
  // until authenticated: while set, only a frame with a plausible header carrying this client id
  // is taken for a request again, so token bytes never become a "client id".
  bool raw_sasl = false;
  std::string sasl_client_id;
  bool touched = false;  // in Impl::touched: bytes came since the last close_gaps

  Exchange* acquire() {
    if (free.empty()) {
      owned.push_back(std::make_unique<Exchange>());
      return owned.back().get();
    }
    Exchange* ex = free.back();
    free.pop_back();
    ex->clear();
    return ex;
  }
  // A recycled exchange keeps its vectors' memory for the next request, unless one is larger
  // than a consumer's requests need: a connection keeps up to max_in_flight of them.
  void release(Exchange* ex) {
    // (Assigning {} would keep the capacity: it assigns an empty list.)
    if (ex->fetch.partitions.capacity() > kKeptEntries)
      ex->fetch.partitions = std::vector<FetchPartition>();
    if (ex->fetch.topics.capacity() > kKeptEntries) ex->fetch.topics = std::vector<FetchTopic>();
    free.push_back(ex);
  }
  // Partitions that this connection's requests in flight carry from a session.
  std::size_t session_partitions_in_flight() const {
    std::size_t n = 0;
    for (const Exchange* ex : in_flight) n += ex->fetch.partitions_from_session;
    return n;
  }
  FetchSession* session(std::int32_t session_id) {
    for (auto& s : sessions) {
      if (s.id == session_id) return &s;
    }
    return nullptr;
  }
  void erase_session(std::int32_t session_id) {
    std::erase_if(sessions, [&](const FetchSession& s) { return s.id == session_id; });
  }
};

bool printable(std::span<const std::uint8_t> s) {
  for (std::uint8_t c : s) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

// A client id that may start a resynchronised header: no control characters (C0, DEL). Bytes
// above 0x7e pass: client ids are UTF-8 (or, from a broken client, anything); sanitizing them is
// the sensors' job, and requiring ASCII here lost every request of such a client on connections
// first seen mid-stream (all of them with the sock tracepoints).
bool plausible_client_id(std::span<const std::uint8_t> s) {
  for (std::uint8_t c : s) {
    if (c < 0x20 || c == 0x7f) return false;
  }
  return true;
}

enum class Probe { kNo, kYes, kNeedMore };

}  // namespace

struct Decoder::Impl {
  Impl(Sink& s, Options o) : sink(s), options(o) {}

  Sink& sink;
  Options options;
  Counters counters;
  std::unordered_map<std::uint64_t, std::unique_ptr<Connection>> connections;
  struct UuidHash {
    std::size_t operator()(const Uuid& id) const {
      std::uint64_t a, b;
      std::memcpy(&a, id.bytes.data(), 8);
      std::memcpy(&b, id.bytes.data() + 8, 8);
      return std::hash<std::uint64_t>()(a ^ (b * 0x9e3779b97f4a7c15ull));
    }
  };
  std::unordered_map<Uuid, std::string, UuidHash> topic_names;
  // Per (api key, version): a flat table for the keys and versions Kafka uses, a map beyond.
  static constexpr int kTableKeys = 128, kTableVersions = 32;
  std::vector<ApiCount> api_table = std::vector<ApiCount>(kTableKeys * kTableVersions);
  std::map<std::uint32_t, ApiCount> api_counts;  // (key << 16 | version), outside the table
  std::uint64_t now_ns = 0;
  std::uint64_t incremental_fetches = 0;  // numbers each incremental request (listed_by)
  Exchange scratch;                       // resync verification decodes into it
  Connection* last_connection = nullptr;
  // The connections that got bytes since the last close_gaps: only they can have gaps to close
  // or frames to finish (a sweep of every connection took 10-20 ms with 15,000 open).
  std::vector<std::uint64_t> touched;
  std::uint64_t next_expire_ns = 0;  // expire() walks every connection again from then
  bool closing = false;              // close(): nothing more will come, held responses are given up

  // Consecutive events usually belong to the same connection: skip the hash lookup then.
  Connection& current(std::uint64_t id) {
    Connection& c =
        last_connection && last_connection->id == id ? *last_connection : connection(id, false);
    last_connection = &c;
    return c;
  }

  Connection& connection(std::uint64_t id, bool from_start) {
    auto it = connections.find(id);
    if (it != connections.end()) return *it->second;
    auto conn = std::make_unique<Connection>(id, options.stream_limits);
    if (from_start) {
      conn->requests.stream.set_start(0);
      conn->responses.stream.set_start(0);
      conn->requests.mode = Mode::kFrameStart;
      conn->responses.mode = Mode::kFrameStart;
    }
    ++counters.connections;
    return *connections.emplace(id, std::move(conn)).first->second;
  }

  ApiCount& api_count(std::int16_t key, std::int16_t version) {
    if (key >= 0 && key < kTableKeys && version >= 0 && version < kTableVersions) {
      ApiCount& entry = api_table[key * kTableVersions + version];
      entry.api_key = key;
      entry.api_version = version;
      return entry;
    }
    std::uint32_t k = (static_cast<std::uint32_t>(static_cast<std::uint16_t>(key)) << 16) |
                      static_cast<std::uint16_t>(version);
    auto [it, inserted] = api_counts.try_emplace(k, ApiCount{key, version, 0, 0, 0});
    return it->second;
  }

  void resolve_topic_names(FetchExchange& f) {
    for (auto& t : f.topics) {
      if (!t.name.empty() || t.id.is_zero()) continue;
      auto it = topic_names.find(t.id);
      if (it != topic_names.end()) t.name = it->second;
    }
  }

  void learn(const Uuid& id, std::string_view name) {
    auto it = topic_names.find(id);
    if (it != topic_names.end()) {
      if (it->second != name) it->second = name;
      return;
    }
    if (topic_names.size() >= options.max_topic_ids) return;
    topic_names.emplace(id, std::string(name));
  }

  // ---- emission --------------------------------------------------------------------------

  void emit(Connection& c, Exchange* ex) {
    ++counters.exchanges;
    if (!ex->response_seen) ++counters.requests_unanswered;
    if (ex->api_key == api::kFetch && ex->body_decoded) resolve_topic_names(ex->fetch);
    sink.on_exchange(*ex);
    c.release(ex);
  }

  // ---- requests --------------------------------------------------------------------------

  // Does a request frame start at p? Used only when resynchronising, so it is strict: a frame of
  // an API we decode must decode to its exact end; any other must be followed by another
  // plausible header. kNeedMore: wait for bytes that would decide.
  Probe probe_request(const std::uint8_t* p, std::size_t n, bool verify) {
    if (n < 14) return Probe::kNeedMore;
    std::uint32_t size = wire::load_be32(p);
    auto key = static_cast<std::int16_t>(wire::load_be16(p + 4));
    auto version = static_cast<std::int16_t>(wire::load_be16(p + 6));
    auto correlation = static_cast<std::int32_t>(wire::load_be32(p + 8));
    auto client_len = static_cast<std::int16_t>(wire::load_be16(p + 12));
    if (size < 10 || size > kMaxResyncFrame || size > options.max_frame) return Probe::kNo;
    if (!bodies::plausible_api(key, version) || correlation < 0) return Probe::kNo;
    if (client_len < -1 || client_len > static_cast<std::int16_t>(kMaxClientIdScan) ||
        static_cast<std::uint32_t>(10 + std::max<int>(client_len, 0)) > size) {
      return Probe::kNo;
    }
    std::size_t header_end = 14 + std::max<int>(client_len, 0);
    if (n < header_end) return Probe::kNeedMore;
    if (!plausible_client_id({p + 14, header_end - 14})) return Probe::kNo;
    if (!verify) return Probe::kYes;
    const std::uint64_t frame = 4ull + size;
    if (bodies::decodes_request_body(key, version) && size <= options.max_decoded_frame) {
      if (n < frame) return Probe::kNeedMore;
      scratch.clear();
      scratch.api_key = key;
      scratch.api_version = version;
      wire::Reader r(p + header_end, p + frame);
      bool ok = decode_request_body(r, scratch);
      if (key == api::kFetch) ok = ok && r.p == p + frame;  // Fetch is read to its last byte
      return ok ? Probe::kYes : Probe::kNo;
    }
    // Unverifiable by decoding: ask for a non-empty client id and a plausible next header.
    if (client_len < 1 || !bodies::current_api(key, version)) return Probe::kNo;
    if (n < frame + 14) return Probe::kNeedMore;
    Probe next = probe_request(p + frame, n - frame, false);
    if (next == Probe::kYes && wire::load_be16(p + frame + 12) == 0) return Probe::kNo;
    return next == Probe::kNo ? Probe::kNo : Probe::kYes;
  }

  void process_requests(Connection& c) {
    DirectionState& d = c.requests;
    stream::ByteStream& s = d.stream;
    for (;;) {
      stream::View v = s.view();
      switch (d.mode) {
        case Mode::kResync: {
          if (v.hole) {
            counters.resync_bytes += v.hole;
            s.advance(v.hole);
            continue;
          }
          if (v.data.empty()) return;
          // Scan for a verified frame start. An undecided candidate (its verification needs
          // bytes not here yet) does not stop the scan, but the read position waits at the first
          // one so that it can still win when the bytes come.
          std::size_t k = 0;
          std::size_t first_undecided = v.data.size();
          bool found = false;
          for (; k < v.data.size(); ++k) {
            Probe r = probe_request(v.data.data() + k, v.data.size() - k, true);
            if (r == Probe::kYes) {
              found = true;
              break;
            }
            if (r == Probe::kNeedMore && !v.more_follows && first_undecided == v.data.size()) {
              first_undecided = k;
            }
          }
          if (!found) k = first_undecided;
          counters.resync_bytes += k;
          s.advance(k);
          if (found) {
            d.mode = Mode::kFrameStart;
            continue;
          }
          if (k == 0) return;  // wait for more bytes
          continue;
        }
        case Mode::kFrameStart: {
          if (v.hole) {
            lose_sync(d);
            continue;
          }
          if (v.data.size() < 14) {
            if (v.more_follows) {
              lose_sync(d);
              continue;
            }
            return;
          }
          const std::uint8_t* p = v.data.data();
          std::uint32_t size = wire::load_be32(p);
          auto key = static_cast<std::int16_t>(wire::load_be16(p + 4));
          auto version = static_cast<std::int16_t>(wire::load_be16(p + 6));
          auto correlation = static_cast<std::int32_t>(wire::load_be32(p + 8));
          auto client_len = static_cast<std::int16_t>(wire::load_be16(p + 12));
          if (size < 10 || size > options.max_frame || client_len < -1 ||
              10u + static_cast<std::uint32_t>(std::max<int>(client_len, 0)) > size) {
            lose_sync(d);
            continue;
          }
          std::size_t header_size = 14 + std::max<int>(client_len, 0);
          if (v.data.size() < header_size) {
            if (v.more_follows) {
              lose_sync(d);
              continue;
            }
            return;
          }
          ++counters.request_frames;
          const std::string_view client_id(reinterpret_cast<const char*>(p + 14), header_size - 14);
          if (!bodies::plausible_api(key, version) ||
              (c.raw_sasl &&
               (client_id != c.sasl_client_id || !printable({p + 14, header_size - 14})))) {
            // Not a Kafka request header (raw SASL tokens after SaslHandshake v0, or a protocol
            // we do not know): skip by length, keep nothing of it.
            ++counters.opaque_frames;
            s.advance_to(s.position() + 4 + size);
            continue;
          }
          c.raw_sasl = false;
          if (key == api::kSaslHandshake && version == 0) {
            c.raw_sasl = true;
            c.sasl_client_id = client_id;
          }
          Exchange* ex = c.acquire();
          ex->connection = c.id;
          ex->api_key = key;
          ex->api_version = version;
          ex->correlation_id = correlation;
          ex->request_size = size;
          ex->client_id_null = client_len < 0;
          ex->client_id.assign(reinterpret_cast<const char*>(p + 14), header_size - 14);
          d.frame_end = s.position() + 4 + size;
          d.header_size = static_cast<std::uint32_t>(header_size);
          ApiCount& count = api_count(key, version);
          ++count.requests;
          const bool sasl = key == api::kSaslHandshake || key == api::kSaslAuthenticate;
          if (sasl) ++counters.sasl_frames;
          ex->body_decoded = !sasl && bodies::decodes(key, version);
          if (ex->body_decoded) {
            ++count.decoded;
          } else {
            ++count.skipped;
          }
          if (ex->body_decoded && bodies::decodes_request_body(key, version)) {
            if (size > options.max_decoded_frame) {
              ++counters.frames_too_large;
              ex->body_decoded = false;
            } else {
              d.exchange = ex;
              d.mode = Mode::kBody;
              continue;
            }
          }
          // Skipped by length: the body is never buffered (records, SASL tokens).
          s.advance_to(d.frame_end);
          request_done(c, ex);
          continue;
        }
        case Mode::kBody: {
          std::uint64_t frame_len = d.frame_end - s.position();
          bool complete = v.data.size() >= frame_len;
          if (!complete && !v.more_follows && !v.hole) return;  // wait for the rest
          Exchange* ex = d.exchange;
          std::size_t available = std::min<std::uint64_t>(v.data.size(), frame_len);
          wire::Reader r(v.data.data() + d.header_size, v.data.data() + available);
          if (available < d.header_size) r.fail();
          bool ok = r.ok && decode_request_body(r, *ex);
          if (!complete) {
            ex->request_truncated = true;
            ++counters.frames_truncated;
            ++counters.requests_truncated;
          } else if (!ok) {
            ++counters.parse_errors;
          }
          d.exchange = nullptr;
          d.mode = Mode::kFrameStart;
          s.advance_to(d.frame_end);
          request_done(c, ex);
          continue;
        }
        case Mode::kFetchResponse:
          return;  // not a request mode
      }
    }
  }

  void lose_sync(DirectionState& d) {
    ++counters.resyncs;
    d.mode = Mode::kResync;
    if (d.exchange) d.exchange = nullptr;
    // Skip the byte at the failed frame start so the scan makes progress.
    stream::View v = d.stream.view();
    if (!v.data.empty()) {
      ++counters.resync_bytes;
      d.stream.advance(1);
    }
  }

  bool decode_request_body(wire::Reader& r, Exchange& ex) {
    switch (ex.api_key) {
      case api::kFetch:
        return bodies::fetch_request(r, ex.api_version, ex.fetch);
      case api::kApiVersions:
        return bodies::api_versions_request(r, ex.api_version, ex);
      default:
        return bodies::group_request(r, ex.api_key, ex.api_version, ex);
    }
  }

  void request_done(Connection& c, Exchange* ex) {
    ex->request_time_ns = now_ns;
    if (ex->api_key == api::kFetch && ex->body_decoded) {
      apply_fetch_request(c, ex->fetch);
      resolve_topic_names(ex->fetch);
    }
    sink.on_request(*ex);
    if (c.in_flight.size() >= options.max_in_flight) {
      // Give up on the oldest quarter at once, so a connection whose responses are never seen
      // costs O(1) per request.
      std::size_t n = std::max<std::size_t>(1, c.in_flight.size() / 4);
      for (std::size_t i = 0; i < n; ++i) emit(c, c.in_flight[i]);
      c.in_flight.erase(c.in_flight.begin(), c.in_flight.begin() + static_cast<std::ptrdiff_t>(n));
    }
    c.in_flight.push_back(ex);
  }

  // ---- fetch sessions --------------------------------------------------------------------

  void apply_fetch_request(Connection& c, FetchExchange& f) {
    if (f.session_id == 0) {
      f.session_kind =
          f.session_epoch == 0 ? FetchSessionKind::kFullNewSession : FetchSessionKind::kSessionless;
      return;
    }
    if (f.session_epoch == -1) {
      f.session_kind = FetchSessionKind::kCloseSession;
      c.erase_session(f.session_id);
      return;
    }
    f.session_kind = FetchSessionKind::kIncremental;
    FetchSession* session = c.session(f.session_id);
    if (!session) {
      ++counters.session_misses;
      return;
    }
    session->epoch = f.session_epoch;
    const std::uint64_t request = ++incremental_fetches;
    std::size_t total = session->size();
    for (auto& p : f.partitions) {
      auto& parts = session->topics[topic_key(f.topics[p.topic_index], session->by_id)];
      auto [it, inserted] = parts.try_emplace(p.partition);
      if (inserted) {
        if (total >= options.max_session_partitions) {
          parts.erase(it);
          ++counters.session_partitions_capped;
          continue;
        }
        ++total;
      }
      p.added_to_session = inserted;
      it->second = {p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch, request};
    }
    for (auto& p : f.forgotten) {
      auto topic = session->topics.find(topic_key(f.topics[p.topic_index], session->by_id));
      if (topic == session->topics.end()) continue;
      topic->second.erase(p.partition);
      if (topic->second.empty()) session->topics.erase(topic);
    }
    add_session_partitions(c, f, *session, request);
  }

  // An incremental request lists only what changed; the broker fetches every partition of the
  // session (KIP-227), so a GET it causes may be for one the request did not list (a Java
  // consumer whose position in it did not move). Those join the request as from_session, with
  // the session's values, before anyone sees it. A client that pipelines requests on a large
  // session would hold it once per request in flight: they carry at most max_session_partitions
  // of it between them.
  void add_session_partitions(const Connection& c, FetchExchange& f, const FetchSession& session,
                              std::uint64_t request) {
    const std::size_t carried = c.session_partitions_in_flight();
    const std::size_t budget =
        options.max_session_partitions > carried ? options.max_session_partitions - carried : 0;
    // The session's topics are distinct: only the request's own need searching (a session of
    // many topics would otherwise search its own, one by one).
    const std::size_t request_topics = f.topics.size();
    for (const auto& [key, parts] : session.topics) {
      std::optional<std::uint32_t> topic_index;  // the request's, for its first partition carried
      for (const auto& [partition, values] : parts) {
        if (values.listed_by == request) continue;  // the request's own entry
        if (f.partitions_from_session >= budget) {
          ++counters.session_partitions_capped;
          continue;
        }
        if (!topic_index) {
          const FetchTopic topic = topic_of_key(key, session.by_id);
          topic_index = topic_index_of(f, topic.id, topic.name, session.by_id, request_topics);
        }
        ++f.partitions_from_session;
        FetchPartition& p = f.partitions.emplace_back();
        p.topic_index = *topic_index;
        p.partition = partition;
        p.from_session = true;
        p.fetch_offset = values.fetch_offset;
        p.partition_max_bytes = values.partition_max_bytes;
        p.current_leader_epoch = values.current_leader_epoch;
      }
    }
  }

  void apply_fetch_response(Connection& c, Exchange& ex) {
    FetchExchange& f = ex.fetch;
    if (f.error_code == kFetchSessionIdNotFound || f.error_code == kInvalidFetchSessionEpoch) {
      if (f.session_id != 0) c.erase_session(f.session_id);
      return;
    }
    if (f.session_kind != FetchSessionKind::kFullNewSession || f.response_session_id == 0) return;
    c.erase_session(f.response_session_id);
    if (c.sessions.size() >= kMaxSessionsPerConnection) c.sessions.erase(c.sessions.begin());
    FetchSession& session = c.sessions.emplace_back();
    session.id = f.response_session_id;
    session.epoch = 0;
    session.by_id = ex.api_version >= 13;
    std::size_t total = 0;
    for (auto& p : f.partitions) {
      if (!p.in_request) continue;
      if (total >= options.max_session_partitions) {
        ++counters.session_partitions_capped;
        continue;
      }
      session.topics[topic_key(f.topics[p.topic_index], session.by_id)][p.partition] = {
          p.fetch_offset, p.partition_max_bytes, p.current_leader_epoch};
      ++total;
    }
  }

  // ---- responses -------------------------------------------------------------------------

  // Index of the in-flight request with this correlation id, or -1.
  int find_in_flight(const Connection& c, std::int32_t correlation) const {
    for (std::size_t i = 0; i < c.in_flight.size(); ++i) {
      if (c.in_flight[i]->correlation_id == correlation) return static_cast<int>(i);
    }
    return -1;
  }

  void process_responses(Connection& c) {
    DirectionState& d = c.responses;
    stream::ByteStream& s = d.stream;
    for (;;) {
      stream::View v = s.view();
      switch (d.mode) {
        case Mode::kResync: {
          if (v.hole) {
            counters.resync_bytes += v.hole;
            s.advance(v.hole);
            continue;
          }
          if (v.data.empty()) return;
          // A response header is only a size and a correlation id: look for one we wait for.
          std::size_t k = 0;
          bool found = false;
          if (!c.in_flight.empty()) {
            for (; k + 8 <= v.data.size(); ++k) {
              std::uint32_t size = wire::load_be32(v.data.data() + k);
              if (size < 4 || size > options.max_frame) continue;
              auto corr = static_cast<std::int32_t>(wire::load_be32(v.data.data() + k + 4));
              if (find_in_flight(c, corr) >= 0) {
                found = true;
                break;
              }
            }
          } else {
            k = v.data.size();  // nothing to match: these responses cannot be decoded anyway
          }
          if (!found && !v.more_follows) k = v.data.size() >= 7 ? v.data.size() - 7 : 0;
          if (!found && v.more_follows) k = v.data.size();
          counters.resync_bytes += k;
          s.advance(k);
          if (found) {
            d.mode = Mode::kFrameStart;
            continue;
          }
          if (k == 0) return;
          continue;
        }
        case Mode::kFrameStart: {
          if (v.hole) {
            lose_sync(d);
            continue;
          }
          if (c.raw_sasl && v.data.size() >= 4 && wire::load_be32(v.data.data()) < 4) {
            // A raw SASL token from the broker, possibly empty: no correlation id to read.
            ++counters.opaque_frames;
            s.advance_to(s.position() + 4 + wire::load_be32(v.data.data()));
            continue;
          }
          if (v.data.size() < 8) {
            if (v.more_follows) {
              lose_sync(d);
              continue;
            }
            return;
          }
          std::uint32_t size = wire::load_be32(v.data.data());
          auto corr = static_cast<std::int32_t>(wire::load_be32(v.data.data() + 4));
          if (size < 4 || size > options.max_frame) {
            lose_sync(d);
            continue;
          }
          ++counters.response_frames;
          d.frame_end = s.position() + 4 + size;
          int index = find_in_flight(c, corr);
          if (index < 0) {
            if (c.in_flight.empty() && !c.raw_sasl && s.buffered_bytes() <= kMaxHeldResponseBytes &&
                !closing) {
              --counters.response_frames;  // counted again when it is looked at next time
              d.holding = true;
              return;
            }
            d.holding = false;
            ++counters.responses_unmatched;
            s.advance_to(d.frame_end);
            continue;
          }
          d.holding = false;
          // Kafka answers in order: requests before this one will get no response (acks=0).
          for (int i = 0; i < index; ++i) emit(c, c.in_flight[i]);
          Exchange* ex = c.in_flight[index];
          c.in_flight.erase(c.in_flight.begin(), c.in_flight.begin() + index + 1);
          ex->response_seen = true;
          ex->response_start_ns = now_ns;
          ex->response_size = size;
          d.exchange = ex;
          d.header_size = 8;
          const bool flexible_header =
              bodies::response_header_is_flexible(ex->api_key, ex->api_version);
          if (ex->body_decoded && ex->api_key == api::kFetch) {
            s.advance(8);
            d.mode = Mode::kFetchResponse;
            d.step = FetchStep::kHeader;
            d.partition_hint = 0;
            continue;
          }
          if (ex->body_decoded && bodies::decodes_response_body(ex->api_key, ex->api_version)) {
            if (size <= options.max_decoded_frame) {
              d.mode = Mode::kBody;
              (void)flexible_header;
              continue;
            }
            ++counters.frames_too_large;
          }
          s.advance_to(d.frame_end);
          response_done(c, d);
          continue;
        }
        case Mode::kBody: {
          std::uint64_t frame_len = d.frame_end - s.position();
          bool complete = v.data.size() >= frame_len;
          if (!complete && !v.more_follows && !v.hole) return;
          Exchange* ex = d.exchange;
          std::size_t available = std::min<std::uint64_t>(v.data.size(), frame_len);
          wire::Reader r(v.data.data() + 8, v.data.data() + std::max<std::size_t>(available, 8));
          if (available < 8) r.fail();
          if (bodies::response_header_is_flexible(ex->api_key, ex->api_version)) {
            r.skip_tagged_fields();
          }
          bool ok = r.ok && decode_response_body(r, *ex);
          if (!complete) {
            ex->response_truncated = true;
            ++counters.frames_truncated;
          } else if (!ok) {
            ++counters.parse_errors;
          }
          s.advance_to(d.frame_end);
          response_done(c, d);
          continue;
        }
        case Mode::kFetchResponse:
          if (!fetch_response_step(c, d, v)) return;
          continue;
      }
    }
  }

  bool decode_response_body(wire::Reader& r, Exchange& ex) {
    switch (ex.api_key) {
      case api::kMetadata:
        return bodies::metadata_response(
            r, ex.api_version, ex,
            [this](const Uuid& id, std::string_view name) { learn(id, name); });
      case api::kApiVersions:
        return bodies::api_versions_response(r, ex);
      default:
        return bodies::group_response(r, ex.api_key, ex.api_version, ex);
    }
  }

  void response_done(Connection& c, DirectionState& d) {
    Exchange* ex = d.exchange;
    d.exchange = nullptr;
    d.mode = Mode::kFrameStart;
    ex->response_end_ns = now_ns;
    if (ex->api_key == api::kFetch && ex->body_decoded) apply_fetch_response(c, *ex);
    emit(c, ex);
  }

  // The response partition (topic, partition) in the exchange: the request's entry (an
  // incremental request's entries hold its session's partitions too), else a new one.
  FetchPartition& response_partition(DirectionState& d, Exchange& ex, std::int32_t partition) {
    FetchExchange& f = ex.fetch;
    // Responses usually list partitions in request order: try the hint first.
    for (std::size_t n = 0, i = d.partition_hint; n < f.partitions.size(); ++n, ++i) {
      if (i >= f.partitions.size()) i = 0;
      FetchPartition& p = f.partitions[i];
      if (p.topic_index == d.topic_index && p.partition == partition && !p.in_response) {
        d.partition_hint = i + 1;
        return p;
      }
    }
    FetchPartition& p = f.partitions.emplace_back();
    p.topic_index = d.topic_index;
    p.partition = partition;
    return p;
  }

  // The index of the topic (by id from v13, else by name) in f.topics, added if it is not among
  // the first `searched`.
  std::uint32_t topic_index_of(FetchExchange& f, const Uuid& id, std::string_view name, bool by_id,
                               std::size_t searched = SIZE_MAX) {
    for (std::uint32_t i = 0; i < f.topics.size() && i < searched; ++i) {
      if (by_id ? f.topics[i].id == id : f.topics[i].name == name) return i;
    }
    FetchTopic& t = f.topics.emplace_back();
    if (by_id) {
      t.id = id;
    } else {
      t.name = name;
    }
    return static_cast<std::uint32_t>(f.topics.size() - 1);
  }

  // Decodes the next unit of a Fetch response at the read position. Returns false to wait.
  bool fetch_response_step(Connection& c, DirectionState& d, const stream::View& v) {
    stream::ByteStream& s = d.stream;
    Exchange& ex = *d.exchange;
    FetchExchange& f = ex.fetch;
    const std::int16_t version = ex.api_version;
    const bool flexible = version >= 12;
    const std::uint64_t left = d.frame_end - s.position();
    auto finish = [&](bool truncated, bool error) {
      if (truncated) {
        ex.response_truncated = true;
        ++counters.frames_truncated;
      }
      if (error) ++counters.parse_errors;
      s.advance_to(d.frame_end);
      response_done(c, d);
      return true;
    };
    if (left == 0) return finish(d.step != FetchStep::kTail || d.topics_left != 0, false);
    if (v.hole) return finish(true, false);
    if (v.data.empty()) return false;
    const std::size_t available = std::min<std::uint64_t>(v.data.size(), left);
    wire::Reader r(v.data.data(), v.data.data() + available);
    // A unit that did not fit: wait for bytes, or give up if none can come.
    auto incomplete = [&]() {
      if (available == left) return finish(false, true);  // the frame ended inside the unit
      if (v.more_follows) return finish(true, false);     // a hole follows
      return false;
    };
    switch (d.step) {
      case FetchStep::kHeader: {
        if (flexible) r.skip_tagged_fields();
        f.throttle_time_ms = r.i32();
        if (version >= 7) {
          f.error_code = r.i16();
          f.response_session_id = r.i32();
        }
        std::uint32_t topics = r.array(flexible, 0);
        if (!r.ok) return incomplete();
        if (topics > left) return finish(false, true);
        ex.response_error_code = f.error_code;
        d.topics_left = topics;
        d.step = topics ? FetchStep::kTopic : (flexible ? FetchStep::kTail : FetchStep::kTail);
        break;
      }
      case FetchStep::kTopic: {
        Uuid id;
        std::string_view name;
        if (version >= 13) {
          id = r.uuid();
        } else {
          name = r.string(flexible);
        }
        std::uint32_t partitions = r.array(flexible, 0);
        if (!r.ok) return incomplete();
        if (partitions > left) return finish(false, true);
        d.topic_index = topic_index_of(f, id, name, version >= 13);
        d.partitions_left = partitions;
        d.step = partitions ? FetchStep::kPartition
                            : (flexible ? FetchStep::kTopicTags : FetchStep::kTopic);
        if (!partitions && !flexible) --d.topics_left;
        if (d.step == FetchStep::kTopic && d.topics_left == 0) d.step = FetchStep::kTail;
        break;
      }
      case FetchStep::kPartition: {
        std::int32_t partition = r.i32();
        std::int16_t error = r.i16();
        std::int64_t high_watermark = r.i64();
        if (version >= 4) r.i64();  // last_stable_offset
        std::int64_t log_start = version >= 5 ? r.i64() : -1;
        if (version >= 4) {
          std::uint32_t aborted = r.array(flexible, 0);
          if (r.ok && aborted > left) return finish(false, true);
          for (std::uint32_t i = 0; i < aborted && r.ok; ++i) {
            r.skip(16);
            if (flexible) r.skip_tagged_fields();
          }
        }
        if (version >= 11) r.i32();  // preferred_read_replica
        std::int64_t records = r.bytes_length(flexible);
        if (!r.ok) return incomplete();
        const std::uint64_t unit = static_cast<std::uint64_t>(r.p - v.data.data());
        if (records < -1 || (records > 0 && static_cast<std::uint64_t>(records) > left - unit)) {
          return finish(false, true);
        }
        FetchPartition& p = response_partition(d, ex, partition);
        p.in_response = true;
        p.error_code = error;
        p.high_watermark = high_watermark;
        p.log_start_offset = log_start;
        p.records_size = records;
        if (records > 0) f.records_bytes += records;
        // Skip the records by length: they are never buffered and may never have been captured.
        s.advance(unit + static_cast<std::uint64_t>(std::max<std::int64_t>(records, 0)));
        if (flexible) {
          d.step = FetchStep::kPartitionTags;
        } else {
          next_partition(d, flexible);
        }
        return true;
      }
      case FetchStep::kPartitionTags: {
        r.skip_tagged_fields();
        if (!r.ok) return incomplete();
        next_partition(d, flexible);
        break;
      }
      case FetchStep::kTopicTags: {
        r.skip_tagged_fields();
        if (!r.ok) return incomplete();
        --d.topics_left;
        d.step = d.topics_left ? FetchStep::kTopic : FetchStep::kTail;
        break;
      }
      case FetchStep::kTail: {
        if (flexible) {
          r.skip_tagged_fields();
          if (!r.ok) return incomplete();
        }
        s.advance(static_cast<std::uint64_t>(r.p - v.data.data()));
        return finish(false, false);
      }
    }
    s.advance(static_cast<std::uint64_t>(r.p - v.data.data()));
    return true;
  }

  static void next_partition(DirectionState& d, bool flexible) {
    if (--d.partitions_left) {
      d.step = FetchStep::kPartition;
      return;
    }
    if (flexible) {
      d.step = FetchStep::kTopicTags;
      return;
    }
    --d.topics_left;
    d.step = d.topics_left ? FetchStep::kTopic : FetchStep::kTail;
  }

  // ---- lifecycle -------------------------------------------------------------------------

  void drop_connection(Connection& c) {
    for (Exchange* ex : c.in_flight) emit(c, ex);
    c.in_flight.clear();
    if (c.responses.exchange) {  // a response cut short by the close
      Exchange* ex = c.responses.exchange;
      c.responses.exchange = nullptr;
      ex->response_truncated = true;
      ex->response_end_ns = now_ns;
      emit(c, ex);
    }
  }
};

// ---- public ------------------------------------------------------------------------------

Decoder::Decoder(Sink& sink, Options options) : impl_(std::make_unique<Impl>(sink, options)) {}
Decoder::~Decoder() = default;

void Decoder::open(std::uint64_t connection, std::uint64_t time_ns) {
  impl_->now_ns = time_ns;
  auto it = impl_->connections.find(connection);
  if (it != impl_->connections.end()) {  // reused id: the old connection ended
    impl_->drop_connection(*it->second);
    impl_->last_connection = nullptr;
    impl_->connections.erase(it);
  }
  impl_->connection(connection, true).last_time_ns = time_ns;
}

void Decoder::data(std::uint64_t connection, Direction direction, std::uint64_t time_ns,
                   std::uint64_t position, std::uint64_t length,
                   std::span<const std::uint8_t> captured) {
  Impl& im = *impl_;
  im.now_ns = time_ns;
  Connection& c = im.current(connection);
  c.last_time_ns = time_ns;
  if (!c.touched) {
    c.touched = true;
    im.touched.push_back(connection);
  }
  // The bytes are borrowed while decoding; only what is left unconsumed gets copied.
  if (direction == Direction::kRequest) {
    c.requests.stream.add_borrowed(position, length, captured);
    im.process_requests(c);
    c.requests.stream.settle();
    if (c.responses.holding && !c.in_flight.empty()) im.process_responses(c);
  } else {
    c.responses.stream.add_borrowed(position, length, captured);
    im.process_responses(c);
    c.responses.stream.settle();
  }
}

void Decoder::skip(std::uint64_t connection, Direction direction, std::uint64_t time_ns,
                   std::uint64_t position, std::uint64_t length) {
  Impl& im = *impl_;
  Connection& c = im.current(connection);
  DirectionState& d = direction == Direction::kRequest ? c.requests : c.responses;
  stream::ByteStream& s = d.stream;
  // In step: everything before the run decoded (or being resynchronised), no frame half done.
  const bool between_frames = d.mode == Mode::kFrameStart || d.mode == Mode::kResync;
  if (s.started() &&
      (s.position() != position || s.resolved_end() != position || !between_frames)) {
    data(connection, direction, time_ns, position, length, {});  // out of step: a hole
    return;
  }
  im.now_ns = time_ns;
  c.last_time_ns = time_ns;
  if (!s.started()) s.set_start(position);
  s.add(position, length, {});
  s.advance_to(position + length);
  d.mode = Mode::kFrameStart;  // the capture left out whole messages: a frame starts here
  ++im.counters.left_out_runs;
}

void Decoder::close_gaps(std::uint64_t time_ns) {
  Impl& im = *impl_;
  im.now_ns = time_ns;
  // An id may be gone (closed) or belong to a newer connection by now: closing its gaps early
  // is what the next sweep would do anyway.
  for (std::uint64_t id : im.touched) {
    auto it = im.connections.find(id);
    if (it == im.connections.end()) continue;
    Connection& c = *it->second;
    c.touched = false;
    c.requests.stream.close_gaps();
    im.process_requests(c);
    c.responses.stream.close_gaps();
    im.process_responses(c);
  }
  im.touched.clear();
}

void Decoder::close(std::uint64_t connection, std::uint64_t time_ns) {
  Impl& im = *impl_;
  im.now_ns = time_ns;
  auto it = im.connections.find(connection);
  if (it == im.connections.end()) return;
  Connection& c = *it->second;
  c.requests.stream.close_gaps();
  im.process_requests(c);
  c.responses.stream.close_gaps();
  im.closing = true;
  im.process_responses(c);
  im.closing = false;
  im.drop_connection(c);
  im.last_connection = nullptr;
  im.connections.erase(it);
}

void Decoder::expire(std::uint64_t now_ns) {
  Impl& im = *impl_;
  im.now_ns = now_ns;
  if (now_ns < im.next_expire_ns) return;
  im.next_expire_ns =
      now_ns + std::min<std::uint64_t>(im.options.request_timeout_ns / 16, 1'000'000'000);
  for (auto& [_, c] : im.connections) {
    std::size_t n = 0;
    while (n < c->in_flight.size() &&
           c->in_flight[n]->request_time_ns + im.options.request_timeout_ns < now_ns) {
      ++n;
    }
    for (std::size_t i = 0; i < n; ++i) im.emit(*c, c->in_flight[i]);
    c->in_flight.erase(c->in_flight.begin(), c->in_flight.begin() + static_cast<std::ptrdiff_t>(n));
  }
}

void Decoder::close_all(std::uint64_t time_ns) {
  std::vector<std::uint64_t> ids;
  for (auto& [id, _] : impl_->connections) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  for (auto id : ids) close(id, time_ns);
}

void Decoder::learn_topic(const Uuid& id, std::string_view name) {
  impl_->learn(id, name);
}

const std::string* Decoder::topic_name(const Uuid& id) const {
  auto it = impl_->topic_names.find(id);
  return it == impl_->topic_names.end() ? nullptr : &it->second;
}

const Counters& Decoder::counters() const {
  return impl_->counters;
}

std::vector<ApiCount> Decoder::api_counts() const {
  std::vector<ApiCount> out;
  for (auto& count : impl_->api_table) {
    if (count.requests) out.push_back(count);
  }
  for (auto& [_, count] : impl_->api_counts) out.push_back(count);
  std::sort(out.begin(), out.end(), [](const ApiCount& a, const ApiCount& b) {
    return a.api_key != b.api_key ? a.api_key < b.api_key : a.api_version < b.api_version;
  });
  return out;
}

std::size_t Decoder::connection_count() const {
  return impl_->connections.size();
}

}  // namespace fc::kafka
