// libFuzzer: byte streams → objstore::HttpConnection (the object-store HTTP/1.1 decoder).
// Input: [flags u8][request stream length u16 BE][request stream][response stream]. The streams
// are cut into pieces (sizes and holes from a generator seeded by the input) and interleaved so
// responses trail requests; threads change now and then (abandon), the connection may close
// early. Must not crash, hang, or count more body bytes than the response stream moved.
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include "objstore/objstore.h"
#include "piece_cutter.h"

namespace {}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::uint8_t flags = data[0];
  std::size_t req_len = static_cast<std::size_t>(data[1]) << 8 | data[2];
  data += 3;
  size -= 3;
  req_len = std::min(req_len, size);
  static fc::objstore::AivenLayout layout;
  fc::objstore::HttpOptions options;
  options.max_header_bytes = 4096;
  options.max_pipelined_requests = 8;
  std::uint64_t billed = 0;
  std::uint64_t gets = 0;
  fc::objstore::HttpConnection http(1, &layout, options, [&](const fc::objstore::ObjectGet& g) {
    billed += g.billable_bytes();
    ++gets;
  });
  fc::fuzz::PieceCutter req(flags * 7919u + static_cast<unsigned>(size), data, req_len, flags, 16,
                            2000);
  fc::fuzz::PieceCutter resp(flags * 104729u + 1, data + req_len, size - req_len, flags, 16, 2000);
  std::uint64_t req_pos = 0, resp_pos = 0, time = 1;
  std::uint32_t thread = 1;
  // A hole in the response stream may stand for more bytes than the input holds.
  std::uint64_t resp_moved = 0;
  auto deliver = [&](fc::objstore::Direction dir, fc::fuzz::PieceCutter& c) {
    fc::fuzz::Piece piece;
    if (!c.next(&piece)) return false;
    const auto bytes = piece.captured;
    const std::size_t captured = bytes.size();
    std::uint64_t length = piece.len;
    if ((flags & 8) && captured < piece.len && c.rng() % 4 == 0) length += c.rng() % (1u << 20);
    std::uint64_t& pos = dir == fc::objstore::Direction::kRequest ? req_pos : resp_pos;
    http.on_piece(dir, pos, length, bytes, time++, thread);
    pos += length;
    if (dir == fc::objstore::Direction::kResponse) resp_moved += length;
    if ((flags & 16) && c.rng() % 64 == 0) http.abandon(thread++, time++);
    return true;
  };
  bool more = true;
  while (more) {
    more = deliver(fc::objstore::Direction::kRequest, req);
    while (resp.behind(req)) {
      if (!deliver(fc::objstore::Direction::kResponse, resp)) break;
    }
    if ((flags & 32) && req.rng() % 128 == 0) break;  // the connection closes early
  }
  while (deliver(fc::objstore::Direction::kResponse, resp)) {
  }
  (void)http.newest_pending();
  (void)http.has_pending();
  http.close(time + 1);
  if (billed > resp_moved) __builtin_trap();  // bytes nobody moved were counted
  (void)gets;
  return 0;
}
