#include <doctest/doctest.h>

#include "daemon/drain_priority.h"

using fc::daemon::DrainPriority;

namespace {
constexpr std::uint64_t kMs = 1'000'000;
constexpr std::size_t kRings = 8u << 20;  // two CPUs' 4 MiB rings
}  // namespace

TEST_CASE("the drain is boosted when a pass finds a quarter of the rings waiting") {
  DrainPriority p(0, -10, kRings);
  std::uint64_t t = 1000 * kMs;
  CHECK(p.observe(t, 512u << 10, false) == 0);  // a wakeup's worth: normal
  CHECK(p.observe(t += 10 * kMs, kRings / 4 - 1, false) == 0);
  CHECK_FALSE(p.boosted());
  CHECK(p.observe(t += 10 * kMs, kRings / 4, false) == -10);
  CHECK(p.boosted());
  CHECK(p.boosts() == 1);
  // Another full pass while boosted is the same boost, not a new one.
  CHECK(p.observe(t += 10 * kMs, kRings / 2, false) == -10);
  CHECK(p.boosts() == 1);
}

TEST_CASE("the boost ends only after two seconds of nearly empty rings") {
  DrainPriority p(0, -10, kRings);
  std::uint64_t t = 1000 * kMs;
  p.observe(t, kRings, false);
  REQUIRE(p.boosted());
  const std::uint64_t boosted_at = t;
  // Calm passes for just under 2 s: still boosted.
  for (int i = 0; i < 20; ++i) CHECK(p.observe(t += 99 * kMs, 1024, false) == -10);
  // A pass with a backlog (1/16 of the rings), then one still behind, restart the calm period.
  CHECK(p.observe(t += 100 * kMs, kRings / 16, false) == -10);
  for (int i = 0; i < 19; ++i) p.observe(t += 100 * kMs, 1024, false);
  CHECK(p.observe(t += 100 * kMs, 0, true) == -10);
  for (int i = 0; i < 20; ++i) p.observe(t += 100 * kMs, 0, false);
  CHECK(p.boosted());  // the calm began at the first of those 20 passes: 1.9 s ago
  CHECK(p.observe(t += 100 * kMs, 0, false) == 0);
  CHECK_FALSE(p.boosted());
  CHECK(p.boosted_ns() == t - boosted_at);
  // Boosted again by the next backlog: counted.
  CHECK(p.observe(t += kMs, kRings, false) == -10);
  CHECK(p.boosts() == 2);
}

TEST_CASE("no boost when it is not above the base priority, or after it was refused") {
  DrainPriority same(-5, -5, kRings);
  CHECK(same.observe(1000 * kMs, kRings, true) == -5);
  CHECK_FALSE(same.boosted());
  DrainPriority lower(0, 5, kRings);
  CHECK(lower.observe(1000 * kMs, kRings, false) == 0);

  DrainPriority refused(0, -10, kRings);
  CHECK(refused.observe(1000 * kMs, kRings, false) == -10);
  refused.disable();
  CHECK(refused.nice() == 0);
  CHECK(refused.observe(1001 * kMs, kRings, false) == 0);
  CHECK(refused.boosts() == 1);
}
