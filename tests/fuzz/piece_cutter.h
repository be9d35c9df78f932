// Cuts one fuzz input stream into the pieces a capture delivers: single bytes to a couple of
// thousand, and now and then a hole (only the first part of a piece captured). Seeded from the
// input, so a crash replays.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

namespace fc::fuzz {

struct Piece {
  std::uint64_t pos = 0;                   // stream position of the piece
  std::size_t len = 0;                     // input bytes it stands for
  std::span<const std::uint8_t> captured;  // its first bytes (all of them but for a hole)
};

class PieceCutter {
 public:
  // flags bit 1: one-byte pieces; bit 2: pieces of at most `small` bytes; else up to 64 + `spread`.
  PieceCutter(std::uint32_t seed, const std::uint8_t* data, std::size_t size, std::uint8_t flags,
              std::size_t small, std::size_t spread)
      : rng(seed), data_(data), size_(size), flags_(flags), small_(small), spread_(spread) {}

  bool next(Piece* piece) {
    if (at_ >= size_) return false;
    const std::size_t max = (flags_ & 2) ? 1 : (flags_ & 4) ? small_ : 64 + rng() % spread_;
    piece->len = std::min<std::size_t>(size_ - at_, 1 + rng() % max);
    const std::size_t captured = (rng() % 8 == 0) ? rng() % (piece->len + 1) : piece->len;
    piece->pos = pos_;
    piece->captured = {data_ + at_, captured};
    pos_ += piece->len;
    at_ += piece->len;
    return true;
  }
  bool done() const { return at_ >= size_; }
  // Responses trail requests: this (response) stream is at most as far along as `request`,
  // proportionally to the two streams' sizes.
  bool behind(const PieceCutter& request) const {
    return !done() && at_ * std::max<std::size_t>(request.size_, 1) <= request.at_ * size_;
  }

  std::minstd_rand rng;  // also drives the fuzzer's other choices (reordering, aborts)

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::uint8_t flags_;
  std::size_t small_, spread_;
  std::size_t at_ = 0;
  std::uint64_t pos_ = 0;
};

}  // namespace fc::fuzz
