#define DOCTEST_CONFIG_IMPLEMENT
#include "testing.h"

#include <doctest/doctest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace fc::testing {

bool running_in_ci() {
  const char* ci = std::getenv("CI");
  return ci && (std::strcmp(ci, "true") == 0 || std::strcmp(ci, "1") == 0);
}

void require_root(const std::string& why) {
  if (geteuid() == 0) return;
  if (running_in_ci()) {
    std::fprintf(stderr, "FAIL: %s needs root, and CI=true does not allow skipping\n", why.c_str());
    std::exit(1);
  }
  std::fprintf(stderr, "SKIP: %s needs root\n", why.c_str());
  std::exit(77);
}

pid_t fork_with_number(pid_t number, const std::function<void()>& child) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    {
      std::ofstream last("/proc/sys/kernel/ns_last_pid");
      last << number - 1 << std::flush;
      if (!last) return -1;
    }
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
      if (getpid() == number) child();
      _exit(0);  // another process took the number first: the parent tries again
    }
    if (pid == number) return pid;
    waitpid(pid, nullptr, 0);
  }
  return -1;
}

}  // namespace fc::testing

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  return context.run();
}
