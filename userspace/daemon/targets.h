// Finding the processes to watch: by PID or by a substring of the command line (/proc scan).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace fc::daemon {

// PIDs whose /proc/PID/cmdline (arguments joined by spaces) contains `needle`, excluding self.
std::vector<pid_t> find_processes_by_cmdline(const std::string& needle);
bool process_alive(pid_t pid);

}  // namespace fc::daemon
