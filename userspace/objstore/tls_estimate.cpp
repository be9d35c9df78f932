// Estimated GET cycles from ciphertext flow: a request write burst, then a response read burst.
#include "objstore/objstore.h"

namespace fc::objstore {
namespace {

constexpr std::uint8_t kTlsHandshake = 0x16;

}  // namespace

TlsCycleEstimator::TlsCycleEstimator(std::uint64_t connection_id, TlsEstimateOptions options,
                                     ObjectGetCallback on_get)
    : connection_(connection_id), options_(options), on_get_(std::move(on_get)) {}

void TlsCycleEstimator::on_piece(Direction direction, std::uint64_t length,
                                 std::span<const std::uint8_t> first_bytes,
                                 std::uint64_t timestamp_ns, std::uint32_t thread_id) {
  if (length == 0) return;
  // Record headers are plaintext: a burst that starts with a handshake record (ClientHello,
  // TLS 1.2 ClientKeyExchange, the server's flight) is the handshake, not a request. TLS 1.3's
  // second client flight (ChangeCipherSpec + encrypted Finished, ~64 bytes) is below
  // min_request_bytes unless the first request rides in the same burst — then it counts.
  const bool handshake_record = !first_bytes.empty() && first_bytes[0] == kTlsHandshake;
  if (direction == Direction::kRequest) {
    if (have_response_ || !in_request_) {
      finish_cycle();
      in_request_ = true;
      handshake_ = handshake_record;
      request_ns_ = timestamp_ns;
      thread_id_ = thread_id;
    }
    request_bytes_ += length;
    return;
  }
  if (!in_request_) return;  // unsolicited (e.g. a TLS 1.3 session ticket): no cycle
  if (!have_response_) {
    have_response_ = true;
    response_start_ns_ = timestamp_ns;
    if (handshake_record) handshake_ = true;
  }
  response_bytes_ += length;
  response_end_ns_ = timestamp_ns;
}

void TlsCycleEstimator::flush_if_idle(std::uint64_t now_ns, std::uint64_t idle_ns) {
  if (have_response_ && now_ns >= response_end_ns_ + idle_ns) finish_cycle();
}

void TlsCycleEstimator::close() {
  finish_cycle();
}

void TlsCycleEstimator::finish_cycle() {
  const bool counts =
      in_request_ && have_response_ && !handshake_ && request_bytes_ >= options_.min_request_bytes;
  if (counts) {
    // Plaintext ≈ ciphertext − per-record overhead; body ≈ plaintext − response head.
    const std::uint64_t record = options_.record_payload_bytes + options_.record_overhead_bytes;
    const std::uint64_t records = (response_bytes_ + record - 1) / record;
    const std::uint64_t overhead = records * options_.record_overhead_bytes;
    const std::uint64_t plaintext = response_bytes_ > overhead ? response_bytes_ - overhead : 0;
    ObjectGet get;
    get.connection = connection_;
    get.thread_id = thread_id_;
    get.method = Method::kEstimated;
    get.http_method = "GET";
    get.body_bytes =
        plaintext > options_.response_header_bytes ? plaintext - options_.response_header_bytes : 0;
    // The status is invisible. A small response is no sign of an error: index and manifest
    // objects are a few hundred bytes, as small as an error document; guessing from the size
    // reported failures that never happened. An answered cycle counts as a success.
    get.status = 200;
    get.complete = true;
    get.request_ns = request_ns_;
    get.response_start_ns = response_start_ns_;
    get.response_end_ns = response_end_ns_;
    ++cycles_;
    on_get_(get);
  }
  in_request_ = have_response_ = handshake_ = false;
  request_bytes_ = response_bytes_ = 0;
}

}  // namespace fc::objstore
