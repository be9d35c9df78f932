#include <doctest/doctest.h>

#include "daemon/budget.h"

using fc::daemon::BudgetConfig;
using fc::daemon::BudgetTracker;

TEST_CASE("a budget's rate is the cost over the trailing window, scaled to an hour") {
  BudgetConfig c;
  c.window_seconds = 60;
  c.repeat_seconds = 600;
  c.limits = {{"scanner", "", 1.0}, {"", "analytics", 10.0}};
  BudgetTracker t(c);
  std::map<std::string, double> clients{{"scanner", 0}}, groups{{"analytics", 0}};
  CHECK(t.update(0, clients, groups).empty());
  // scanner: 0.01 per 10 s = 3.6/h > 1/h: exceeded, action fires once
  clients["scanner"] = 0.01;
  groups["analytics"] = 0.001;
  auto fired = t.update(10, clients, groups);
  REQUIRE(fired.size() == 1);
  CHECK(fired[0].limit.client_id == "scanner");
  CHECK(fired[0].cost_per_hour == doctest::Approx(3.6));
  CHECK(t.states()[0].exceeded);
  CHECK_FALSE(t.states()[1].exceeded);  // 0.36/h < 10/h
  // still exceeded: no new action before repeat_seconds
  clients["scanner"] = 0.02;
  CHECK(t.update(20, clients, groups).empty());
  CHECK(t.states()[0].exceeded);
  // the cost stops growing: after the window the rate falls to 0
  for (double now = 30; now <= 100; now += 10) t.update(now, clients, groups);
  CHECK(t.states()[0].cost_per_hour == doctest::Approx(0.0));
  CHECK_FALSE(t.states()[0].exceeded);
  // exceeded again, but within repeat_seconds of the last action: flagged, not re-run
  clients["scanner"] = 1.0;
  CHECK(t.update(110, clients, groups).empty());
  CHECK(t.states()[0].exceeded);
  clients["scanner"] = 2.0;
  CHECK(t.update(620, clients, groups).size() == 1);  // repeat_seconds later: runs again
}

TEST_CASE("a counter that went down restarts the window instead of a negative rate") {
  BudgetConfig c;
  c.limits = {{"x", "", 1.0}};
  BudgetTracker t(c);
  t.update(0, {{"x", 5.0}}, {});
  t.update(1, {{"x", 0.0}}, {});
  CHECK(t.states()[0].cost_per_hour == 0);
  CHECK_FALSE(t.states()[0].exceeded);
}
