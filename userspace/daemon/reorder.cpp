#include "daemon/reorder.h"

#include <algorithm>
#include <cstring>

namespace fc::daemon {
namespace {

constexpr std::size_t kChunkBytes = 256 * 1024;  // a few milliseconds of a busy broker
constexpr std::size_t kKeptFreeChunks = 2;       // beyond this, emptied chunks are freed

// What precedes a held record's header in its chunk.
struct Stored {
  std::uint8_t is_data;
  std::uint8_t folded;
  std::uint16_t nsegs;
  std::uint32_t payload;
};
static_assert(sizeof(Stored) == 8);
static_assert(sizeof(fc_data_event) % 8 == 0 && sizeof(fc_conn_event) % 8 == 0);

constexpr std::size_t padded(std::size_t n) {
  return (n + 7) & ~std::size_t{7};
}

}  // namespace

void ReorderWindow::hold(const capture::EventView& event) {
  if (!event.data && !event.conn) return;
  const std::size_t header = event.data ? sizeof(fc_data_event) : sizeof(fc_conn_event);
  const std::size_t payload = event.data ? event.payload.size() : 0;
  const std::size_t nsegs = std::min<std::size_t>(event.segments.size(), FC_MAX_SEGMENTS);
  const std::size_t bytes = sizeof(Stored) + header + padded(payload);
  if (bytes > kChunkBytes) return;  // cannot happen: a payload is at most FC_MAX_CAPTURE
  Chunk& chunk = room_for(bytes);
  std::uint8_t* at = chunk.bytes.get() + chunk.used;
  const Stored stored{static_cast<std::uint8_t>(event.data != nullptr),
                      static_cast<std::uint8_t>(event.folded), static_cast<std::uint16_t>(nsegs),
                      static_cast<std::uint32_t>(payload)};
  std::memcpy(at, &stored, sizeof(stored));
  if (event.data) {
    auto* d = reinterpret_cast<fc_data_event*>(at + sizeof(Stored));
    std::memcpy(d, event.data, sizeof(fc_data_event));
    // The view's segments are the ones that count (they are the header's own in practice).
    if (event.segments.data() != event.data->segs && nsegs > 0)
      std::memcpy(d->segs, event.segments.data(), nsegs * sizeof(fc_segment));
    if (payload > 0) std::memcpy(at + sizeof(Stored) + header, event.payload.data(), payload);
  } else {
    std::memcpy(at + sizeof(Stored), event.conn, sizeof(fc_conn_event));
  }
  keys_.push_back(
      {event.common.timestamp_ns, sequence_++, &chunk, static_cast<std::uint32_t>(chunk.used)});
  chunk.used += bytes;
  ++chunk.live;
}

std::size_t ReorderWindow::settle(std::uint64_t before_ns, std::size_t max) {
  // Only the records held since the last release are sorted (a run per CPU ring, each nearly
  // in order), then merged into the ordered rest.
  const auto earlier = [](const Key& a, const Key& b) {
    return a.time_ns != b.time_ns ? a.time_ns < b.time_ns : a.sequence < b.sequence;
  };
  const auto fresh = keys_.begin() + static_cast<std::ptrdiff_t>(sorted_);
  std::sort(fresh, keys_.end(), earlier);
  if (fresh != keys_.end()) {
    // Only the ordered keys later than the earliest fresh one move, merged through a buffer
    // kept between calls (std::inplace_merge allocated one the size of the window each time).
    const auto from = std::upper_bound(keys_.begin() + static_cast<std::ptrdiff_t>(head_), fresh,
                                       *fresh, earlier);
    if (from != fresh) {
      merge_buffer_.assign(from, keys_.end());
      const auto middle = merge_buffer_.begin() + (fresh - from);
      std::merge(merge_buffer_.begin(), middle, middle, merge_buffer_.end(), from, earlier);
    }
  }
  std::size_t n = 0;
  while (n < max && head_ + n < keys_.size() && keys_[head_ + n].time_ns < before_ns) ++n;
  return n;
}

std::size_t ReorderWindow::memory_bytes() const {
  return chunks_.size() * kChunkBytes;
}

capture::EventView ReorderWindow::view_of(const Key& key) const {
  const std::uint8_t* at = key.chunk->bytes.get() + key.offset;
  Stored stored;
  std::memcpy(&stored, at, sizeof(stored));
  if (stored.is_data) {
    const auto* d = reinterpret_cast<const fc_data_event*>(at + sizeof(Stored));
    capture::EventView view{d->c};
    view.data = d;
    view.payload = {at + sizeof(Stored) + sizeof(fc_data_event), stored.payload};
    view.segments = {d->segs, stored.nsegs};
    view.folded = stored.folded != 0;
    view.skipped = d->source == FC_SRC_SKIPPED;
    return view;
  }
  const auto* c = reinterpret_cast<const fc_conn_event*>(at + sizeof(Stored));
  capture::EventView view{c->c};
  view.conn = c;
  return view;
}

void ReorderWindow::done_with(const Key& key) {
  Chunk* chunk = key.chunk;
  if (--chunk->live > 0 || chunk == chunks_.back().get()) return;  // the one being filled stays
  chunk->used = 0;
  if (free_.size() < kKeptFreeChunks) {
    free_.push_back(chunk);
    return;
  }
  const auto it = std::find_if(chunks_.begin(), chunks_.end(),
                               [chunk](const auto& c) { return c.get() == chunk; });
  if (it != chunks_.end()) chunks_.erase(it);
}

void ReorderWindow::forget(std::size_t n) {
  head_ += n;
  if (head_ == keys_.size()) {
    keys_.clear();
    head_ = 0;
  } else if (head_ >= 4096 && head_ * 2 >= keys_.size()) {
    keys_.erase(keys_.begin(), keys_.begin() + static_cast<std::ptrdiff_t>(head_));
    head_ = 0;
  }
  sorted_ = keys_.size();
}

ReorderWindow::Chunk& ReorderWindow::room_for(std::size_t bytes) {
  if (!chunks_.empty() && chunks_.back()->used + bytes <= kChunkBytes) return *chunks_.back();
  // The chunk being filled is full: it is left to its records (freed or reused when the last
  // is handed on, or now if none is held), and a reused or new chunk becomes the one filled.
  if (!chunks_.empty() && chunks_.back()->live == 0) {
    chunks_.back()->used = 0;
    return *chunks_.back();
  }
  std::unique_ptr<Chunk> next;
  if (!free_.empty()) {
    Chunk* reuse = free_.back();
    free_.pop_back();
    const auto it = std::find_if(chunks_.begin(), chunks_.end(),
                                 [reuse](const auto& c) { return c.get() == reuse; });
    next = std::move(*it);
    chunks_.erase(it);
  } else {
    next = std::make_unique<Chunk>();
    next->bytes = std::make_unique_for_overwrite<std::uint8_t[]>(kChunkBytes);
  }
  chunks_.push_back(std::move(next));
  return *chunks_.back();
}

}  // namespace fc::daemon
