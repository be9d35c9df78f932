// opaque: request/response cycles of a Kafka client connection whose bytes cannot be read (TLS
// through a library fetchcost does not hook, such as a Java broker's JSSE).
//
// Offers CycleRecognizer: fed one connection's socket calls (direction, length, time and the
// captured prefix of each call), it reports when a request cycle opens (the client's first bytes
// after the broker's last answer; requests pipelined behind it join the same cycle) and when it
// was answered (the broker's response burst, complete once the next request arrives, the
// connection goes quiet or closes), with the response's size. Kafka answers the requests of a
// connection in order and a broker serves one at a time, so a cycle spans a fetch from its
// arrival to its answer: a fetch that read remote data is open across those reads. TLS record
// headers (5 plaintext bytes: type, version, length) seen in the prefixes tell handshake flights
// from application data and give the records' lengths, so the plaintext of a response is
// estimated from its records; where they are not seen, from the byte count.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace fc::opaque {

struct Cycle {
  std::uint64_t connection = 0;
  std::uint64_t request_ns = 0;          // the request burst's first call
  std::uint64_t response_start_ns = 0;   // the response burst's first call; 0: never answered
  std::uint64_t response_end_ns = 0;     // its last call
  std::uint64_t request_bytes = 0;       // ciphertext
  std::uint64_t response_bytes = 0;      // ciphertext
  std::uint64_t response_plaintext = 0;  // estimated from the records
  std::uint32_t response_records = 0;    // application-data records seen in the response
};

struct CycleCallbacks {
  // A request cycle opened at `request_ns` (its answer is still to come).
  std::function<void(std::uint64_t connection, std::uint64_t request_ns)> on_open;
  // A cycle is complete (answered, or never answered when the connection closed).
  std::function<void(const Cycle&)> on_cycle;
};

struct CycleOptions {
  // Per-record expansion of application data: AEAD tag (16) + TLS 1.2 explicit nonce (8) or
  // TLS 1.3 inner content type (1); the mean of the two is close enough for a size estimate.
  std::uint64_t record_overhead_bytes = 20;
  std::uint64_t record_payload_bytes = 16 * 1024;  // TLS max plaintext per record
};

class CycleRecognizer {
 public:
  CycleRecognizer(std::uint64_t connection, CycleCallbacks callbacks, CycleOptions options = {});
  // One socket call: `to_broker` for the client's bytes (requests), `position` its stream
  // position in that direction, `prefix` the bytes captured from its start (may be empty).
  void on_piece(bool to_broker, std::uint64_t position, std::uint64_t length,
                std::span<const std::uint8_t> prefix, std::uint64_t time_ns);
  // A response burst quiet for `idle_ns` is complete.
  void flush_if_idle(std::uint64_t now_ns, std::uint64_t idle_ns);
  // The connection closed: a cycle still waiting for its answer completes unanswered.
  void close(std::uint64_t time_ns);

  std::uint64_t cycles() const { return cycles_; }
  std::uint64_t handshake_cycles() const { return handshake_cycles_; }

 private:
  // TLS record framing of one direction, followed through the captured prefixes.
  struct Records {
    std::uint64_t next_header = 0;  // stream position of the next record header
    bool known = false;             // next_header is reliable
    std::uint8_t first_type = 0;    // type of the first record of the current burst (0: unseen)
    std::uint64_t seen_bytes = 0;   // ciphertext of the burst's records whose header was seen
    std::uint64_t app_payload = 0;  // estimated plaintext of those that were application data
    std::uint32_t app_records = 0;
  };
  void walk(Records& records, std::uint64_t position, std::uint64_t length,
            std::span<const std::uint8_t> prefix);
  void complete();

  std::uint64_t connection_;
  CycleCallbacks callbacks_;
  CycleOptions options_;
  Records in_, out_;
  bool requesting_ = false;  // a cycle is open
  bool answered_ = false;    // its response burst started
  bool handshake_ = false;   // the cycle is a TLS handshake flight, not a Kafka request
  Cycle cycle_;
  std::uint64_t cycles_ = 0;
  std::uint64_t handshake_cycles_ = 0;
};

}  // namespace fc::opaque
