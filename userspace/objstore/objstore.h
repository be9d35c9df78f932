// objstore: what the broker asked of its object store and what came back.
//
// HttpConnection decodes one HTTP/1.1 connection from captured pieces of its two directions
// (requests the broker wrote, responses it read): request line, Host, Range / x-ms-range,
// status, Content-Length or chunked bodies, keep-alive and pipelining. Each piece carries its
// full length and a captured prefix; body bytes in holes (not captured) are still counted, and
// payload bytes are never kept beyond parsing. One ObjectGet is emitted per completed exchange,
// with the object addressed S3 path- or virtual-host-style, GCS XML or JSON API, or Azure Blob,
// and the object key parsed by a KeyLayout (Aiven's tiered-storage layout, or a regex with named
// groups topic, topic_id, partition, base_offset).
//
// TlsCycleEstimator handles connections whose bytes cannot be read (JSSE TLS): each request
// write burst followed by a response read burst is one estimated GET whose body size is the
// ciphertext minus TLS record overhead and an estimated response header. Its status cannot be
// seen: an answered cycle is reported as 200 (sizes do not tell errors from small objects).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace fc::objstore {

enum class Provider : std::uint8_t {
  kUnknown,
  kS3PathStyle,    // Host: s3.<region>.amazonaws.com (or any endpoint), /bucket/key
  kS3VirtualHost,  // Host: bucket.s3.<region>.amazonaws.com, /key
  kGcsXml,         // storage.googleapis.com/bucket/key or bucket.storage.googleapis.com/key
  kGcsJson,        // /storage/v1/b/B/o/OBJ?alt=media, /download/storage/v1/b/B/o/OBJ?alt=media
  kAzureBlob,      // <account>.blob.core.windows.net/container/blob
};
std::string_view provider_name(Provider provider);

enum class Method : std::uint8_t { kExact, kEstimated };

// "bytes=first-last", "bytes=first-", or "bytes=-suffix_length".
struct ByteRange {
  std::optional<std::uint64_t> first;
  std::optional<std::uint64_t> last;  // inclusive
  std::optional<std::uint64_t> suffix_length;
  // Bytes the range asks for, when it says (first-last).
  std::optional<std::uint64_t> length() const;
};
std::optional<ByteRange> parse_range(std::string_view header_value);

// Fields an object key names. `parsed` is false when the layout did not match.
struct KeyFields {
  bool parsed = false;
  std::string topic;
  std::string topic_id;
  std::int32_t partition = -1;
  std::int64_t base_offset = -1;
  std::string segment_id;
  std::string suffix;  // "log", "indexes", "rsm-manifest" (Aiven)
};

class KeyLayout {
 public:
  virtual ~KeyLayout() = default;
  virtual KeyFields parse(std::string_view key) const = 0;
};

// Aiven tiered-storage plugin: <prefix><topic>-<topicIdB64>/<partition>/<20-digit base
// offset>-<segmentIdB64>.<log|indexes|rsm-manifest>. Hand-written: no regex per GET.
class AivenLayout final : public KeyLayout {
 public:
  KeyFields parse(std::string_view key) const override;
};

// std::regex (ECMAScript) with named groups (?<name>…) or (?P<name>…); names used: topic,
// topic_id, partition, base_offset. std::regex has no named groups, so names are mapped to group
// indices when the pattern is compiled. Matching is regex_search: anchor with ^…$ if needed.
class RegexLayout final : public KeyLayout {
 public:
  static Result<std::unique_ptr<RegexLayout>> create(std::string_view pattern);
  KeyFields parse(std::string_view key) const override;
  ~RegexLayout() override;

