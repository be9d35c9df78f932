// libFuzzer: operations on a stream::ByteStream against a reference model of what was resolved.
// Checks that views never show bytes other than the ones added at those positions, that holes
// are where nothing was captured, and that held memory stays within the limits.
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "stream/stream.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fc::stream::Limits limits;
  limits.max_buffered_bytes = 512;
  limits.max_out_of_order_bytes = 256;
  limits.max_out_of_order_pieces = 8;
  fc::stream::ByteStream s(limits);
  s.set_start(0);
  // Truth: every stream position's byte is a function of the position, so any byte a view
  // shows can be checked without tracking which piece supplied it.
  auto byte_at = [](std::uint64_t pos) {
    return static_cast<std::uint8_t>(pos * 131 + (pos >> 8));
  };
  std::vector<std::uint8_t> piece;
  std::uint64_t frontier = 0;  // highest position handed out so far
  for (std::size_t i = 0; i + 3 <= size; i += 3) {
    const std::uint8_t op = data[i], a = data[i + 1], b = data[i + 2];
    switch (op % 6) {
      case 0:
      case 1:
      case 2: {  // a piece near the frontier (before it: retransmission; after: out of order)
        std::uint64_t pos = frontier + (a % 64);
        pos = pos >= 48 ? pos - 48 : 0;
        std::uint64_t len = 1 + b % 96;
        std::size_t captured = (op & 0x10) ? (b * 7) % (len + 1) : len;
        piece.resize(captured);
        for (std::size_t k = 0; k < captured; ++k) piece[k] = byte_at(pos + k);
        if (op & 0x20) {
          s.add_borrowed(pos, len, piece);
        } else {
          s.add(pos, len, piece);
        }
        frontier = std::max(frontier, pos + len);
        break;
      }
      case 3:
        s.advance(a % 80);
        break;
      case 4:
        s.close_gaps();
        break;
      case 5:
        break;
    }
    auto v = s.view();
    if (!v.data.empty() && v.hole) __builtin_trap();
    for (std::size_t k = 0; k < v.data.size(); ++k) {
      if (v.data[k] != byte_at(s.position() + k)) __builtin_trap();
    }
    if (s.position() + v.data.size() > std::max(s.resolved_end(), s.position())) __builtin_trap();
    s.settle();  // borrowed bytes must be copied before `piece` changes
    if (s.buffered_bytes() > limits.max_buffered_bytes + limits.max_out_of_order_bytes + 96) {
      __builtin_trap();
    }
  }
  return 0;
}
