// Request/response cycles of an opaque Kafka client connection, from its ciphertext flow.
#include "opaque/opaque.h"

namespace fc::opaque {
namespace {

constexpr std::uint8_t kChangeCipherSpec = 0x14;
constexpr std::uint8_t kAlert = 0x15;
constexpr std::uint8_t kHandshake = 0x16;
constexpr std::uint8_t kApplicationData = 0x17;
constexpr std::uint64_t kHeaderBytes = 5;
constexpr std::uint64_t kMaxRecordBytes = (1u << 14) + 2048;  // TLSCiphertext.length bound

bool header_at(std::span<const std::uint8_t> b, std::uint64_t at, std::uint8_t* type,
               std::uint64_t* length) {
  if (at + kHeaderBytes > b.size()) return false;
  if (b[at] < kChangeCipherSpec || b[at] > kApplicationData || b[at + 1] != 0x03) return false;
  *type = b[at];
  *length = (std::uint64_t{b[at + 3]} << 8) | b[at + 4];
  return *length <= kMaxRecordBytes;
}

}  // namespace

CycleRecognizer::CycleRecognizer(std::uint64_t connection, CycleCallbacks callbacks,
                                 CycleOptions options)
    : connection_(connection), callbacks_(std::move(callbacks)), options_(options) {}

// Follows record headers through the call: a header is read where the framing says one starts
// and the prefix holds it; a call that starts with something that looks like a header resyncs a
// lost framing (senders write whole records, and a receiver reads a header on its own first).
void CycleRecognizer::walk(Records& r, std::uint64_t position, std::uint64_t length,
                           std::span<const std::uint8_t> prefix) {
  const std::uint64_t end = position + length;
  if (!r.known || r.next_header < position) {
    std::uint8_t type = 0;
    std::uint64_t len = 0;
    if (!header_at(prefix, 0, &type, &len)) {
      r.known = false;
      return;
    }
    r.next_header = position;
    r.known = true;
  }
  while (r.next_header < end) {
    std::uint8_t type = 0;
    std::uint64_t len = 0;
    if (!header_at(prefix, r.next_header - position, &type, &len)) {
      r.known = false;  // the header is in a hole (or is no header): resync on a later call
      return;
    }
    if (r.first_type == 0) r.first_type = type;
    r.seen_bytes += kHeaderBytes + len;
    if (type == kApplicationData) {
      ++r.app_records;
      r.app_payload +=
          len > options_.record_overhead_bytes ? len - options_.record_overhead_bytes : 0;
    }
    r.next_header += kHeaderBytes + len;
  }
}

void CycleRecognizer::on_piece(bool to_broker, std::uint64_t position, std::uint64_t length,
                               std::span<const std::uint8_t> prefix, std::uint64_t time_ns) {
  if (length == 0) return;
  if (to_broker) {
    if (requesting_ && answered_) complete();
    const bool opening = !requesting_;
    if (opening) {
      requesting_ = true;
      answered_ = false;
      cycle_ = Cycle{};
      cycle_.connection = connection_;
      cycle_.request_ns = time_ns;
      in_.first_type = 0;
    }
    walk(in_, position, length, prefix);
    cycle_.request_bytes += length;
    if (opening) {
      // A burst that starts with a handshake record (ClientHello, ClientKeyExchange, the
      // ChangeCipherSpec before TLS 1.3's Finished) or an alert is TLS's own, not a request.
      handshake_ = in_.first_type == kHandshake || in_.first_type == kChangeCipherSpec ||
                   in_.first_type == kAlert;
      if (!handshake_ && callbacks_.on_open) callbacks_.on_open(connection_, time_ns);
    }
    return;
  }
  if (!requesting_) {  // unsolicited (a TLS 1.3 session ticket, an alert): no cycle
    walk(out_, position, length, prefix);
    return;
  }
  if (!answered_) {
    answered_ = true;
    cycle_.response_start_ns = time_ns;
    out_.first_type = 0;
    out_.seen_bytes = out_.app_payload = 0;
    out_.app_records = 0;
  }
  walk(out_, position, length, prefix);
  cycle_.response_bytes += length;
  cycle_.response_end_ns = time_ns;
}

void CycleRecognizer::flush_if_idle(std::uint64_t now_ns, std::uint64_t idle_ns) {
  if (requesting_ && answered_ && now_ns >= cycle_.response_end_ns + idle_ns) complete();
}

void CycleRecognizer::close(std::uint64_t /*time_ns*/) {
  if (requesting_) complete();
}

void CycleRecognizer::complete() {
  if (answered_) {
    // Records whose headers were not seen: full records of record_payload_bytes plaintext.
    const std::uint64_t unseen =
        cycle_.response_bytes > out_.seen_bytes ? cycle_.response_bytes - out_.seen_bytes : 0;
    const std::uint64_t record =
        options_.record_payload_bytes + options_.record_overhead_bytes + kHeaderBytes;
    const std::uint64_t unseen_records = (unseen + record - 1) / record;
    const std::uint64_t unseen_overhead =
        unseen_records * (options_.record_overhead_bytes + kHeaderBytes);
    cycle_.response_plaintext =
        out_.app_payload + (unseen > unseen_overhead ? unseen - unseen_overhead : 0);
    cycle_.response_records = out_.app_records + static_cast<std::uint32_t>(unseen_records);
  }
  if (handshake_) {
    ++handshake_cycles_;
  } else {
    ++cycles_;
    if (callbacks_.on_cycle) callbacks_.on_cycle(cycle_);
  }
  requesting_ = answered_ = handshake_ = false;
  cycle_ = Cycle{};
}

}  // namespace fc::opaque
