// Shared test helpers. require_root(): kernel and e2e tests need root; outside CI a missing
// privilege skips the test (exit 77, shown as skipped by ctest), under CI=true it fails.
#pragma once

#include <string>

namespace fc::testing {

bool running_in_ci();
// Returns normally when running as root; otherwise exits 77 (skip) or, under CI=true, 1.
void require_root(const std::string& why);

}  // namespace fc::testing
