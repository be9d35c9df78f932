#include "capture/spool.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <mutex>

namespace fc::capture {

PriorityInheritingMutex::PriorityInheritingMutex() {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  // Fails only without PI futexes (Linux < 2.6.18): a plain mutex then.
  pthread_mutexattr_setprotocol(&attr, PTHREAD_PRIO_INHERIT);
  pthread_mutex_init(&mutex_, &attr);
  pthread_mutexattr_destroy(&attr);
}

PriorityInheritingMutex::~PriorityInheritingMutex() {
  pthread_mutex_destroy(&mutex_);
}

void PriorityInheritingMutex::lock() {
  pthread_mutex_lock(&mutex_);
}

void PriorityInheritingMutex::unlock() {
  pthread_mutex_unlock(&mutex_);
}

Spool::Spool(std::size_t max_bytes, std::size_t chunk_bytes)
    : max_bytes_(max_bytes), chunk_bytes_(chunk_bytes) {
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  filling_.reserve(chunk_bytes_);
}

Spool::~Spool() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

std::vector<std::uint8_t> Spool::hand_over_filling() {
  // Counted before the reader can take it: its give_back must never find held_ short.
  add_held(filling_.size());
  ready_.push_back(std::move(filling_));
  std::vector<std::uint8_t> next;
  if (!returned_.empty()) {
    next = std::move(returned_.back());
    returned_.pop_back();
  }
  return next;
}

void Spool::refill(std::vector<std::uint8_t> next) {
  if (next.capacity() == 0) next.reserve(chunk_bytes_);
  filling_ = std::move(next);
}

void Spool::add_held(std::size_t bytes) {
  const std::size_t now = held_.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  if (now > peak_.load(std::memory_order_relaxed)) peak_.store(now, std::memory_order_relaxed);
}

void Spool::push(const void* data, std::size_t size) {
  const std::size_t need = kHeader + padded(size);
  if (!filling_.empty() && filling_.size() + need > chunk_bytes_) {
    std::vector<std::uint8_t> next;
    {
      std::lock_guard lock(mutex_);
      next = hand_over_filling();
    }
    refill(std::move(next));
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
  const bool filled = !filling_.empty();
  bool waiting;
  std::vector<std::uint8_t> next;
  std::vector<std::vector<std::uint8_t>> surplus;  // freed here, by the writer, after the lock
  {
    std::lock_guard lock(mutex_);
    if (filled) next = hand_over_filling();
    waiting = !ready_.empty();
    if (returned_.size() > kSpares) {
      surplus.reserve(returned_.size() - kSpares);
      while (returned_.size() > kSpares) {
        surplus.push_back(std::move(returned_.back()));
        returned_.pop_back();
      }
    }
  }
  if (filled) refill(std::move(next));
  if (waiting) {
    const std::uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) { /* the counter is full: already readable */
    }
  }
}

void Spool::take_chunks() {
  std::uint64_t count;
  if (read(wake_fd_, &count, sizeof count) < 0) { /* nothing signalled: still take what is there */
  }
  std::lock_guard lock(mutex_);
  taking_.swap(ready_);  // ready_ gets taking_'s storage, emptied by the last give_back
}

void Spool::give_back(std::size_t bytes) {
  held_.fetch_sub(bytes, std::memory_order_relaxed);
  for (auto& chunk : taking_) chunk.clear();  // keeps its storage: nothing is freed here
  std::lock_guard lock(mutex_);
  for (auto& chunk : taking_) returned_.push_back(std::move(chunk));
  taking_.clear();
}

}  // namespace fc::capture
