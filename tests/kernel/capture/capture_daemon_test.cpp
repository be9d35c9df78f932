// Kernel test of fetchcostd's target discovery: a process matched by its command line is watched,
// and when it exits and a new one (new PID) starts, the new one is watched too, without
// restarting fetchcostd; the same by cgroup v2 path. fetchcostd's own --print-events output (never
// payload) and --status are the observations.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include "testing.h"

namespace {

// A Python workload: waits until fetchcostd has had time to rescan, then writes 100 bytes on a
// loopback TCP connection and reads them back. The marker sits in its command line.
const char* kWorkload =
    "import socket,sys,time\n"
    "time.sleep(2.5)\n"
    "l=socket.socket(); l.bind(('127.0.0.1',0)); l.listen()\n"
    "c=socket.socket(); c.connect(l.getsockname()); s,_=l.accept()\n"
    "c.sendall(b'x'*100); n=0\n"
    "while n<100: n+=len(s.recv(100))\n"
    "time.sleep(0.3)\n";

pid_t spawn_workload(const std::string& marker, const std::string& cgroup_dir) {
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    if (!cgroup_dir.empty()) {
      std::ofstream procs(cgroup_dir + "/cgroup.procs");
      procs << 0 << std::flush;  // move myself
      if (!procs) _exit(3);
    }
    execl("/usr/bin/python3", "python3", "-c", kWorkload, marker.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

struct Daemon {
  pid_t pid = -1;
  std::string out;
  Daemon(const std::vector<std::string>& args, const std::string& out_path) : out(out_path) {
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv;
      argv.push_back(const_cast<char*>(FETCHCOSTD));
      for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(FETCHCOSTD, argv.data());
      _exit(127);
    }
  }
  std::string wait_output() {
    int status = 0;
    waitpid(pid, &status, 0);
    std::ifstream in(out);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

// Field N of /proc/PID/task/TID/stat (counted from 1; those after the parenthesised name).
int thread_stat_field(pid_t pid, const std::string& tid, int n) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + tid + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= n && rest >> field; ++i) {
  }
  return std::stoi(field);
}
int thread_nice(pid_t pid, const std::string& tid) {
  return thread_stat_field(pid, tid, 19);
}
int thread_policy(pid_t pid, const std::string& tid) {  // 0 OTHER, 1 FIFO, 5 IDLE
  return thread_stat_field(pid, tid, 41);
}

std::string thread_comm(pid_t pid, const std::string& tid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + tid + "/comm");
  std::string comm;
  std::getline(in, comm);
  return comm;
}

bool wait_for(const std::string& path, const std::string& needle, int ms) {
  for (int i = 0; i < ms / 20; ++i) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str().find(needle) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// `drain_yields`: fetchcostd's default (capture.drain_yields), else run with --no-drain-yield.
void check_restart(const std::vector<std::string>& selector, const std::string& marker,
                   const std::string& cgroup_dir, bool drain_yields) {
  const std::string out = "/tmp/fc-daemon-test-" + std::to_string(getpid()) + ".log";
  std::vector<std::string> args = selector;
  if (!drain_yields) args.push_back("--no-drain-yield");
  for (const char* a : {"--print-events", "--status", "--duration", "14", "--drain-nice", "-5"})
    args.push_back(a);
  Daemon d(args, out);
  REQUIRE(wait_for(out, "capabilities now", 10000));
  // The ring-buffer drain (the main thread) runs at --drain-nice, the other threads (HTTP,
  // ledger saver) at the priority fetchcostd started with. A yielding drain is at SCHED_IDLE
  // from its first wait for records on (with nothing to decode it never falls behind).
  CHECK(thread_nice(d.pid, std::to_string(d.pid)) == -5);
  const int drain_policy = drain_yields ? SCHED_IDLE : SCHED_OTHER;
  for (int i = 0; i < 100 && thread_policy(d.pid, std::to_string(d.pid)) != drain_policy; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(thread_policy(d.pid, std::to_string(d.pid)) == drain_policy);
  int others = 0, readers = 0;
  for (const auto& t :
       std::filesystem::directory_iterator("/proc/" + std::to_string(d.pid) + "/task")) {
    if (t.path().filename() == std::to_string(d.pid)) continue;
    ++others;
    CHECK(thread_nice(d.pid, t.path().filename()) == getpriority(PRIO_PROCESS, 0));
    // The ring reader alone runs at real-time priority (capture.realtime_reader).
    const bool reader = thread_comm(d.pid, t.path().filename()) == "fc-ring-reader";
    readers += reader;
    CHECK(thread_policy(d.pid, t.path().filename()) == (reader ? SCHED_FIFO : SCHED_OTHER));
  }
  CHECK(others >= 2);
  CHECK(readers == 1);
  pid_t first = spawn_workload(marker, cgroup_dir);
  int status = 0;
  REQUIRE(waitpid(first, &status, 0) == first);
  CHECK(WEXITSTATUS(status) == 0);
  pid_t second = spawn_workload(marker, cgroup_dir);
  REQUIRE(waitpid(second, &status, 0) == second);
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(first != second);
  const std::string log = d.wait_output();
  for (pid_t p : {first, second}) {
    INFO("pid " << p);
    CHECK(log.find("watching pid " + std::to_string(p) + " ") != std::string::npos);
    CHECK(log.find("pid " + std::to_string(p) + " exited") != std::string::npos);
    // Its 100-byte write and read were captured.
    CHECK(log.find("data pid=" + std::to_string(p) + " ") != std::string::npos);
    CHECK(log.find("connect pid=" + std::to_string(p) + " ") != std::string::npos);
  }
  CHECK(log.find("status: variant=") != std::string::npos);
  std::filesystem::remove(out);
}

}  // namespace

TEST_CASE("fetchcostd given its own pid exits at once with a message") {
  const std::string out_path = "/tmp/fc-daemon-own-pid.log";
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {  // after exec this process is fetchcostd, with this pid
    int fd = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 1);
    dup2(fd, 2);
    const std::string own = std::to_string(getpid());
    execl(FETCHCOSTD, FETCHCOSTD, "--pid", own.c_str(), "--listen", "127.0.0.1:0",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  bool exited = false;
  for (int i = 0; i < 100 && !exited; ++i) {  // 5 s
    exited = waitpid(pid, &status, WNOHANG) == pid;
    if (!exited) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!exited) {  // still running: that is the failure
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
    FAIL("fetchcostd kept running with its own pid as the target");
  }
  std::ifstream in(out_path);
  std::stringstream log;
  log << in.rdbuf();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 2);
  CHECK(log.str().find("pid " + std::to_string(pid) + " is fetchcostd itself") !=
        std::string::npos);
  std::filesystem::remove(out_path);
}

TEST_CASE("fetchcostd picks up a restarted target (new PID) by command line") {
  fc::testing::require_root("running fetchcostd");
  const std::string marker = "fc-restart-marker-" + std::to_string(getpid());
  check_restart({"--match", marker}, marker, "", true);
}

TEST_CASE("fetchcostd picks up a restarted target by cgroup v2 path") {
  fc::testing::require_root("running fetchcostd and creating a cgroup");
  std::string root = "/sys/fs/cgroup";
  if (std::filesystem::exists("/sys/fs/cgroup/unified/cgroup.procs"))
    root = "/sys/fs/cgroup/unified";
  REQUIRE_MESSAGE(std::filesystem::exists(root + "/cgroup.procs"),
                  "no cgroup v2 hierarchy mounted");
  const std::string name = "fc-kernel-test-" + std::to_string(getpid());
  const std::string dir = root + "/" + name;
  REQUIRE(mkdir(dir.c_str(), 0755) == 0);
  check_restart({"--cgroup", "/" + name}, "unused-marker", dir, false);
  rmdir(dir.c_str());
}

TEST_CASE("a watched process's number, taken at once by another process, is not watched") {
  fc::testing::require_root("running fetchcostd and choosing the next process number");
  const std::string marker = "fc-reuse-marker-" + std::to_string(getpid());
  const std::string out = "/tmp/fc-daemon-reuse-" + std::to_string(getpid()) + ".log";
  Daemon d({"--match", marker, "--print-events", "--duration", "10"}, out);
  REQUIRE(wait_for(out, "capabilities now", 10000));
  const pid_t first = fork();
  REQUIRE(first >= 0);
  if (first == 0) {
    execl("/usr/bin/python3", "python3", "-c", "import time; time.sleep(30)", marker.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  REQUIRE(wait_for(out, "watching pid " + std::to_string(first) + " ", 5000));
  kill(first, SIGKILL);
  int status = 0;
  REQUIRE(waitpid(first, &status, 0) == first);
  // Its number goes to the next process forked here (the kernel hands out ns_last_pid + 1),
  // which runs the loopback workload without the marker: within the second fetchcostd looks
  // again, so the number is alive when it does.
  const pid_t second = fc::testing::fork_with_number(first, [] {
    execl("/usr/bin/python3", "python3", "-c", kWorkload, static_cast<char*>(nullptr));
  });
  REQUIRE(second == first);
  REQUIRE(waitpid(second, &status, 0) == second);
  CHECK(WEXITSTATUS(status) == 0);
  const std::string log = d.wait_output();
  const std::string pid = std::to_string(first);
  CHECK(log.find("pid " + pid + " exited (its number now another process's)") != std::string::npos);
  // The other process's loopback connection and its 100 bytes were not captured.
  CHECK(log.find("connect pid=" + pid + " ") == std::string::npos);
  CHECK(log.find("data pid=" + pid + " ") == std::string::npos);
  std::filesystem::remove(out);
}
