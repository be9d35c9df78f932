#define DOCTEST_CONFIG_IMPLEMENT
#include "testing.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

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

}  // namespace fc::testing

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  return context.run();
}
