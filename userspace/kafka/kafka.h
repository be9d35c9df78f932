// kafka: Kafka requests and responses from the byte streams of a broker's client connections.
//
// Feed each connection's two directions (requests towards the broker, responses from it) as
// pieces with holes; the Decoder frames them (resynchronising after a hole or when attached
// mid-stream), matches responses to requests by correlation id (pipelined, in order, stale
// entries expired) and hands one Exchange per request/response pair to a Sink. Fetch (v4–v17),
// ApiVersions, Metadata (topic id ↔ name) and the consumer-group APIs (client-id ↔ group) are
// decoded; everything else (Produce, SASL, unknown versions) is skipped by length and counted.
// Record data is never copied: a Fetch response reports each partition's records size, which is
// known even when the bytes themselves were never captured (sendfile).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "stream/stream.h"

namespace fc::kafka {

namespace api {
inline constexpr std::int16_t kProduce = 0;
inline constexpr std::int16_t kFetch = 1;
inline constexpr std::int16_t kMetadata = 3;
inline constexpr std::int16_t kOffsetCommit = 8;
inline constexpr std::int16_t kJoinGroup = 11;
inline constexpr std::int16_t kHeartbeat = 12;
inline constexpr std::int16_t kLeaveGroup = 13;
inline constexpr std::int16_t kSyncGroup = 14;
inline constexpr std::int16_t kSaslHandshake = 17;
inline constexpr std::int16_t kApiVersions = 18;
inline constexpr std::int16_t kSaslAuthenticate = 36;
}  // namespace api

// "Fetch", "Metadata", … or "api_<key>" for keys without a name here.
const char* api_name(std::int16_t api_key);

struct Uuid {
  std::array<std::uint8_t, 16> bytes{};
  bool is_zero() const;
  std::string to_base64() const;  // Kafka's form: URL-safe base64, no padding (22 chars)
  friend bool operator==(const Uuid&, const Uuid&) = default;
};

// A partition of a Fetch exchange: what was asked and, when the response was seen, what came back.
// Kept to 56 bytes: the request loop writes one per partition (the decoder's hot path).
struct FetchPartition {
  // Request side. In an incremental session a partition the request did not list carries the
  // session's values (from_session).
  std::int64_t fetch_offset = -1;
  // Response side (valid when in_response).
  std::int64_t high_watermark = -1;
  std::int64_t log_start_offset = -1;
  std::int64_t records_size = -1;  // bytes of record data; -1 = null records
  std::uint32_t topic_index = 0;   // into FetchExchange::topics
  std::int32_t partition = -1;
  std::int32_t partition_max_bytes = -1;
  std::int32_t current_leader_epoch = -1;
  std::int16_t error_code = 0;
  bool in_request = false;
  bool from_session = false;
  bool added_to_session = false;  // incremental request: new to the session (else updated)
  bool in_response = false;
};
static_assert(sizeof(FetchPartition) == 56);

struct FetchTopic {
  std::string name;  // resolved from Metadata when the request carried only the id (v13+)
  Uuid id;
};

enum class FetchSessionKind : std::uint8_t {
  kSessionless,     // v4–6, or session_epoch -1 (full fetch without a session)
  kFullNewSession,  // session_id 0, epoch 0: full fetch asking for a new session
  kIncremental,     // session_id != 0, epoch > 0: lists only added/changed partitions
  kCloseSession,    // session_id != 0, epoch -1
};
const char* to_string(FetchSessionKind kind);

struct FetchExchange {
  std::int32_t replica_id = -1;  // -1 for consumers; followers' broker id (tagged from v15)
  std::int32_t max_wait_ms = 0;
  std::int32_t min_bytes = 0;
  std::int32_t max_bytes = 0;
  std::int8_t isolation_level = 0;
  std::int32_t session_id = 0;
  std::int32_t session_epoch = -1;
  FetchSessionKind session_kind = FetchSessionKind::kSessionless;
  std::string rack_id;
  std::vector<FetchTopic> topics;
  std::vector<FetchPartition> partitions;
  std::vector<FetchPartition> forgotten;      // only topic_index and partition are set
  std::uint32_t partitions_from_session = 0;  // added from the session (the last partitions)
  // Response
  std::int32_t throttle_time_ms = 0;
  std::int16_t error_code = 0;
  std::int32_t response_session_id = 0;
  std::int64_t records_bytes = 0;  // sum of records_size over the response's partitions

  void clear();
};

struct Exchange {
  std::uint64_t connection = 0;
  std::string client_id;
  bool client_id_null = false;
  std::int16_t api_key = -1;
  std::int16_t api_version = -1;
  std::int32_t correlation_id = 0;
  // Timestamps of the pieces that completed the request (for bodies skipped by length: carried
  // its header), began and ended the response.
  std::uint64_t request_time_ns = 0;
  std::uint64_t response_start_ns = 0;
  std::uint64_t response_end_ns = 0;
  std::uint32_t request_size = 0;  // frame size (after the 4-byte length)
  std::uint32_t response_size = 0;
  bool response_seen = false;       // false: expired, closed, or a later response overtook it
  bool body_decoded = false;        // false: skipped by length (Produce, SASL, unknown version)
  bool request_truncated = false;   // part of the request body was in a hole
  bool response_truncated = false;  // part of the response (beyond records) was in a hole
  std::int16_t response_error_code = 0;  // top-level error where the API has one