 private:
  struct Impl;
  explicit RegexLayout(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "aiven" or "regex:<pattern>".
Result<std::unique_ptr<KeyLayout>> make_key_layout(std::string_view spec);

// Where a request line + Host header point to.
struct ObjectTarget {
  Provider provider = Provider::kUnknown;
  std::string bucket;  // S3/GCS bucket, Azure container
  std::string key;     // URL-decoded object key / blob name
};
// `virtual_host_suffixes`: extra endpoint suffixes (e.g. "minio.local") for which
// "<bucket>.<suffix>" hosts are virtual-host style; everything else unknown is path-style.
ObjectTarget parse_object_target(std::string_view host, std::string_view request_target,
                                 std::span<const std::string> virtual_host_suffixes = {});

// One completed request/response exchange on an object-store connection.
struct ObjectGet {
  std::uint64_t connection = 0;
  std::uint32_t thread_id = 0;  // thread that wrote the request
  Method method = Method::kExact;
  std::string http_method;  // "GET", "HEAD", …; empty for a response whose request was not seen
  ObjectTarget target;
  KeyFields key_fields;
  std::optional<ByteRange> range;
  int status = 0;  // 0: no (complete) status line seen
  // Body bytes received (decoded size for chunked bodies), holes included.
  std::uint64_t body_bytes = 0;
  std::optional<std::uint64_t> content_length;  // as declared
  bool complete = false;  // the whole body arrived (false: connection closed or stream desync)
  std::uint64_t request_ns = 0;         // first byte of the request written
  std::uint64_t response_start_ns = 0;  // first byte of the response read
  std::uint64_t response_end_ns = 0;    // last byte of the response read

  bool succeeded() const { return status >= 200 && status < 300; }
  // Bytes that count: body bytes of successful GETs only (failed GETs count as errors).
  std::uint64_t billable_bytes() const { return succeeded() ? body_bytes : 0; }
};

using ObjectGetCallback = std::function<void(const ObjectGet&)>;

enum class Direction : std::uint8_t {
  kRequest,   // broker → object store
  kResponse,  // object store → broker
};

struct HttpOptions {
  std::vector<std::string> virtual_host_suffixes;
  std::size_t max_header_bytes = 32 * 1024;
  std::size_t max_pipelined_requests = 256;
};

struct HttpStats {
  std::uint64_t requests = 0;
  std::uint64_t responses = 0;
  std::uint64_t resyncs = 0;           // headers lost in a hole or malformed: parser resynced
  std::uint64_t orphan_responses = 0;  // responses without a matching request seen
  std::uint64_t dropped_requests = 0;  // beyond max_pipelined_requests
  std::uint64_t retried_requests = 0;  // unanswered requests the client sent again elsewhere
  std::uint64_t unanswered = 0;        // requests whose response was never seen: failed GETs

  HttpStats& operator+=(const HttpStats& o) {
    requests += o.requests;
    responses += o.responses;
    resyncs += o.resyncs;
    orphan_responses += o.orphan_responses;
    dropped_requests += o.dropped_requests;
    retried_requests += o.retried_requests;
    unanswered += o.unanswered;
    return *this;
  }
};

// Whether `retry` is a retry of the unanswered `request`: same thread, method, object and range,
// written later. HTTP clients retry a request on a new connection when a kept-alive one turns out
// closed by the server (idle timeout): the client counts one GET, whatever the attempts.
bool is_retry_of(const ObjectGet& retry, const ObjectGet& request);

class HttpConnection {
 public:
  // `on_get`: each exchange once its response is complete (or known lost). `on_request`, if set:
  // each request as soon as its head is read (status 0, no response yet), in the order written.
  HttpConnection(std::uint64_t connection_id, const KeyLayout* layout, HttpOptions options,
                 ObjectGetCallback on_get, ObjectGetCallback on_request = {});
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // `length` bytes at stream `position` of one direction; `captured` is their known prefix.
  void on_piece(Direction direction, std::uint64_t position, std::uint64_t length,
                std::span<const std::uint8_t> captured, std::uint64_t timestamp_ns,
                std::uint32_t thread_id);
  // The connection closed: a body delimited by the close completes, others are emitted as
  // incomplete.
  void close(std::uint64_t timestamp_ns);
  // Forgets requests still waiting for a response here that `retry` (a request written on another
  // connection) retried (is_retry_of): one GET, not one per attempt. Returns how many.
  std::size_t forget_retried(const ObjectGet& retry);
  // The newest request still waiting for its response, if any (method, target, range, time,
  // thread filled; status 0).
  std::optional<ObjectGet> newest_pending() const;
  // `thread_id` writes elsewhere now: a blocking client has given up on its requests still
  // waiting here; they are emitted as unanswered (status 0) at `timestamp_ns`.
  void abandon(std::uint32_t thread_id, std::uint64_t timestamp_ns);
  bool has_pending() const;
  const HttpStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Estimated GET cycles on an opaque (TLS) connection.
struct TlsEstimateOptions {
  std::uint64_t record_payload_bytes = 16 * 1024;  // TLS max plaintext per record
  std::uint64_t record_overhead_bytes = 29;        // 5 header + 8 explicit nonce + 16 tag (AES-GCM)
  std::uint64_t response_header_bytes = 450;       // a typical S3 206 response head
  std::uint64_t min_request_bytes = 100;           // smaller write bursts are not requests
};

class TlsCycleEstimator {
 public:
  TlsCycleEstimator(std::uint64_t connection_id, TlsEstimateOptions options,
                    ObjectGetCallback on_get);
  // Bytes moved on the connection; `first_bytes` is the captured prefix (TLS record headers are
  // plaintext: handshake flights are recognised and not counted as GETs).
  void on_piece(Direction direction, std::uint64_t length,
                std::span<const std::uint8_t> first_bytes, std::uint64_t timestamp_ns,
                std::uint32_t thread_id);
  // A cycle ends when the next request starts; call this for a quiet connection.
  void flush_if_idle(std::uint64_t now_ns, std::uint64_t idle_ns);
  void close();
  std::uint64_t cycles() const { return cycles_; }

 private:
  void finish_cycle();
  std::uint64_t connection_;
  TlsEstimateOptions options_;
  ObjectGetCallback on_get_;
  bool in_request_ = false;
  bool have_response_ = false;
  bool handshake_ = false;
  std::uint64_t request_bytes_ = 0;
  std::uint64_t response_bytes_ = 0;
  std::uint64_t request_ns_ = 0;
  std::uint64_t response_start_ns_ = 0;
  std::uint64_t response_end_ns_ = 0;
  std::uint32_t thread_id_ = 0;
  std::uint64_t cycles_ = 0;
};

}  // namespace fc::objstore
