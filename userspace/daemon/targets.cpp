#include "daemon/targets.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace fc::daemon {
namespace {

// /proc/PID/cmdline, raw (arguments ending in NULs); empty when unreadable. Read with plain
// calls: a JVM's runs to tens of KiB (its class path), and a sweep reads every process's.
std::string read_command_line(pid_t pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/cmdline";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::string raw;
  char buffer[16384];
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n <= 0) break;
    raw.append(buffer, static_cast<std::size_t>(n));
  }
  close(fd);
  return raw;
}

// The numeric entries of /proc but this process's own.
std::vector<pid_t> list_processes() {
  std::vector<pid_t> pids;
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return pids;
  const pid_t self = getpid();
  while (const dirent* entry = readdir(dir)) {
    const char* name = entry->d_name;
    if (*name < '1' || *name > '9') continue;
    char* end = nullptr;
    const long pid = std::strtol(name, &end, 10);
    if (*end == '\0' && pid != self) pids.push_back(static_cast<pid_t>(pid));
  }
  closedir(dir);
  return pids;
}

}  // namespace

std::vector<std::string> command_line(pid_t pid) {
  const std::string raw = read_command_line(pid);
  std::vector<std::string> args;
  for (std::size_t start = 0; start < raw.size();) {
    const std::size_t end = raw.find('\0', start);
    args.push_back(raw.substr(start, end == std::string::npos ? std::string::npos : end - start));
    start = end == std::string::npos ? raw.size() : end + 1;
  }
  return args;
}

bool command_line_contains(pid_t pid, std::string_view needle) {
  std::string joined = read_command_line(pid);
  while (!joined.empty() && joined.back() == '\0') joined.pop_back();
  std::replace(joined.begin(), joined.end(), '\0', ' ');
  return !joined.empty() && joined.find(needle) != std::string::npos;
}

std::optional<std::uint64_t> process_start_time(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return std::nullopt;
  // The fields after the command name, which may hold spaces and parentheses: from the last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int n = 3; n <= 22; ++n)  // field 22: starttime
    if (!(rest >> field)) return std::nullopt;
  std::uint64_t ticks = 0;
  const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), ticks);
  if (error != std::errc() || end != field.data() + field.size()) return std::nullopt;
  return ticks;
}

std::string cgroup_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);  // the cgroup v2 entry
  }
  return {};
}

std::string cgroup_relative(const std::string& path) {
  std::string want = path;
  // A full path: strip the cgroup v2 mount point (hybrid systems mount it at .../unified).
  for (const std::string root : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    if (want.rfind(root, 0) == 0 && (want.size() == root.size() || want[root.size()] == '/')) {
      want = want.substr(root.size());
      break;
    }
  }
  while (want.size() > 1 && want.back() == '/') want.pop_back();
  if (want.empty()) want = "/";
  return want;
}

bool in_cgroup(pid_t pid, const std::string& relative) {
  const std::string cg = cgroup_of(pid);
  if (cg.empty()) return false;
  return relative == "/" || cg == relative ||
         (cg.size() > relative.size() && cg.rfind(relative, 0) == 0 && cg[relative.size()] == '/');
}

ProcessFinder::ProcessFinder(Matches matches, std::chrono::steady_clock::duration sweep_interval)
    : matches_(std::move(matches)), sweep_interval_(sweep_interval) {}

std::vector<pid_t> ProcessFinder::find(std::chrono::steady_clock::time_point now,
                                       const std::optional<std::vector<pid_t>>& execs) {
  const auto keep = [this](pid_t pid) {
    if (const auto started = process_start_time(pid)) found_[pid] = *started;
  };
  if (!execs || !last_sweep_ || now - *last_sweep_ >= sweep_interval_) {
    found_.clear();
    for (pid_t pid : list_processes()) {
      ++reads_;
      if (matches_(pid)) keep(pid);
    }
    last_sweep_ = now;
    ++sweeps_;
  } else {
    // Gone, or its number taken by a process that has not run a program of its own (a fork).
    std::erase_if(
        found_, [](const auto& entry) { return process_start_time(entry.first) != entry.second; });
    const pid_t self = getpid();
    for (pid_t pid : *execs) {
      if (pid == self) continue;
      ++reads_;
      if (matches_(pid))
        keep(pid);
      else
        found_.erase(pid);  // it ran another program
    }
  }
  std::vector<pid_t> pids;
  pids.reserve(found_.size());
  for (const auto& entry : found_) pids.push_back(entry.first);
  return pids;
}

}  // namespace fc::daemon
