#include "daemon/targets.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace fc::daemon {

std::vector<std::string> command_line(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  const std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (std::size_t start = 0; start < raw.size();) {
    const std::size_t end = raw.find('\0', start);
    args.push_back(raw.substr(start, end == std::string::npos ? std::string::npos : end - start));
    start = end == std::string::npos ? raw.size() : end + 1;
  }
  return args;
}

std::vector<pid_t> find_processes_by_cmdline(const std::string& needle) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
    if (pid == getpid()) continue;
    std::string cmdline;
    for (const std::string& arg : command_line(pid)) cmdline += (cmdline.empty() ? "" : " ") + arg;
    if (!cmdline.empty() && cmdline.find(needle) != std::string::npos) found.push_back(pid);
  }
  return found;
}

bool process_alive(pid_t pid) {
  return kill(pid, 0) == 0 || errno == EPERM;
}

std::string cgroup_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return line.substr(3);  // the cgroup v2 entry
  }
  return {};
}

std::vector<pid_t> find_processes_by_cgroup(const std::string& path) {
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
  std::vector<pid_t> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
    if (pid == getpid()) continue;
    const std::string cg = cgroup_of(pid);
    if (cg.empty()) continue;
    const bool inside =
        want == "/" || cg == want ||
        (cg.size() > want.size() && cg.rfind(want, 0) == 0 && cg[want.size()] == '/');
    if (inside) found.push_back(pid);
  }
  return found;
}

}  // namespace fc::daemon
