#include <doctest/doctest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "base/result.h"
#include "daemon/targets.h"
#include "testing.h"

namespace {

// One sweep of every process (the finder's first call): those whose command line holds `needle`.
std::vector<pid_t> sweep_for(const std::string& needle) {
  fc::daemon::ProcessFinder finder(
      [&](pid_t pid) { return fc::daemon::command_line_contains(pid, needle); },
      std::chrono::minutes(1));
  return finder.find(std::chrono::steady_clock::now(), std::nullopt);
}

}  // namespace

TEST_CASE("a process is found by a substring of its command line, and only while it lives") {
  const std::string marker = "fetchcost-unit-marker-" + std::to_string(getpid());
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // argv[0] carries the marker, as a JVM's main class name does in its command line.
    execlp("sleep", marker.c_str(), "30", static_cast<char*>(nullptr));
    _exit(127);
  }
  std::vector<pid_t> found;
  for (int i = 0; i < 100 && found.empty(); ++i) {
    found = sweep_for(marker);
    if (found.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(found == std::vector<pid_t>{child});
  CHECK(fc::daemon::process_start_time(child).has_value());
  CHECK(sweep_for(marker + "-absent").empty());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  CHECK_FALSE(fc::daemon::process_start_time(child).has_value());
  CHECK(sweep_for(marker).empty());
}

namespace {

// A child that waits on a pipe (its command line is this test's, forked), then execs `sleep`
// with `marker` as argv[0], as a launch script execs the broker under its own pid.
struct LateExec {
  pid_t pid = -1;
  int go = -1;
  explicit LateExec(const std::string& marker) {
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      close(fds[1]);
      char byte;
      if (read(fds[0], &byte, 1) != 1) _exit(3);
      execlp("sleep", marker.c_str(), "30", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[0]);
    go = fds[1];
  }
  // Returns once the exec has happened.
  void exec(const std::string& marker) {
    REQUIRE(write(go, "g", 1) == 1);
    for (int i = 0; i < 200 && !fc::daemon::command_line_contains(pid, marker); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(fc::daemon::command_line_contains(pid, marker));
  }
  ~LateExec() {
    close(go);
    if (pid <= 0) return;  // reaped by the test (kill(-1) would signal every process)
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
};

}  // namespace

TEST_CASE("the finder reads every process only on a sweep; between them, those that exec'd") {
  const std::string marker = "fetchcost-finder-marker-" + std::to_string(getpid());
  std::vector<pid_t> asked;
  fc::daemon::ProcessFinder finder(
      [&](pid_t pid) {
        asked.push_back(pid);
        return fc::daemon::command_line_contains(pid, marker);
      },
      std::chrono::minutes(1));
  const auto t0 = std::chrono::steady_clock::now();
  LateExec early(marker);
  early.exec(marker);
  LateExec late(marker);

  // The first call sweeps: every process but this one is read, and the match is found.
  auto found = finder.find(t0, std::vector<pid_t>{});
  CHECK(found == std::vector<pid_t>{early.pid});
  CHECK(finder.sweeps() == 1);
  CHECK(asked.size() > 2);
  CHECK(std::count(asked.begin(), asked.end(), getpid()) == 0);

  // Between sweeps nothing is read but what exec'd: `late` runs the marked program now, and is
  // found only once it is named as having exec'd.
  late.exec(marker);
  asked.clear();
  found = finder.find(t0 + std::chrono::seconds(1), std::vector<pid_t>{});
  CHECK(asked.empty());
  CHECK(found == std::vector<pid_t>{early.pid});
  found = finder.find(t0 + std::chrono::seconds(2), std::vector<pid_t>{late.pid, getpid()});
  CHECK(asked == std::vector<pid_t>{late.pid});  // never itself
  CHECK(found.size() == 2);
  CHECK(std::count(found.begin(), found.end(), late.pid) == 1);

  // One that exits is dropped without a read.
  kill(early.pid, SIGKILL);
  waitpid(early.pid, nullptr, 0);
  asked.clear();
  found = finder.find(t0 + std::chrono::seconds(3), std::vector<pid_t>{});
  CHECK(found == std::vector<pid_t>{late.pid});
  CHECK(asked.empty());
  CHECK(finder.sweeps() == 1);

  // A sweep a minute on, or whenever the execs are unknown.
  found = finder.find(t0 + std::chrono::seconds(61), std::vector<pid_t>{});
  CHECK(finder.sweeps() == 2);
  found = finder.find(t0 + std::chrono::seconds(62), std::nullopt);
  CHECK(finder.sweeps() == 3);
  CHECK(found == std::vector<pid_t>{late.pid});
}

TEST_CASE("one named as exec'd that no longer matches is dropped; one not named waits a sweep") {
  LateExec a("unused"), b("unused");  // they wait: what matches is the test's to say
  std::set<pid_t> matching{a.pid};
  fc::daemon::ProcessFinder finder([&](pid_t pid) { return matching.count(pid) > 0; },
                                   std::chrono::minutes(1));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(finder.find(t0, std::nullopt) == std::vector<pid_t>{a.pid});
  matching = {b.pid};  // a ran another program, b the one searched for
  CHECK(finder.find(t0 + std::chrono::seconds(1), std::vector<pid_t>{}) ==
        std::vector<pid_t>{a.pid});
  CHECK(finder.find(t0 + std::chrono::seconds(2), std::vector<pid_t>{a.pid}).empty());
  CHECK(finder.find(t0 + std::chrono::seconds(60), std::vector<pid_t>{}) ==
        std::vector<pid_t>{b.pid});
}

TEST_CASE("a process's start time is read past a command name of spaces and parentheses") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    close(fds[1]);
    char byte;
    if (read(fds[0], &byte, 1) != 1) _exit(3);
    prctl(PR_SET_NAME, "x) S 1 2 3 4");  // what a parser stopping at the first ')' misreads
    pause();
    _exit(0);
  }
  close(fds[0]);
  const auto before = fc::daemon::process_start_time(child);
  REQUIRE(before.has_value());
  const auto own = fc::daemon::process_start_time(getpid());
  REQUIRE(own.has_value());
  CHECK(*before >= *own);  // forked after this process started
  REQUIRE(write(fds[1], "r", 1) == 1);
  for (int i = 0; i < 200; ++i) {
    std::ifstream comm("/proc/" + std::to_string(child) + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name == "x) S 1 2 3 4") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(fc::daemon::process_start_time(child) == before);  // renamed, the same process
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  close(fds[1]);
  CHECK_FALSE(fc::daemon::process_start_time(child).has_value());
}

TEST_CASE("a found process's number, taken by a fork that runs no program, is dropped") {
  // The kernel gives the next process ns_last_pid + 1: choosing it takes root.
  if (geteuid() != 0) {
    REQUIRE_FALSE_MESSAGE(fc::testing::running_in_ci(), "needs root to set ns_last_pid");
    MESSAGE("skipped: needs root to set ns_last_pid");
    return;
  }
  LateExec found("unused");
  std::set<pid_t> matching{found.pid};
  fc::daemon::ProcessFinder finder([&](pid_t pid) { return matching.count(pid) > 0; },
                                   std::chrono::minutes(1));
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(finder.find(t0, std::nullopt) == std::vector<pid_t>{found.pid});
  const pid_t number = found.pid;
  // Start times count clock ticks (10 ms): the one before must not have started in the tick
  // its number is taken again (a broker never lives that short).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(number, SIGKILL);
  waitpid(number, nullptr, 0);
  found.pid = -1;
  const pid_t other = fc::testing::fork_with_number(number, [] { pause(); });  // no exec
  REQUIRE(other == number);
  CHECK(finder.find(t0 + std::chrono::seconds(1), std::vector<pid_t>{}).empty());
  kill(other, SIGKILL);
  waitpid(other, nullptr, 0);
}

TEST_CASE("Result carries a value or an error message") {
  fc::Result<int> good = 42;
  fc::Result<int> bad = fc::make_error("do this");
  CHECK(good.ok());
  CHECK(*good == 42);
  CHECK_FALSE(bad.ok());
  CHECK(bad.error().message == "do this");
  fc::Result<void> fine;
  CHECK(fine.ok());
}