  FetchExchange fetch;   // api_key == kFetch
  std::string group_id;  // JoinGroup/SyncGroup/Heartbeat/OffsetCommit/LeaveGroup
  std::string member_id;
  std::string client_software_name;  // ApiVersions v3+
  std::string client_software_version;
  std::uint32_t metadata_topics = 0;  // Metadata: topics in the response (ids learned)

  void clear();
};

class Sink {
 public:
  virtual ~Sink() = default;
  // One request/response pair (or a request whose response never came). Valid during the call.
  virtual void on_exchange(const Exchange& exchange) = 0;
  // A request as soon as it is decoded (response fields empty). Optional.
  virtual void on_request(const Exchange&) {}
};

enum class Direction : std::uint8_t { kRequest, kResponse };

struct Options {
  stream::Limits stream_limits;
  // Bodies longer than this are skipped by length instead of being buffered for decoding
  // (Fetch responses are decoded as they stream and are not subject to it).
  std::uint32_t max_decoded_frame = 1u << 20;
  std::uint32_t max_frame = 256u << 20;  // larger sizes are not a frame: resynchronise
  std::uint64_t request_timeout_ns = 120'000'000'000ull;
  std::size_t max_in_flight = 256;  // per connection
  // Per connection: the partitions its sessions hold, and those its incremental requests in
  // flight carry from a session (a GET for one left out may go unattributed; counted).
  std::size_t max_session_partitions = 100'000;
  std::size_t max_topic_ids = 1'000'000;
};

struct ApiCount {
  std::int16_t api_key;
  std::int16_t api_version;
  std::uint64_t requests;  // request frames seen
  std::uint64_t decoded;   // bodies decoded
  std::uint64_t skipped;   // bodies skipped by length (not decoded: API, version or size)
};

struct Counters {
  std::uint64_t connections = 0;
  std::uint64_t request_frames = 0;
  std::uint64_t response_frames = 0;
  std::uint64_t exchanges = 0;
  std::uint64_t responses_unmatched = 0;  // no pending request with that correlation id
  std::uint64_t requests_unanswered = 0;  // expired, closed or overtaken
  std::uint64_t resyncs = 0;              // framing lost (hole over a header, attach mid-stream)
  std::uint64_t resync_bytes = 0;         // bytes scanned or skipped while resynchronising
  std::uint64_t frames_truncated = 0;     // decoded with part of the body in a hole
  std::uint64_t requests_truncated = 0;   // ... of them requests (a fetch's partitions lost)
  std::uint64_t frames_too_large = 0;     // skipped: over max_decoded_frame
  std::uint64_t parse_errors = 0;         // malformed body (skipped by length)
  std::uint64_t sasl_frames = 0;          // skipped, never retained
  std::uint64_t opaque_frames = 0;        // request frames without a Kafka header (raw SASL)
  std::uint64_t session_misses = 0;       // incremental fetch for a session we never saw
  // Session partitions over max_session_partitions: not kept in a session, or not added to an
  // incremental request because the connection's requests in flight already carry that many.
  std::uint64_t session_partitions_capped = 0;
  std::uint64_t left_out_runs = 0;  // runs of whole messages the capture left out (skip)
};

class Decoder {
 public:
  explicit Decoder(Sink& sink, Options options = {});
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // A connection seen from its first byte (accept/connect, TCP SYN): framing starts in sync.
  // Connections first seen through data are assumed to start mid-stream.
  void open(std::uint64_t connection, std::uint64_t time_ns);
  // `length` bytes at `position` of one direction, of which `captured` were copied (read during
  // the call, never kept: what is not consumed is copied). Pieces of one direction may arrive out
  // of order; a response that arrives before its request (per-CPU buffers) is held until the
  // request comes, while nothing else is in flight on the connection.
  void data(std::uint64_t connection, Direction direction, std::uint64_t time_ns,
            std::uint64_t position, std::uint64_t length, std::span<const std::uint8_t> captured);
  // `length` bytes at `position` of one direction are whole messages the capture left out (quiet
  // fetches): a frame starts right after them. Decoded up to `position`, the stream moves past
  // them in step; otherwise they are a hole like any other.
  void skip(std::uint64_t connection, Direction direction, std::uint64_t time_ns,
            std::uint64_t position, std::uint64_t length);
  // The missing pieces of every stream will not come (e.g. after draining all ring buffers).
  void close_gaps(std::uint64_t time_ns);
  // Emits unanswered requests and forgets the connection.
  void close(std::uint64_t connection, std::uint64_t time_ns);
  // Emits requests older than the timeout as unanswered. Walks every connection at most once per
  // 1/16 of the timeout (or 1 s): a request is emitted at most that much after it went stale.
  void expire(std::uint64_t now_ns);
  void close_all(std::uint64_t time_ns);

  // Topic ids learned from Metadata responses (or told by the log dirs' partition.metadata).
  void learn_topic(const Uuid& id, std::string_view name);
  const std::string* topic_name(const Uuid& id) const;

  const Counters& counters() const;
  std::vector<ApiCount> api_counts() const;  // non-zero entries, by key then version
  std::size_t connection_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fc::kafka
