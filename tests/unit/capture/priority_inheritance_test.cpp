// The spool's lock lends a real-time waiter's priority to its holder: the capture's ring reader
// (SCHED_FIFO) and its drain (SCHED_IDLE while it keeps up) share it. Needs root.
#include <doctest/doctest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "capture/spool.h"
#include "testing.h"

namespace {

// The scheduling priority the kernel runs thread `tid` at now (field 18 of its stat line): 20
// for a nice-0 or SCHED_IDLE thread, -2 for SCHED_FIFO 1.
int effective_priority(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  std::getline(in, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 18 && rest >> field; ++i) {
  }
  return std::atoi(field.c_str());
}

}  // namespace

TEST_CASE("a real-time thread waiting for the spool's lock lends its priority to the holder") {
  fc::testing::require_root("SCHED_FIFO threads");
  fc::capture::PriorityInheritingMutex mutex;
  std::atomic<bool> held{false}, waiting{false};
  int idle_priority = 0, boosted_priority = 0;
  std::thread holder([&] {
    sched_param p{};
    CHECK(sched_setscheduler(0, SCHED_IDLE, &p) == 0);
    mutex.lock();
    idle_priority = effective_priority(gettid());
    held = true;
    while (!waiting) std::this_thread::yield();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    do {
      boosted_priority = effective_priority(gettid());
    } while (boosted_priority >= 0 && std::chrono::steady_clock::now() < give_up);
    mutex.unlock();
  });
  std::thread waiter([&] {
    sched_param p{};
    p.sched_priority = 1;
    CHECK(pthread_setschedparam(pthread_self(), SCHED_FIFO, &p) == 0);
    while (!held) std::this_thread::yield();
    waiting = true;
    mutex.lock();  // blocks until the holder, boosted, lets go
    mutex.unlock();
  });
  holder.join();
  waiter.join();
  CHECK(idle_priority == 20);
  CHECK(boosted_priority == -2);
}
