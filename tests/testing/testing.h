// Shared test helpers. require_root(): kernel and e2e tests need root; outside CI a missing
// privilege skips the test (exit 77, shown as skipped by ctest), under CI=true it fails.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

namespace fc::testing {

bool running_in_ci();
// Returns normally when running as root; otherwise exits 77 (skip) or, under CI=true, 1.
void require_root(const std::string& why);

// Forks a child with process number `number` (taken again after its process was reaped), which
// runs `child` and exits. Root: the kernel hands the next process ns_last_pid + 1, and another
// process may take that first, so up to 20 forks are tried. Returns the child's pid, or -1.
pid_t fork_with_number(pid_t number, const std::function<void()>& child);

}  // namespace fc::testing
