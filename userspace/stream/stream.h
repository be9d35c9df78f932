// stream: one direction of one connection as a byte stream that knows its holes.
//
// The capture layer reports pieces: `length` bytes moved at stream `position`, of which only a
// prefix (`captured`) was copied; the rest is a hole (sendfile payloads, bytes past a capture cap).
// Pieces may arrive out of order (per-CPU ring buffers, TCP reordering) or twice (TCP
// retransmissions); gaps that never fill (dropped events) become holes once the caller says so or
// the out-of-order budget runs out. A reader looks at what lies at its read position — captured
// bytes or a hole — and advances, possibly past bytes that have not arrived yet (they are then
// dropped on arrival, so skipped payloads are never buffered). Memory is bounded by Limits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace fc::stream {

struct Limits {
  // Captured bytes held between the read position and the resolved end; beyond it new captured
  // bytes are turned into holes (counted in Stats::bytes_over_limit).
  std::size_t max_buffered_bytes = 4u << 20;
  // Captured bytes / pieces held ahead of a gap waiting for it to fill; beyond either the gap is
  // declared a hole.
  std::size_t max_out_of_order_bytes = 1u << 20;
  std::size_t max_out_of_order_pieces = 256;
};

struct Stats {
  std::uint64_t pieces = 0;
  std::uint64_t bytes_captured = 0;    // captured bytes accepted into the stream
  std::uint64_t bytes_hole = 0;        // bytes that became holes (uncaptured, lost, over limit)
  std::uint64_t bytes_duplicate = 0;   // bytes for positions already resolved or skipped
  std::uint64_t bytes_skipped = 0;     // bytes the reader skipped before they arrived
  std::uint64_t bytes_over_limit = 0;  // captured bytes turned into holes by max_buffered_bytes
  std::uint64_t gaps_closed = 0;       // gaps that never filled and were declared holes
};

// What lies at the read position.
struct View {
  std::span<const std::uint8_t> data;  // captured bytes contiguous from the read position
  std::uint64_t hole = 0;              // > 0: the read position is inside a hole this long (so far)
  // Neither: nothing is known yet at the read position (wait for more pieces).
  bool more_follows = false;  // something resolved (a hole) follows `data`: it will not grow
};

class ByteStream {
 public:
  explicit ByteStream(Limits limits = {});

  // Declares where the stream starts (e.g. 0 when the connection was seen from its start).
  // Without it the first piece's position is the start.
  void set_start(std::uint64_t position);

  // `length` bytes at `position`; the first captured.size() of them are known, the rest are a
  // hole. captured.size() > length is clamped.
  void add(std::uint64_t position, std::uint64_t length, std::span<const std::uint8_t> captured);
  // Like add(), but when the piece continues the stream and nothing is buffered, its bytes are
  // only referenced, not copied: the caller reads them (view/advance) and then calls settle(),
  // which copies whatever was not consumed. `captured` must stay valid until settle() (or the
  // next add/add_borrowed, which settles first). Saves a copy per piece on the hot path.
  void add_borrowed(std::uint64_t position, std::uint64_t length,
                    std::span<const std::uint8_t> captured);
  void settle();
  // Declares every gap before pieces still waiting a hole (end of input, or the caller knows the
  // missing pieces are lost, e.g. after draining every ring buffer once).
  void close_gaps();

  bool started() const { return started_; }
  std::uint64_t position() const { return read_pos_; }
  // Everything before this position has arrived or is a hole.
  std::uint64_t resolved_end() const { return end_; }
  View view() const;
  // Moves the read position forward; past resolved_end() bytes are dropped when they arrive.
  void advance(std::uint64_t n) { advance_to(read_pos_ + n); }
  void advance_to(std::uint64_t position);
  // Captured bytes held (resolved and out of order): the memory this stream uses for data.
  std::size_t buffered_bytes() const { return (buf_.size() - buf_head_) + ooo_bytes_; }
  const Stats& stats() const { return stats_; }

 private:
  // A resolved run of the stream: captured bytes (stored in buf_) or a hole.
  struct Run {
    std::uint64_t begin;
    std::uint64_t length;
    std::size_t buf_offset;  // data runs only
    bool hole;
  };
  struct Pending {
    std::uint64_t length;
    std::vector<std::uint8_t> captured;
  };

  void append(std::uint64_t length, std::span<const std::uint8_t> captured);
  void append_hole(std::uint64_t length);
  void drain_pending();
  void enforce_out_of_order_limits();
  void trim_front();
  // Fields written in place: a Run built on the stack and copied in stalls on store forwarding.
  void push_run(std::uint64_t begin, std::uint64_t length, std::size_t buf_offset, bool hole) {
    Run& run = runs_.emplace_back();
    run.begin = begin;
    run.length = length;
    run.buf_offset = buf_offset;
    run.hole = hole;
  }
  const std::uint8_t* run_data(const Run& run) const {
    return run.buf_offset == kBorrowed ? borrowed_ + (run.begin - borrowed_pos_)
                                       : buf_.data() + run.buf_offset;
  }
  static constexpr std::size_t kBorrowed = ~std::size_t{0};  // Run::buf_offset of borrowed bytes

  Limits limits_;
  Stats stats_;
  bool started_ = false;
  std::uint64_t read_pos_ = 0;  // the reader's position
  std::uint64_t end_ = 0;       // resolved end (may be < read_pos_ after a skip ahead)
  std::vector<Run> runs_;       // resolved runs covering [read_pos_, end_), oldest first
  std::size_t run_head_ = 0;
  std::vector<std::uint8_t> buf_;  // captured bytes of data runs
  std::size_t buf_head_ = 0;
  std::map<std::uint64_t, Pending> pending_;  // pieces beyond a gap, by position
  std::size_t ooo_bytes_ = 0;
  const std::uint8_t* borrowed_ = nullptr;  // bytes of the borrowed run, if any
  std::uint64_t borrowed_pos_ = 0;          // their stream position
};

}  // namespace fc::stream
