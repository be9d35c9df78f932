#include "stream/stream.h"

#include <algorithm>
#include <cstring>

namespace fc::stream {

ByteStream::ByteStream(Limits limits) : limits_(limits) {}

void ByteStream::set_start(std::uint64_t position) {
  if (started_) return;
  started_ = true;
  read_pos_ = end_ = position;
}

void ByteStream::add_borrowed(std::uint64_t position, std::uint64_t length,
                              std::span<const std::uint8_t> captured) {
  if (borrowed_) settle();
  if (started_ && position == end_ && run_head_ == runs_.size() && pending_.empty() &&
      !captured.empty() && captured.size() <= length &&
      captured.size() <= limits_.max_buffered_bytes) {
    ++stats_.pieces;
    borrowed_ = captured.data();
    borrowed_pos_ = position;
    push_run(end_, captured.size(), kBorrowed, false);
    end_ += captured.size();
    stats_.bytes_captured += captured.size();
    if (length > captured.size()) append_hole(length - captured.size());
    return;
  }
  add(position, length, captured);
}

void ByteStream::settle() {
  if (!borrowed_) return;
  for (std::size_t i = run_head_; i < runs_.size(); ++i) {
    Run& run = runs_[i];
    if (run.hole || run.buf_offset != kBorrowed) continue;
    const std::uint8_t* data = run_data(run);
    run.buf_offset = buf_.size();
    buf_.insert(buf_.end(), data, data + run.length);
  }
  borrowed_ = nullptr;
}

void ByteStream::add(std::uint64_t position, std::uint64_t length,
                     std::span<const std::uint8_t> captured) {
  if (borrowed_) settle();
  if (captured.size() > length) captured = captured.first(length);
  if (!started_) set_start(position);
  ++stats_.pieces;
  if (length == 0) return;
  std::uint64_t piece_end = position + length;
  if (piece_end <= end_) {
    stats_.bytes_duplicate += length;
    return;
  }
  if (position < end_) {  // overlaps what is resolved: keep only the new tail
    std::uint64_t overlap = end_ - position;
    stats_.bytes_duplicate += overlap;
    captured = captured.subspan(std::min<std::uint64_t>(overlap, captured.size()));
    position = end_;
    length -= overlap;
  }
  if (position > end_) {  // a gap before it: hold until the gap fills or is declared a hole
    auto it = pending_.find(position);
    if (it != pending_.end()) {
      if (it->second.length >= length) {
        stats_.bytes_duplicate += length;
        return;
      }
      ooo_bytes_ -= it->second.captured.size();
      pending_.erase(it);
    }
    pending_.emplace(position, Pending{length, {captured.begin(), captured.end()}});
    ooo_bytes_ += captured.size();
    enforce_out_of_order_limits();
    return;
  }
  append(length, captured);
  if (!pending_.empty()) drain_pending();
}

void ByteStream::append(std::uint64_t length, std::span<const std::uint8_t> captured) {
  std::size_t held = buf_.size() - buf_head_;
  std::size_t room = held >= limits_.max_buffered_bytes ? 0 : limits_.max_buffered_bytes - held;
  if (captured.size() > room) {
    stats_.bytes_over_limit += captured.size() - room;
    captured = captured.first(room);
  }
  if (!captured.empty()) {
    Run* last = run_head_ < runs_.size() ? &runs_.back() : nullptr;
    if (last && !last->hole && last->buf_offset != kBorrowed &&
        last->buf_offset + last->length == buf_.size()) {
      last->length += captured.size();
    } else {
      push_run(end_, captured.size(), buf_.size(), false);
    }
    buf_.insert(buf_.end(), captured.begin(), captured.end());
    end_ += captured.size();
    stats_.bytes_captured += captured.size();
  }
  if (length > captured.size()) append_hole(length - captured.size());
}

void ByteStream::append_hole(std::uint64_t length) {
  Run* last = run_head_ < runs_.size() ? &runs_.back() : nullptr;
  if (last && last->hole) {
    last->length += length;
  } else {
    push_run(end_, length, 0, true);
  }
  end_ += length;
  stats_.bytes_hole += length;
}

void ByteStream::drain_pending() {
  while (!pending_.empty()) {
    auto it = pending_.begin();
    if (it->first > end_) return;
    std::uint64_t position = it->first;
    Pending piece = std::move(it->second);
    ooo_bytes_ -= piece.captured.size();
    pending_.erase(it);
    std::uint64_t piece_end = position + piece.length;
    if (piece_end <= end_) {
      stats_.bytes_duplicate += piece.length;
      continue;
    }
    std::uint64_t overlap = end_ - position;
    stats_.bytes_duplicate += overlap;
    std::span<const std::uint8_t> captured(piece.captured);
    captured = captured.subspan(std::min<std::uint64_t>(overlap, captured.size()));
    append(piece.length - overlap, captured);
  }
}

void ByteStream::enforce_out_of_order_limits() {
  while (!pending_.empty() && (ooo_bytes_ > limits_.max_out_of_order_bytes ||
                               pending_.size() > limits_.max_out_of_order_pieces)) {
    std::uint64_t first = pending_.begin()->first;
    if (first > end_) {
      ++stats_.gaps_closed;
      append_hole(first - end_);
    }
    drain_pending();
  }
}

void ByteStream::close_gaps() {
  while (!pending_.empty()) {
    std::uint64_t first = pending_.begin()->first;
    if (first > end_) {
      ++stats_.gaps_closed;
      append_hole(first - end_);
    }
    drain_pending();
  }
}

View ByteStream::view() const {
  View v;
  if (run_head_ >= runs_.size()) return v;
  const Run& run = runs_[run_head_];
  if (run.hole) {
    v.hole = run.length;
    // Adjacent holes are merged on append, so one run is the whole known hole.
  } else {
    v.data = std::span<const std::uint8_t>(run_data(run), run.length);
    v.more_follows = run_head_ + 1 < runs_.size();
  }
  return v;
}

void ByteStream::advance_to(std::uint64_t position) {
  if (position <= read_pos_) return;
  if (position >= end_) {
    stats_.bytes_skipped += position - end_;
    runs_.clear();
    run_head_ = 0;
    buf_.clear();
    buf_head_ = 0;
    borrowed_ = nullptr;
    read_pos_ = end_ = position;
    if (!pending_.empty()) drain_pending();
    return;
  }
  read_pos_ = position;
  while (run_head_ < runs_.size()) {
    Run& run = runs_[run_head_];
    std::uint64_t run_end = run.begin + run.length;
    if (run_end <= position) {
      ++run_head_;
      continue;
    }
    if (run.begin < position) {
      std::uint64_t cut = position - run.begin;
      run.begin = position;
      run.length -= cut;
      if (!run.hole && run.buf_offset != kBorrowed) run.buf_offset += cut;
    }
    break;
  }
  trim_front();
}

void ByteStream::trim_front() {
  // buf_head_: first byte still referenced by a data run.
  std::size_t head = buf_.size();
  for (std::size_t i = run_head_; i < runs_.size(); ++i) {
    if (!runs_[i].hole && runs_[i].buf_offset != kBorrowed) {
      head = runs_[i].buf_offset;
      break;
    }
  }
  buf_head_ = head;
  if (buf_head_ == buf_.size()) {
    buf_.clear();
    buf_head_ = 0;
  } else if (buf_head_ >= 4096 && buf_head_ * 2 >= buf_.size()) {
    // Compact only when most of the buffer is consumed, so the cost stays amortised O(1)/byte.
    buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(buf_head_));
    for (std::size_t i = run_head_; i < runs_.size(); ++i) {
      if (!runs_[i].hole && runs_[i].buf_offset != kBorrowed) runs_[i].buf_offset -= buf_head_;
    }
    buf_head_ = 0;
  }
  if (run_head_ == runs_.size()) {
    runs_.clear();
    run_head_ = 0;
  } else if (run_head_ >= 64 && run_head_ * 2 >= runs_.size()) {
    runs_.erase(runs_.begin(), runs_.begin() + static_cast<std::ptrdiff_t>(run_head_));
    run_head_ = 0;
  }
}

}  // namespace fc::stream
