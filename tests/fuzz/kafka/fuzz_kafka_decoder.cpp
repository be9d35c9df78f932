// libFuzzer: byte streams → kafka::Decoder. Input: [flags u8][request stream length u16 BE]
// [request stream][response stream]. The streams are cut into pieces (sizes, holes, occasional
// reordering, retransmission) by a generator seeded from the input, and interleaved so responses
// trail their requests. The decoder must not crash, hang or hold unbounded memory.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kafka/kafka.h"
#include "piece_cutter.h"

namespace {

struct NullSink : fc::kafka::Sink {
  std::size_t n = 0;
  void on_exchange(const fc::kafka::Exchange& ex) override {
    n += ex.fetch.partitions.size() + ex.client_id.size();
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 3) return 0;
  const std::uint8_t flags = data[0];
  std::size_t req_len = static_cast<std::size_t>(data[1]) << 8 | data[2];
  data += 3;
  size -= 3;
  req_len = std::min(req_len, size);
  NullSink sink;
  fc::kafka::Options options;
  options.stream_limits.max_buffered_bytes = 64 << 10;
  options.stream_limits.max_out_of_order_bytes = 16 << 10;
  options.stream_limits.max_out_of_order_pieces = 16;
  options.max_decoded_frame = 32 << 10;
  options.max_in_flight = 32;
  options.request_timeout_ns = 1000;
  fc::kafka::Decoder decoder(sink, options);
  const std::uint64_t conn = 1 + (flags >> 5);
  if (flags & 1) decoder.open(conn, 0);
  fc::fuzz::PieceCutter req(flags * 7919u + static_cast<unsigned>(size), data, req_len, flags, 8,
                            600);
  fc::fuzz::PieceCutter resp(flags * 104729u + 1, data + req_len, size - req_len, flags, 8, 600);
  std::uint64_t time = 1;
  std::vector<std::uint8_t> held;  // a piece delayed to arrive out of order
  std::uint64_t held_pos = 0, held_len = 0;
  fc::kafka::Direction held_dir = fc::kafka::Direction::kRequest;
  auto deliver = [&](fc::kafka::Direction dir, fc::fuzz::PieceCutter& c) {
    fc::fuzz::Piece piece;
    if (!c.next(&piece)) return false;
    const std::uint64_t p = piece.pos, len = piece.len;
    const auto bytes = piece.captured;
    if ((flags & 8) && held_len == 0 && c.rng() % 5 == 0) {  // hold it back
      held.assign(bytes.begin(), bytes.end());
      held_pos = p, held_len = len, held_dir = dir;
      return true;
    }
    decoder.data(conn, dir, time++, p, len, bytes);
    if (held_len && c.rng() % 2 == 0) {
      decoder.data(conn, held_dir, time++, held_pos, held_len, held);
      if (flags & 16) decoder.data(conn, held_dir, time++, held_pos, held_len, held);  // again
      held_len = 0;
    }
    return true;
  };
  bool more = true;
  while (more) {
    more = deliver(fc::kafka::Direction::kRequest, req);
    // Responses trail requests: keep the response stream at most as far along, proportionally.
    while (resp.behind(req)) {
      if (!deliver(fc::kafka::Direction::kResponse, resp)) break;
    }
    if (time % 64 == 0) decoder.close_gaps(time);
  }
  while (deliver(fc::kafka::Direction::kResponse, resp)) {
  }
  if (held_len) decoder.data(conn, held_dir, time++, held_pos, held_len, held);
  decoder.expire(time + 10);
  decoder.close_all(time + 20);
  if (decoder.connection_count() != 0) __builtin_trap();
  return 0;
}
