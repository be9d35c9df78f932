// Finding the processes to watch: by PID, by a substring of the command line or by cgroup
// (/proc), once a second without reading every process each time (ProcessFinder).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fc::daemon {

// The arguments of a process (/proc/PID/cmdline); none when it cannot be read (it exited).
std::vector<std::string> command_line(pid_t pid);
// Whether a process's command line (its arguments joined by spaces) contains `needle`.
bool command_line_contains(pid_t pid, std::string_view needle);
// When a process started (/proc/PID/stat, clock ticks since boot); none when it exited. A
// process number is reused once its process is gone: the same number with another start time
// is another process (one started in the same 10 ms tick as a process that lived shorter would
// pass for it).
std::optional<std::uint64_t> process_start_time(pid_t pid);

// The cgroup v2 path of a process ("/system.slice/kafka.service"), from /proc/PID/cgroup.
std::string cgroup_of(pid_t pid);
// A cgroup path as /proc/PID/cgroup names it: `path` is either relative to the cgroup v2 root
// ("/kubepods/pod123") or a full path under /sys/fs/cgroup (or /sys/fs/cgroup/unified).
std::string cgroup_relative(const std::string& path);
// Whether a process is in cgroup `relative` (cgroup_relative) or below it.
bool in_cgroup(pid_t pid, const std::string& relative);

// Which processes to watch, asked once a second. Reading every process's /proc entry took 36 ms
// on a node of 2,000 processes, each second, on the loop that reads the rings; so a sweep reads
// them all only on the first call, every `sweep_interval` and whenever the caller cannot say
// which processes ran a new program. Between sweeps only the processes that exec'd since the
// last call are read (a launch script execs the broker under its own pid, and a new process
// runs its program the same way), and those found before are kept while they live (the same
// number with another start time is another process). A process forked from a match that never
// execs is found at the next sweep.
class ProcessFinder {
 public:
  // Whether a process is one to watch (reads its /proc entry; false when it exited).
  using Matches = std::function<bool(pid_t)>;
  ProcessFinder(Matches matches, std::chrono::steady_clock::duration sweep_interval);
  // The processes to watch now. `execs`: those that exec'd since the last call (the capture's
  // exec hook); nullopt when unknown, which sweeps.
  std::vector<pid_t> find(std::chrono::steady_clock::time_point now,
                          const std::optional<std::vector<pid_t>>& execs);
  // The start time the last call read for a process it returned (process_start_time); nullopt
  // for one it did not return.
  std::optional<std::uint64_t> start_time(pid_t pid) const {
    const auto found = found_.find(pid);
    if (found == found_.end()) return std::nullopt;
    return found->second;
  }
  // Processes read in all, and sweeps among the calls.
  std::uint64_t processes_read() const { return reads_; }
  std::uint64_t sweeps() const { return sweeps_; }

 private:
  Matches matches_;
  std::chrono::steady_clock::duration sweep_interval_;
  std::optional<std::chrono::steady_clock::time_point> last_sweep_;
  std::map<pid_t, std::uint64_t> found_;  // with each one's start time
  std::uint64_t reads_ = 0;
  std::uint64_t sweeps_ = 0;
};

}  // namespace fc::daemon
