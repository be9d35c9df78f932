// spool: records on their way from the ring buffers to the drain. The capture's reader thread
// moves every record out of the kernel rings as soon as they wake it (a copy, nothing else) and
// the drain thread takes them from here at its own pace. Only the move has to be prompt: when
// the drain waited on the run queue behind a busy broker and its clients, the rings filled and
// records were lost; held here, they wait in memory instead (up to max_bytes, then the reader
// leaves them in the rings, whose drops are counted as before). One writer, one reader.
//
// The writer runs at real-time priority and the reader may run at SCHED_IDLE, which a saturated
// host starves for seconds: the writer must never wait for anything the reader can hold while
// preempted. So the reader neither allocates nor frees chunks (a free takes the writer's malloc
// arena lock, and unmapping takes the process's mmap lock: the writer waited seconds behind
// them, docs/performance.md "Session 56" in "Ring reader"), and the one lock they share lends
// the writer's priority to the reader (priority inheritance).
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace fc::capture {

// A mutex with priority inheritance (PTHREAD_PRIO_INHERIT): a real-time thread waiting for it
// raises the holder to its own priority until the holder lets go.
class PriorityInheritingMutex {
 public:
  PriorityInheritingMutex();
  ~PriorityInheritingMutex();
  PriorityInheritingMutex(const PriorityInheritingMutex&) = delete;
  PriorityInheritingMutex& operator=(const PriorityInheritingMutex&) = delete;
  void lock();
  void unlock();

 private:
  pthread_mutex_t mutex_;
};

class Spool {
 public:
  // What fetchcostd's capture holds before it leaves records in the rings: seconds of a busy
  // broker's records, a bounded share of memory.
  static constexpr std::size_t kDefaultMaxBytes = 64u << 20;

  explicit Spool(std::size_t max_bytes = kDefaultMaxBytes, std::size_t chunk_bytes = 1u << 20);
  ~Spool();
  Spool(const Spool&) = delete;
  Spool& operator=(const Spool&) = delete;

  // Writer: copies one record in. Not visible to the reader before publish().
  void push(const void* data, std::size_t size);
  // Writer: hands over what was pushed and makes wake_fd() readable.
  void publish();
  // Writer: records pushed since the spool was made (the reader's own count, no lock).
  std::uint64_t pushed() const { return pushed_; }
  // Writer: the reader has not taken max_bytes yet; read no more from the rings for now.
  bool full() const { return held_.load(std::memory_order_relaxed) >= max_bytes_; }

  // Reader: calls f(data, size) for every published record, in push order. Returns how many.
  template <class F>
  std::size_t take(F&& f) {
    take_chunks();
    std::size_t n = 0, bytes = 0;
    for (const auto& chunk : taking_) {
      for (std::size_t at = 0; at + kHeader <= chunk.size();) {
        std::uint32_t size;
        std::memcpy(&size, chunk.data() + at, sizeof size);
        f(static_cast<const void*>(chunk.data() + at + kHeader), std::size_t{size});
        at += kHeader + padded(size);
        ++n;
      }
      bytes += chunk.size();
    }
    give_back(bytes);
    return n;
  }
  // Readable while published records wait (an eventfd): poll() it to wait for records.
  int wake_fd() const { return wake_fd_; }
  // Bytes published and not taken yet: the drain's backlog.
  std::size_t held_bytes() const { return held_.load(std::memory_order_relaxed); }
  // The most bytes ever held at once: how near the drain came to max_bytes (and the rings to
  // dropping records).
  std::size_t peak_bytes() const { return peak_.load(std::memory_order_relaxed); }
  std::size_t max_bytes() const { return max_bytes_; }

 private:
  static constexpr std::size_t kHeader = 8;  // u32 size, u32 padding: records stay 8-aligned
  static constexpr std::size_t kSpares = 4;  // emptied chunks the writer keeps for reuse
  static std::size_t padded(std::size_t n) { return (n + 7) & ~std::size_t{7}; }
  void take_chunks();                 // reader: the published chunks into taking_
  void give_back(std::size_t bytes);  // reader: taking_'s chunks, emptied, to returned_
  void add_held(std::size_t bytes);   // writer
  // Writer, under mutex_: filling_ to ready_, and a returned chunk to fill next (or none).
  std::vector<std::uint8_t> hand_over_filling();
  void refill(std::vector<std::uint8_t> next);  // writer, after the lock: next, or a new chunk

  const std::size_t max_bytes_;
  const std::size_t chunk_bytes_;
  int wake_fd_ = -1;
  std::vector<std::uint8_t> filling_;  // writer only
  std::uint64_t pushed_ = 0;           // writer only
  std::atomic<std::size_t> held_{0};
  std::atomic<std::size_t> peak_{0};  // written by the writer only
  PriorityInheritingMutex mutex_;     // guards ready_ and returned_
  std::vector<std::vector<std::uint8_t>> ready_;
  // Emptied chunks, back from the reader: the writer reuses them, and frees those past kSpares.
  std::vector<std::vector<std::uint8_t>> returned_;
  // Reader only: the chunks being taken. Swapped with ready_, so both lists keep their storage.
  std::vector<std::vector<std::uint8_t>> taking_;
};

}  // namespace fc::capture
