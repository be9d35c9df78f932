// reorder: the capture's records, one ring buffer per CPU, put back in time order. Each record
// is held for a few milliseconds (until no CPU can still deliver an earlier one), then handed on
// by timestamp, ties in arrival order.
//
// Held records are copied into chunks of memory one after another, not into an object each:
// holding one is a sequential copy of its header and payload (no allocation), and the records
// handed on together lie together. A chunk is reused once every record in it is handed on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "capture/capture.h"

namespace fc::daemon {

class ReorderWindow {
 public:
  ReorderWindow() = default;
  ReorderWindow(const ReorderWindow&) = delete;
  ReorderWindow& operator=(const ReorderWindow&) = delete;

  // Copies a DATA/TLS_DATA or CONNECT/CLOSE record; anything else is not held.
  void hold(const capture::EventView& event);

  // Hands on, in order, the held records older than `before_ns`, at most `max_records` of them;
  // the views live for the call. Returns whether due records are still held.
  template <typename Deliver>
  bool release(std::uint64_t before_ns, Deliver&& deliver,
               std::size_t max_records = static_cast<std::size_t>(-1)) {
    const std::size_t n = settle(before_ns, max_records);
    for (std::size_t i = head_; i < head_ + n; ++i) {
      deliver(view_of(keys_[i]));
      done_with(keys_[i]);
    }
    forget(n);
    return head_ < keys_.size() && keys_[head_].time_ns < before_ns;
  }

  std::size_t held() const { return keys_.size() - head_; }
  std::size_t chunks() const { return chunks_.size(); }  // in use or kept for reuse
  std::size_t memory_bytes() const;                      // of those chunks

 private:
  struct Chunk {
    std::unique_ptr<std::uint8_t[]> bytes;
    std::size_t used = 0;
    std::size_t live = 0;  // records held in it
  };
  struct Key {
    std::uint64_t time_ns;
    std::uint64_t sequence;
    Chunk* chunk;
    std::uint32_t offset;
  };

  // Orders keys_, returns how many are due (at most `max`).
  std::size_t settle(std::uint64_t before_ns, std::size_t max);
  capture::EventView view_of(const Key& key) const;
  void done_with(const Key& key);
  void forget(std::size_t n);
  Chunk& room_for(std::size_t bytes);

  // keys_[head_, end) are held: released keys are dropped from the front in batches, so a
  // release in small slices does not move the rest each time.
  std::vector<Key> keys_;
  std::size_t head_ = 0;
  std::size_t sorted_ = 0;         // keys_[head_, sorted_) is in order from the last release
  std::vector<Key> merge_buffer_;  // settle()'s, kept so that a merge allocates nothing
  std::uint64_t sequence_ = 0;
  std::vector<std::unique_ptr<Chunk>> chunks_;  // every chunk, the one being filled last
  std::vector<Chunk*> free_;                    // emptied chunks, reused first
};

}  // namespace fc::daemon
