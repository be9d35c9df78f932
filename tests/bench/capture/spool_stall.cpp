// The capture's ring reader (SCHED_FIFO 1) moving records into the spool while its drain, at
// SCHED_IDLE, takes them behind busy processes that keep every CPU saturated: the longest the
// reader took to push and publish one pass, which is how long the rings go unread. Prints
// figures for docs/reliability.md; not a timed pass/fail test. Root (SCHED_FIFO).
//
//   bench_spool_stall [seconds] [busy processes per CPU]
//
// The reader's pass: 100 records of 600 bytes every 5 ms (12 MB/s, about what the rings give a
// busy e2e run), published at its end as fetchcostd's reader does.
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "capture/capture.h"
#include "capture/drain_steering.h"
#include "capture/spool.h"

using fc::monotonic_ns;

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? std::atoi(argv[1]) : 60;
  const int per_cpu = argc > 2 ? std::atoi(argv[2]) : 6;
  if (geteuid() != 0) {
    std::fprintf(stderr, "bench_spool_stall: needs root (a SCHED_FIFO reader)\n");
    return 77;
  }
  const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  std::vector<pid_t> busy;
  for (long i = 0; i < cpus * per_cpu; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {  // spins until the run's end (SIGALRM ends it), not until the reader's
      alarm(static_cast<unsigned>(seconds));
      for (;;) asm volatile("" ::: "memory");
    }
    busy.push_back(pid);
  }

  fc::capture::Spool spool;  // fetchcostd's size
  std::atomic<bool> stop{false};
  std::uint64_t taken = 0;
  // Steered as fetchcostd steers its drain, at its default marks (capture.drain_yields).
  fc::capture::DrainSteering steering{fc::capture::Options{}};
  std::atomic<bool> drain_ready{false};
  std::thread drain([&] {
    if (const int err = steering.yield_from_here(monotonic_ns()); err != 0)
      std::fprintf(stderr, "bench_spool_stall: the drain cannot yield (errno %d)\n", err);
    drain_ready = true;
    while (!stop.load()) {
      steering.set_away_since(0);
      pollfd wake{spool.wake_fd(), POLLIN, 0};
      ::poll(&wake, 1, 10);
      steering.set_away_since(monotonic_ns());
      taken += spool.take([](const void*, std::size_t) {});
      // The decoder's own allocations, some large enough to be mmap'd.
      static unsigned k = 0;
      std::vector<void*> blocks;
      for (int i = 0; i < 16; ++i) {
        const std::size_t n = ++k % 7 == 0 ? (300u << 10) : 4096u * (k % 13 + 1);
        auto* b = static_cast<char*>(std::malloc(n));
        b[0] = b[n - 1] = 1;
        blocks.push_back(b);
      }
      for (void* b : blocks) std::free(b);
    }
  });

  std::uint64_t passes = 0, longest = 0, pushed = 0, full_waits = 0;
  while (!drain_ready) std::this_thread::yield();
  std::array<std::uint64_t, 6> by_decade{};  // < 0.1 ms, < 1 ms, < 10 ms, < 100 ms, < 1 s, more
  std::thread reader([&] {
    sched_param p{};
    p.sched_priority = 1;
    if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) != 0)
      std::fprintf(stderr, "bench_spool_stall: the reader is not real-time\n");
    const char record[600] = {};
    const std::uint64_t end = monotonic_ns() + std::uint64_t(seconds) * 1'000'000'000;
    while (monotonic_ns() < end) {
      if (spool.full()) {  // as fetchcostd's reader: the rings hold what comes meanwhile
        steering.steer(spool.held_bytes(), monotonic_ns());
        ++full_waits;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      const std::uint64_t start = monotonic_ns();
      for (int i = 0; i < 100; ++i) spool.push(record, sizeof record);
      spool.publish();
      pushed += 100;
      const std::uint64_t took = monotonic_ns() - start;
      longest = std::max(longest, took);
      std::size_t decade = 0;
      for (std::uint64_t t = took / 100'000; t > 0 && decade + 1 < by_decade.size(); t /= 10)
        ++decade;
      ++by_decade[decade];
      ++passes;
      steering.steer(spool.held_bytes(), monotonic_ns());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop = true;
  });
  reader.join();
  for (pid_t pid : busy) kill(pid, SIGKILL);  // before the join: they starve the drain
  for (pid_t pid : busy) waitpid(pid, nullptr, 0);
  drain.join();

  std::printf("spool stall: %d s, %ld CPUs, %d busy processes per CPU\n", seconds, cpus, per_cpu);
  std::printf("reader passes %lu (records %lu, the drain took %lu), longest %.3f ms\n",
              (unsigned long)passes, (unsigned long)pushed, (unsigned long)taken, longest / 1e6);
  std::printf("drain promoted %lu times; 1 ms waits with the spool full (64 MiB behind) %lu\n",
              (unsigned long)steering.promotions(), (unsigned long)full_waits);
  std::printf("passes <0.1 ms %lu, <1 ms %lu, <10 ms %lu, <100 ms %lu, <1 s %lu, >=1 s %lu\n",
              (unsigned long)by_decade[0], (unsigned long)by_decade[1], (unsigned long)by_decade[2],
              (unsigned long)by_decade[3], (unsigned long)by_decade[4],
              (unsigned long)by_decade[5]);
  return 0;
}
