#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "base/result.h"
#include "daemon/targets.h"

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
    found = fc::daemon::find_processes_by_cmdline(marker);
    if (found.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(found == std::vector<pid_t>{child});
  CHECK(fc::daemon::process_alive(child));
  CHECK(fc::daemon::find_processes_by_cmdline(marker + "-absent").empty());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  CHECK_FALSE(fc::daemon::process_alive(child));
  CHECK(fc::daemon::find_processes_by_cmdline(marker).empty());
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
