#include "capture/spool.h"

#include <sys/eventfd.h>
#include <unistd.h>

namespace fc::capture {

Spool::Spool(std::size_t max_bytes, std::size_t chunk_bytes)
    : max_bytes_(max_bytes), chunk_bytes_(chunk_bytes) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  filling_.reserve(chunk_bytes_);
}

Spool::~Spool() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::vector<std::uint8_t> Spool::fresh_chunk() {
  std::lock_guard lock(mutex_);
  if (spares_.empty()) {
    std::vector<std::uint8_t> chunk;
    chunk.reserve(chunk_bytes_);
    return chunk;
  }
  std::vector<std::uint8_t> chunk = std::move(spares_.back());
  spares_.pop_back();
  return chunk;
}

void Spool::add_held(std::size_t bytes) {
  const std::size_t now = held_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (now > peak_.load(std::memory_order_relaxed)) peak_.store(now, std::memory_order_relaxed);
}

void Spool::push(const void* data, std::size_t size) {
  const std::size_t need = kHeader + padded(size);
  if (!filling_.empty() && filling_.size() + need > chunk_bytes_) {
    const std::size_t bytes = filling_.size();
    {
      std::lock_guard lock(mutex_);
      ready_.push_back(std::move(filling_));
    }
    add_held(bytes);
    filling_ = fresh_chunk();
  }
  ++pushed_;
  // Appended, not resized and then overwritten: resize() would zero every byte first. A record
  // larger than a chunk gets a larger chunk.
  std::uint8_t header[kHeader] = {};
  const auto size32 = static_cast<std::uint32_t>(size);
  std::memcpy(header, &size32, sizeof size32);
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  filling_.insert(filling_.end(), header, header + kHeader);
  filling_.insert(filling_.end(), bytes, bytes + size);
  filling_.insert(filling_.end(), padded(size) - size, std::uint8_t{0});
}

void Spool::publish() {
  const std::size_t bytes = filling_.size();
  bool waiting;
  {
    std::lock_guard lock(mutex_);
    if (bytes > 0) ready_.push_back(std::move(filling_));
    waiting = !ready_.empty();
  }
  if (bytes > 0) {
    add_held(bytes);
    filling_ = fresh_chunk();
  }
  if (waiting) {
    const std::uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) { /* the counter is full: already readable */
    }
  }
}

std::vector<std::vector<std::uint8_t>> Spool::take_chunks() {
  std::uint64_t count;
  if (read(wake_fd_, &count, sizeof count) < 0) { /* nothing signalled: still take what is there */
  }
  std::vector<std::vector<std::uint8_t>> taken;
  std::lock_guard lock(mutex_);
  taken.swap(ready_);
  return taken;
}

void Spool::give_back(std::vector<std::vector<std::uint8_t>> chunks, std::size_t bytes) {
  held_.fetch_sub(bytes, std::memory_order_relaxed);
  std::lock_guard lock(mutex_);
  for (auto& chunk : chunks) {
    if (spares_.size() >= kSpares) break;
    chunk.clear();
    spares_.push_back(std::move(chunk));
  }
}

}  // namespace fc::capture
