#include <doctest/doctest.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "capture/spool.h"

// Every allocation and free in this process, counted: the spool's reader must do neither.
namespace {
std::atomic<std::uint64_t> allocations{0}, frees{0};
}
void* operator new(std::size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept {
  if (p) frees.fetch_add(1, std::memory_order_relaxed);
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  operator delete(p);
}

using fc::capture::Spool;

namespace {

bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

std::vector<std::string> take_all(Spool& spool) {
  std::vector<std::string> out;
  spool.take([&](const void* data, std::size_t size) {
    out.emplace_back(static_cast<const char*>(data), size);
  });
  return out;
}

}  // namespace

TEST_CASE("records come out whole and in order, across chunks, once published") {
  Spool spool(1u << 20, 64);  // small chunks: most records start a new one
  const std::vector<std::string> records = {
      "a",       "", std::string(61, 'b'), "ccc", std::string(200, 'd'),  // larger than a chunk
      "eeeeeeee"};
  for (const auto& r : records) spool.push(r.data(), r.size());
  CHECK_FALSE(readable(spool.wake_fd()));
  // Chunks that filled up are handed over as they fill; the rest waits for publish().
  spool.publish();
  CHECK(readable(spool.wake_fd()));
  CHECK(take_all(spool) == records);
  CHECK_FALSE(readable(spool.wake_fd()));
  CHECK(spool.held_bytes() == 0);
  CHECK(take_all(spool).empty());

  // Emptied chunks are reused: a second round comes out the same.
  for (const auto& r : records) spool.push(r.data(), r.size());
  spool.publish();
  CHECK(take_all(spool) == records);
}

TEST_CASE("full once max_bytes are published and not taken") {
  Spool spool(256, 64);
  const std::string record(40, 'x');  // 48 bytes with its header
  for (int i = 0; i < 5; ++i) spool.push(record.data(), record.size());
  spool.publish();
  CHECK(spool.held_bytes() == 5 * 48);
  CHECK_FALSE(spool.full());
  spool.push(record.data(), record.size());
  spool.publish();
  CHECK(spool.full());
  CHECK(take_all(spool).size() == 6);
  CHECK_FALSE(spool.full());
}

TEST_CASE("the peak is the most held at once, kept after the drain catches up") {
  Spool spool(1u << 20, 64);
  const std::string record(40, 'x');  // 48 bytes with its header
  CHECK(spool.peak_bytes() == 0);
  CHECK(spool.max_bytes() == (1u << 20));
  for (int i = 0; i < 3; ++i) spool.push(record.data(), record.size());
  spool.publish();
  CHECK(spool.peak_bytes() == 3 * 48);
  CHECK(take_all(spool).size() == 3);
  spool.push(record.data(), record.size());
  spool.publish();
  CHECK(spool.held_bytes() == 48);
  CHECK(spool.peak_bytes() == 3 * 48);  // not lowered by a smaller backlog
  for (int i = 0; i < 4; ++i) spool.push(record.data(), record.size());
  spool.publish();
  CHECK(spool.peak_bytes() == 5 * 48);
}

TEST_CASE("one writer and one reader on two threads: nothing lost, nothing reordered") {
  Spool spool(8u << 20, 4096);
  constexpr std::uint64_t kRecords = 300'000;
  std::thread writer([&] {
    for (std::uint64_t i = 0; i < kRecords; ++i) {
      std::uint64_t value[3] = {i, i * 7, ~i};
      spool.push(value, 8 + (i % 3) * 8);  // 8, 16 or 24 bytes
      if (i % 100 == 99) spool.publish();
    }
    spool.publish();
  });
  std::uint64_t next = 0;
  bool ok = true;
  std::size_t most_held = 0;  // as the reader sees it: never more than was published
  while (next < kRecords) {
    pollfd p{spool.wake_fd(), POLLIN, 1000};
    if (::poll(&p, 1, 1000) != 1) break;
    spool.take([&](const void* data, std::size_t size) {
      std::uint64_t value[3] = {};
      std::memcpy(value, data, size);
      if (size != 8 + (next % 3) * 8 || value[0] != next || (size >= 16 && value[1] != next * 7) ||
          (size == 24 && value[2] != ~next))
        ok = false;
      ++next;
    });
    most_held = std::max(most_held, spool.held_bytes());
  }
  writer.join();
  CHECK(ok);
  CHECK(most_held <= kRecords * 32);
  CHECK(next == kRecords);
  CHECK(spool.held_bytes() == 0);
}

TEST_CASE("the reader neither allocates nor frees; the writer frees the chunks past its spares") {
  // A reader at SCHED_IDLE that freed a chunk held the writer's malloc arena (or the mmap lock)
  // while the host starved it, and the real-time writer waited for it for seconds.
  Spool spool(1u << 20, 4096);
  const std::string record(1000, 'r');  // four records a chunk
  std::size_t taken = 0;
  auto take_counted = [&] {
    const std::uint64_t a = allocations.load(), f = frees.load();
    taken += spool.take([&](const void*, std::size_t) {});
    return std::pair{allocations.load() - a, frees.load() - f};
  };
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 40; ++i) spool.push(record.data(), record.size());  // ten chunks
    spool.publish();
    const auto [allocated, freed] = take_counted();
    INFO("round " << round);
    if (round > 0) {  // in the first, its list of returned chunks grew (its own storage)
      CHECK(allocated == 0);
      CHECK(freed == 0);
    }
    // The next publish takes the chunks past the writer's four spares and frees them.
    const std::uint64_t f = frees.load();
    spool.publish();
    CHECK(frees.load() - f >= 6);
  }
  CHECK(taken == 120);
}
