#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "objstore/objstore.h"

using fc::objstore::Direction;
using fc::objstore::ObjectGet;
using fc::objstore::TlsCycleEstimator;

namespace {

// Ciphertext size of `plaintext` bytes sent as full 16 KiB AES-GCM TLS 1.2 records.
std::uint64_t ciphertext(std::uint64_t plaintext) {
  const std::uint64_t records = (plaintext + 16383) / 16384;
  return plaintext + records * 29;
}

const std::uint8_t kHandshake[] = {0x16, 0x03, 0x01};
const std::uint8_t kAppData[] = {0x17, 0x03, 0x03};

}  // namespace

TEST_CASE("estimated GET cycles: handshake skipped, body from ciphertext minus overhead") {
  std::vector<ObjectGet> gets;
  TlsCycleEstimator estimator(9, {}, [&](const ObjectGet& g) { gets.push_back(g); });
  // Handshake: ClientHello → server flight → client Finished.
  estimator.on_piece(Direction::kRequest, 517, kHandshake, 1, 5);
  estimator.on_piece(Direction::kResponse, 4200, kHandshake, 2, 5);
  // GET 1: a 4 MiB body, read in many pieces; the client Finished leads the first request burst.
  estimator.on_piece(Direction::kRequest, 80, kAppData, 3, 5);
  estimator.on_piece(Direction::kRequest, 420, kAppData, 3, 5);
  const std::uint64_t body1 = 4u << 20;
  std::uint64_t left = ciphertext(body1 + 450);
  for (std::uint64_t t = 10; left > 0; ++t) {
    const std::uint64_t n = std::min<std::uint64_t>(left, 65536);
    estimator.on_piece(Direction::kResponse, n, kAppData, t, 5);
    left -= n;
  }
  // GET 2 on another thread: a 1 MiB body.
  estimator.on_piece(Direction::kRequest, 500, kAppData, 1000, 6);
  CHECK(gets.size() == 1);  // GET 1 ends when GET 2 starts
  estimator.on_piece(Direction::kResponse, ciphertext((1u << 20) + 450), kAppData, 1001, 6);
  estimator.flush_if_idle(1002, 10);
  CHECK(gets.size() == 1);  // not idle long enough
  estimator.flush_if_idle(1100, 10);
  REQUIRE(gets.size() == 2);
  CHECK(gets[0].method == fc::objstore::Method::kEstimated);
  CHECK(gets[0].body_bytes == body1);
  CHECK(gets[0].thread_id == 5);
  CHECK(gets[0].request_ns == 3);
  CHECK(gets[0].status == 200);
  CHECK(gets[1].body_bytes == 1u << 20);
  CHECK(gets[1].thread_id == 6);
  CHECK(gets[1].response_end_ns == 1001);
  CHECK(estimator.cycles() == 2);
}

TEST_CASE(
    "estimated: unsolicited reads and tiny writes are not GETs; small answers are no errors") {
  std::vector<ObjectGet> gets;
  TlsCycleEstimator estimator(9, {}, [&](const ObjectGet& g) { gets.push_back(g); });
  estimator.on_piece(Direction::kResponse, 300, kAppData, 1, 1);  // session ticket
  estimator.on_piece(Direction::kRequest, 31, kAppData, 2, 1);    // alert / keep-alive ping
  estimator.on_piece(Direction::kResponse, 31, kAppData, 3, 1);
  // A GET of a 104-byte index object (s3rver's head is ~270 bytes): smaller than the estimated
  // head, so no body bytes, but no invented failure either (the status cannot be seen).
  estimator.on_piece(Direction::kRequest, 500, kAppData, 4, 1);
  estimator.on_piece(Direction::kResponse, ciphertext(104 + 270), kAppData, 5, 1);
  // A request the connection closed on before any answer: not a GET.
  estimator.on_piece(Direction::kRequest, 500, kAppData, 6, 1);
  estimator.close();
  REQUIRE(gets.size() == 1);
  CHECK(gets[0].body_bytes == 0);
  CHECK(gets[0].status == 200);
  CHECK(gets[0].succeeded());
}

TEST_CASE("real TLS flow (curl → s3rver over TLS): one estimate per GET, bytes within 1%") {
  // Recorded by tests/fixtures/objstore/record.sh: each line is one read as a proxy saw it.
  std::ifstream flow(std::string(FC_OBJSTORE_FIXTURES) + "/s3rver-tls.flow");
  std::ifstream truth(std::string(FC_OBJSTORE_FIXTURES) + "/s3rver-tls.expected");
  REQUIRE(flow.good());
  REQUIRE(truth.good());
  std::vector<ObjectGet> gets;
  TlsCycleEstimator estimator(3, {}, [&](const ObjectGet& g) { gets.push_back(g); });
  std::string direction, header_hex;
  std::uint64_t length = 0, t = 0;
  while (flow >> direction >> length >> header_hex) {
    std::vector<std::uint8_t> header;
    for (std::size_t i = 0; i + 1 < header_hex.size(); i += 2) {
      header.push_back(static_cast<std::uint8_t>(std::stoi(header_hex.substr(i, 2), nullptr, 16)));
    }
    estimator.on_piece(direction == "request" ? Direction::kRequest : Direction::kResponse, length,
                       header, ++t, 1);
  }
  estimator.close();
  std::vector<std::uint64_t> expected;
  std::string method;
  int status = 0;
  std::uint64_t bytes = 0;
  while (truth >> method >> status >> bytes) expected.push_back(bytes);
  REQUIRE(gets.size() == expected.size());
  std::uint64_t total_estimated = 0, total_truth = 0;
  for (std::size_t i = 0; i < gets.size(); ++i) {
    INFO("GET " << i << ": estimated " << gets[i].body_bytes << ", curl " << expected[i]);
    CHECK(gets[i].body_bytes == doctest::Approx(static_cast<double>(expected[i])).epsilon(0.01));
    CHECK(gets[i].status == 200);
    total_estimated += gets[i].body_bytes;
    total_truth += expected[i];
  }
  MESSAGE("estimated " << total_estimated << " body bytes, curl received " << total_truth);
}
