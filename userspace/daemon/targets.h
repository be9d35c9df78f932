// Finding the processes to watch: by PID or by a substring of the command line (/proc scan).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace fc::daemon {

// The arguments of a process (/proc/PID/cmdline); none when it cannot be read (it exited).
std::vector<std::string> command_line(pid_t pid);
// PIDs whose /proc/PID/cmdline (arguments joined by spaces) contains `needle`, excluding self.
std::vector<pid_t> find_processes_by_cmdline(const std::string& needle);
bool process_alive(pid_t pid);

}  // namespace fc::daemon

namespace fc::daemon {

// The cgroup v2 path of a process ("/system.slice/kafka.service"), from /proc/PID/cgroup.
std::string cgroup_of(pid_t pid);
// PIDs in cgroup `path` or below it. `path` is either relative to the cgroup v2 root
// ("/kubepods/pod123") or a full path under /sys/fs/cgroup (or /sys/fs/cgroup/unified).
std::vector<pid_t> find_processes_by_cgroup(const std::string& path);

}  // namespace fc::daemon
