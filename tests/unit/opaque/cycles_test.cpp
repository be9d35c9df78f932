// opaque::CycleRecognizer on hand-built ciphertext flows: record headers written as a TLS stack
// writes them (5 bytes: type, 0x03 0x03, length), the rest of each call not captured.
#include <doctest/doctest.h>

#include <vector>

#include "opaque/opaque.h"

using namespace fc;

namespace {

struct Flow {
  std::vector<std::pair<std::uint64_t, std::uint64_t>> opened;  // (connection, request_ns)
  std::vector<opaque::Cycle> cycles;
  opaque::CycleRecognizer recognizer{7, callbacks()};
  std::uint64_t in_pos = 0, out_pos = 0;

  opaque::CycleCallbacks callbacks() {
    opaque::CycleCallbacks c;
    c.on_open = [this](std::uint64_t conn, std::uint64_t t) { opened.emplace_back(conn, t); };
    c.on_cycle = [this](const opaque::Cycle& cycle) { cycles.push_back(cycle); };
    return c;
  }
  // One call carrying whole records of these lengths (only the first header captured, as the
  // capture copies a prefix), or, with split_header, a receiver reading a header then its body.
  void records(bool to_broker, std::uint8_t type, std::vector<std::uint64_t> lengths,
               std::uint64_t t, bool split_header = false) {
    std::uint64_t& pos = to_broker ? in_pos : out_pos;
    for (std::uint64_t len : lengths) {
      const std::uint8_t header[5] = {type, 0x03, 0x03, static_cast<std::uint8_t>(len >> 8),
                                      static_cast<std::uint8_t>(len)};
      if (split_header) {
        recognizer.on_piece(to_broker, pos, 5, header, t);
        recognizer.on_piece(to_broker, pos + 5, len, {}, t);
      } else {
        recognizer.on_piece(to_broker, pos, 5 + len, header, t);
      }
      pos += 5 + len;
    }
  }
};

}  // namespace

TEST_CASE("a request burst then a response burst is one cycle; the next request completes it") {
  Flow f;
  f.records(true, 0x17, {120}, 1000, /*split_header=*/true);
  REQUIRE(f.opened.size() == 1);
  CHECK(f.opened[0] == std::pair<std::uint64_t, std::uint64_t>{7, 1000});
  f.records(false, 0x17, {16384 + 20, 16384 + 20, 4000}, 5000);
  CHECK(f.cycles.empty());  // the answer may go on
  f.records(true, 0x17, {120}, 9000, true);
  REQUIRE(f.cycles.size() == 1);
  const auto& c = f.cycles[0];
  CHECK(c.request_ns == 1000);
  CHECK(c.response_start_ns == 5000);
  CHECK(c.response_end_ns == 5000);
  CHECK(c.request_bytes == 125);
  CHECK(c.response_bytes == 3 * 5 + 2 * (16384 + 20) + 4000);
  CHECK(c.response_records == 3);
  CHECK(c.response_plaintext == 2 * 16384 + 4000 - 20);
  CHECK(f.opened.size() == 2);
}

TEST_CASE("pipelined requests join the open cycle; a long poll stays open until answered") {
  Flow f;
  f.records(true, 0x17, {150}, 100, true);  // fetch (long poll)
  f.records(true, 0x17, {90}, 400, true);   // heartbeat written behind it
  f.records(true, 0x17, {90}, 800, true);
  CHECK(f.opened.size() == 1);
  f.recognizer.flush_if_idle(10'000, 50);  // nothing answered yet: still open
  CHECK(f.cycles.empty());
  f.records(false, 0x17, {300}, 1'000'000);
  f.records(false, 0x17, {60}, 1'000'100);
  f.recognizer.flush_if_idle(1'000'120, 50);
  CHECK(f.cycles.empty());  // not quiet long enough
  f.recognizer.flush_if_idle(1'000'200, 50);
  REQUIRE(f.cycles.size() == 1);
  CHECK(f.cycles[0].request_ns == 100);
  CHECK(f.cycles[0].response_start_ns == 1'000'000);
  CHECK(f.cycles[0].response_end_ns == 1'000'100);
  CHECK(f.cycles[0].response_records == 2);
  CHECK(f.cycles[0].response_plaintext == 300 - 20 + 60 - 20);
}

TEST_CASE("handshake flights are no cycles; unsolicited records open none") {
  Flow f;
  f.records(true, 0x16, {512}, 10);             // ClientHello
  f.records(false, 0x16, {90, 1200, 300}, 20);  // ServerHello, certificate, ...
  f.records(true, 0x14, {1}, 30);               // ChangeCipherSpec + encrypted Finished
  f.records(true, 0x17, {53}, 30);
  f.records(false, 0x17, {250, 250}, 40);  // TLS 1.3 session tickets: part of the handshake cycle
  f.records(true, 0x17, {200}, 50);        // the first Kafka request
  CHECK(f.cycles.empty());
  CHECK(f.recognizer.handshake_cycles() == 2);
  REQUIRE(f.opened.size() == 1);
  CHECK(f.opened[0].second == 50);
  f.records(false, 0x17, {100}, 60);
  f.recognizer.close(70);
  REQUIRE(f.cycles.size() == 1);
  CHECK(f.cycles[0].response_plaintext == 80);
}

TEST_CASE("an unanswered cycle completes at close without an answer") {
  Flow f;
  f.records(true, 0x17, {150}, 100, true);
  f.recognizer.close(500);
  REQUIRE(f.cycles.size() == 1);
  CHECK(f.cycles[0].response_start_ns == 0);
  CHECK(f.cycles[0].response_bytes == 0);
}

TEST_CASE("records whose headers are not captured are estimated from the byte count") {
  Flow f;
  f.records(true, 0x17, {150}, 100, true);
  // One call of four full records whose first header alone is captured.
  const std::uint64_t record = 5 + 16384 + 20;
  const std::uint8_t header[5] = {0x17, 0x03, 0x03, (16384 + 20) >> 8, (16384 + 20) & 0xff};
  f.recognizer.on_piece(false, 0, 4 * record, header, 200);
  f.recognizer.close(300);
  REQUIRE(f.cycles.size() == 1);
  CHECK(f.cycles[0].response_records == 4);
  CHECK(f.cycles[0].response_plaintext == 4 * 16384);
}
