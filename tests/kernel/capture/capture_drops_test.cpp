// Kernel test: a deliberately tiny ring buffer under load. Every record the programs produce is
// either received or counted as dropped (received + dropped = produced, exactly), the drops are
// attributed per CPU, and nothing crashes. Produced is known from the child's own call count.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "harness.h"
#include "testing.h"

using namespace fc::capture_test;
using fc::capture::Variant;

namespace {

constexpr int kWrites = 20000;

// A loopback TCP connection (run in the child, so its calls are the target's): 0, or the
// scenario's exit code for what failed.
int open_loopback(int& client, int& server) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(listener, 1) != 0)
    return 10;
  getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, reinterpret_cast<sockaddr*>(&a), len) != 0) return 11;
  server = accept(listener, nullptr, nullptr);
  return 0;
}

// Writes kWrites 200-byte messages on a loopback connection and reads them back; reports how
// many send and receive calls moved bytes (each is exactly one record).
int load_scenario(Child& self) {
  int client = -1, server = -1;
  if (const int failed = open_loopback(client, server)) return failed;
  const std::string msg = pattern(200, 5);
  long long sends = 0, recvs = 0;
  char buf[65536];
  std::size_t pending = 0;
  for (int i = 0; i < kWrites; ++i) {
    if (write(client, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) return 12;
    ++sends;
    pending += msg.size();
    if (i % 8 == 7 || i == kWrites - 1) {
      while (pending > 0) {
        ssize_t n = read(server, buf, std::min(pending, sizeof(buf)));
        if (n <= 0) return 13;
        ++recvs;
        pending -= static_cast<std::size_t>(n);
      }
    }
  }
  self.report(sends);
  self.report(recvs);
  self.wait_parent();  // sockets stay open: no close records while the parent counts
  return 0;
}

// The send records that reached the collector: one per send call that moved bytes.
std::size_t data_sends_of(const Collector& col) {
  std::size_t sends = 0;
  for (const auto& r : col.records)
    if (r.common.kind == FC_EVENT_DATA && r.data.direction == FC_DIR_SEND) ++sends;
  return sends;
}

void run_drops(Variant variant) {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  // One page per CPU: room for a handful of records only.
  Collector col({.ring_bytes_per_cpu = 4096,
                 .default_policy = {256, 256, FC_ROLE_OTHER},
                 .variant = variant});
  Child target(load_scenario);
  REQUIRE(col.capture->add_target(target.pid()).ok());
  target.go();
  // Drain while the load runs, as fetchcostd would.
  while (!target.ready()) REQUIRE(col.capture->poll(1).ok());
  const long long sends = target.receive();
  const long long recvs = target.receive();
  col.drain(10);
  const auto status = col.capture->status();
  target.nod();
  CHECK(target.wait() == 0);

  std::size_t data = 0, conns = 0;
  for (const auto& r : col.records) {
    if (r.common.kind == FC_EVENT_DATA) ++data;
    if (r.common.kind == FC_EVENT_CONNECT && r.conn.origin != FC_ORIGIN_PROC_SCAN) ++conns;
    // Whatever arrived is intact.
    if (r.is_data) CHECK(r.payload.size() == r.data.captured);
  }
  const long long produced = sends + recvs + 2;  // + the two CONNECT records
  const std::uint64_t received = data + conns;
  MESSAGE("produced " << produced << ", received " << received << ", dropped "
                      << status.totals.drops);
  CHECK(received + status.totals.drops == static_cast<std::uint64_t>(produced));
  CHECK(status.totals.events == received);
  CHECK(status.totals.drops > 0);  // the ring really was too small
  std::uint64_t per_cpu_drops = 0;
  for (const auto& c : status.per_cpu) per_cpu_drops += c.drops;
  CHECK(per_cpu_drops == status.totals.drops);
  CHECK(status.ring_bytes_per_cpu == 4096);
}

}  // namespace

TEST_CASE("tiny ring buffer: received + dropped = produced, sock tracepoints") {
  run_drops(Variant::kSockTracepoints);
}
TEST_CASE("tiny ring buffer: received + dropped = produced, syscall tracepoints") {
  run_drops(Variant::kSyscallTracepoints);
}

namespace {

constexpr int kPacedWrites = 300;  // one every 2 ms: 0.6 s of records, far below a ring's mark

// A paced trickle of records (a broker's steady fetches, scaled down): 64-byte writes on a
// loopback connection, each read back, every 2 ms. Reports the calls that moved bytes.
int paced_scenario(Child& self) {
  int client = -1, server = -1;
  if (const int failed = open_loopback(client, server)) return failed;
  const std::string msg = pattern(64, 9);
  char buf[64];
  for (int i = 0; i < kPacedWrites; ++i) {
    if (write(client, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) return 12;
    for (std::size_t got = 0; got < sizeof(buf);) {
      const ssize_t n = read(server, buf + got, sizeof(buf) - got);
      if (n <= 0) return 13;
      got += static_cast<std::size_t>(n);
    }
    usleep(2000);
  }
  self.report(kPacedWrites);
  self.wait_parent();
  return 0;
}

// Runs the trickle with the given pass interval; returns how many of the drain's polls handed it
// records (counted here, as the drain sees them) and checks every record arrived, and that the
// reader's own count of passes agrees.
std::uint64_t passes_for_trickle(int pass_interval_ms) {
  Collector col({.ring_bytes_per_cpu = 1 << 20, .pass_interval_ms = pass_interval_ms});
  Child target(paced_scenario);
  REQUIRE(col.capture->add_target(target.pid()).ok());
  target.go();
  // As fetchcostd's drain: wait for what the reader hands over (poll's timeout is longer than
  // the reader's idle wait, so every pass here is the reader's own).
  std::uint64_t deliveries = 0;
  while (!target.ready()) {
    const auto handed = col.capture->poll(200);
    REQUIRE(handed.ok());
    if (handed.value() > 0) ++deliveries;
  }
  const long long writes = target.receive();
  const auto passes = col.capture->status().reader_passes;
  CHECK(passes >= deliveries);  // a pass may land while the drain is still busy with the last
  col.drain(3);
  target.nod();
  CHECK(target.wait() == 0);
  std::size_t sends = 0, recvs = 0;
  for (const auto& r : col.records)
    if (r.common.kind == FC_EVENT_DATA) ++(r.data.direction == FC_DIR_SEND ? sends : recvs);
  CHECK(sends == static_cast<std::size_t>(writes));
  CHECK(recvs >= static_cast<std::size_t>(writes));  // a read may return part of a message
  CHECK(col.capture->status().totals.drops == 0);
  return deliveries;
}

}  // namespace

// A pass of the drain holds a CPU for as long as it decodes what it was handed: records that
// trickle in below the rings' wakeup mark are handed over every pass_interval_ms, not in one
// batch per 100 ms (docs/performance.md: a broker or client thread woken onto that CPU waits).
TEST_CASE("records that trickle in reach the drain every pass interval, not every 100 ms") {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  const std::uint64_t short_passes = passes_for_trickle(10);
  const std::uint64_t long_passes = passes_for_trickle(100);
  MESSAGE("deliveries to the drain over 0.6 s of records: " << short_passes << " at 10 ms, "
                                                            << long_passes << " at 100 ms");
  CHECK(short_passes >= 25);  // about 60
  CHECK(long_passes <= 12);   // about 6
  CHECK(fc::capture::Capture::open({.pass_interval_ms = 0}, [](const auto&) {}).ok() == false);
}

namespace {

// The kernel's own count of IRQ-work interrupts, all CPUs (/proc/interrupts "IWI"): a forced
// ring wakeup raises one on the producing CPU, so this checks the programs' count from outside.
std::uint64_t irq_work_interrupts() {
  std::ifstream in("/proc/interrupts");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    if (name != "IWI:") continue;
    std::uint64_t sum = 0, n = 0;
    while (fields >> n) sum += n;
    return sum;
  }
  return 0;
}

}  // namespace

// Each forced wakeup of the ring reader costs the broker's thread an interrupt and a wakeup
// across CPUs (tens of us on a KVM guest, docs/performance.md "Session 28"). A reader that keeps
// up on its own passes must never be woken; one that falls behind must be, before the ring fills.
// The programs' own count of wakeups (Counters::wakeups) and the kernel's count of the
// interrupts they raise are both checked against what the load makes of each case, and every
// record must arrive in both.
TEST_CASE("the programs wake the ring reader only when a ring's unread data reaches its mark") {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  // A mark at the ring's size would leave no room for the records that arrive while the
  // reader wakes.
  auto full_mark = fc::capture::Capture::open(
      {.ring_bytes_per_cpu = 1 << 20, .wakeup_bytes = 1 << 20}, [](const auto&) {});
  REQUIRE_FALSE(full_mark.ok());
  CHECK(full_mark.error().message.find("wakeup mark") != std::string::npos);
  // Without a mark of its own, a ring gets half its size, at most 512 KiB: the default 1 MiB
  // ring is never woken for less than the 4 MiB ring before it was.
  for (const auto& [ring, mark] :
       {std::pair{1u << 20, 512u << 10}, {4u << 20, 512u << 10}, {64u << 10, 32u << 10}}) {
    auto capture = fc::capture::Capture::open({.ring_bytes_per_cpu = ring}, [](const auto&) {});
    REQUIRE(capture.ok());
    CHECK(capture.value()->status().wakeup_bytes == mark);
  }
  CHECK(fc::capture::Options{}.ring_bytes_per_cpu == 1u << 20);
  {
    // Kept up: 0.6 s of paced records, about 130 KiB in all, well past the 8 KiB mark, but the
    // reader takes them every 5 ms, about 1 KiB at a time.
    Collector col({.ring_bytes_per_cpu = 1 << 20, .wakeup_bytes = 8 << 10, .pass_interval_ms = 5});
    const std::uint64_t iwi_before = irq_work_interrupts();
    Child target(paced_scenario);
    REQUIRE(col.capture->add_target(target.pid()).ok());
    target.go();
    while (!target.ready()) REQUIRE(col.capture->poll(20).ok());
    const long long writes = target.receive();
    col.drain(3);
    target.nod();
    CHECK(target.wait() == 0);
    const auto status = col.capture->status();
    const std::uint64_t iwi = irq_work_interrupts() - iwi_before;
    MESSAGE("kept up: " << col.records.size() << " records, " << status.totals.wakeups
                        << " wakeups, " << iwi << " IRQ-work interrupts");
    CHECK(data_sends_of(col) == static_cast<std::size_t>(writes));
    // The marks' worth of bytes the records filled, at the least (each holds a header): a
    // wakeup per mark produced, as the programs did before session 28, would be this many.
    const std::size_t marks_produced = col.records.size() * FC_DATA_EVENT_SHORT / (8 << 10);
    CHECK(marks_produced >= 5);
    // None while the reader keeps up; two at most for a reader the host stalls for 30 ms.
    CHECK(status.totals.wakeups <= 2);
    CHECK(iwi <= 4);  // the kernel's count agrees (the host's other IRQ work is rare)
    CHECK(status.totals.drops == 0);
  }
  {
    // Behind: about 7 MB of records in a burst against a 64 KiB mark and 100 ms passes. The
    // rings (16 MiB per CPU) hold it all, so any drop would be the wakeups' fault.
    Collector col({.ring_bytes_per_cpu = 16 << 20,
                   .wakeup_bytes = 64 << 10,
                   .default_policy = {256, 256, FC_ROLE_OTHER},
                   .pass_interval_ms = 100});
    const std::uint64_t iwi_before = irq_work_interrupts();
    Child target(load_scenario);
    REQUIRE(col.capture->add_target(target.pid()).ok());
    target.go();
    while (!target.ready()) REQUIRE(col.capture->poll(20).ok());
    const long long sends = target.receive();
    target.receive();
    col.drain(3);
    target.nod();
    CHECK(target.wait() == 0);
    const auto status = col.capture->status();
    const std::uint64_t iwi = irq_work_interrupts() - iwi_before;
    MESSAGE("behind: " << col.records.size() << " records, " << status.totals.wakeups
                       << " wakeups, " << iwi << " IRQ-work interrupts");
    CHECK(data_sends_of(col) == static_cast<std::size_t>(sends));
    CHECK(status.totals.wakeups >= 1);
    CHECK(iwi >= 1);
    CHECK(status.totals.drops == 0);
  }
}

namespace {

// Waits up to `ms` for `done()`, polling as a drain that keeps up would (so the reader sees it
// waiting in poll()) when `polling`, else only sleeping (a drain that is away).
template <class F>
bool wait_for(fc::capture::Capture& capture, bool polling, int ms, F done) {
  for (int waited = 0; waited < ms; waited += 20) {
    if (done()) return true;
    if (polling)
      REQUIRE(capture.poll(20).ok());
    else
      usleep(20000);
  }
  return done();
}

}  // namespace

// The drain decodes in passes that hold a CPU; at SCHED_IDLE a broker or client thread woken onto
// that CPU preempts it (docs/performance.md, "Session 25 figures"). It must not starve: a backlog
// of records, or a drain away from poll() for too long, makes it a normal thread until it catches
// up. The policy is the kernel's own account of this thread (sched_getscheduler), not the
// capture's.
TEST_CASE("the drain yields while it keeps up and is a normal thread while it is behind") {
  fc::testing::require_root("loading BPF programs and changing a thread's scheduling policy");
  REQUIRE(fc::capture::check_environment().ok());
  REQUIRE(sched_getscheduler(0) == SCHED_OTHER);
  {
    // Behind by backlog: the writes below are about 10 MB of records against a 64 KiB mark.
    // Rings larger than the whole load: what is tested is the spool and the drain, and a ring
    // reader stalled for a few ms (a busy VM host's steal) must not turn into drops here.
    Collector col({.ring_bytes_per_cpu = 16 << 20,
                   .default_policy = {256, 256, FC_ROLE_OTHER},
                   .drain_yields = true,
                   .drain_yield_backlog_bytes = 64 << 10,
                   .drain_yield_away_ms = 600000});  // only the backlog counts here
    REQUIRE(col.capture->poll(0).ok());              // the first poll() makes this thread the drain
    CHECK(sched_getscheduler(0) == SCHED_IDLE);
    auto status = col.capture->status();
    CHECK(status.drain_yields);
    CHECK(status.drain_idle);
    CHECK(status.drain_priority_error.empty());
    CHECK(status.drain_promotions == 0);

    Child target(load_scenario);
    REQUIRE(col.capture->add_target(target.pid()).ok());
    target.go();
    while (!target.ready()) usleep(10000);  // not draining: the spool fills
    const long long sends = target.receive();
    target.receive();  // the receives: a read may return several messages, counted below
    CHECK(
        wait_for(*col.capture, false, 2000, [&] { return sched_getscheduler(0) == SCHED_OTHER; }));
    status = col.capture->status();
    MESSAGE("backlog " << status.spool_bytes << " bytes (mark 65536), promotions "
                       << status.drain_promotions);
    CHECK(status.drain_promotions >= 1);
    CHECK_FALSE(status.drain_idle);
    // Caught up and waiting in poll() again: it yields again.
    CHECK(wait_for(*col.capture, true, 3000, [&] { return sched_getscheduler(0) == SCHED_IDLE; }));
    col.drain(3);
    target.nod();
    CHECK(target.wait() == 0);
    CHECK(data_sends_of(col) == static_cast<std::size_t>(sends));  // nothing lost on the way
    CHECK(col.capture->status().totals.drops == 0);
  }
  CHECK(sched_getscheduler(0) == SCHED_OTHER);  // a closed capture leaves its drain as it found it
  {
    // Behind by absence: away from poll() for longer than drain_yield_away_ms, no records at all
    // (a drain starved on a busy host, or busy with its other work).
    Collector col({.drain_yields = true, .drain_yield_away_ms = 50});
    REQUIRE(col.capture->poll(0).ok());
    CHECK(sched_getscheduler(0) == SCHED_IDLE);
    CHECK(
        wait_for(*col.capture, false, 1000, [&] { return sched_getscheduler(0) == SCHED_OTHER; }));
    CHECK(col.capture->status().drain_promotions >= 1);
    CHECK(wait_for(*col.capture, true, 1000, [&] { return sched_getscheduler(0) == SCHED_IDLE; }));
  }
  CHECK(sched_getscheduler(0) == SCHED_OTHER);
  {
    // Off (the library's default): the drain keeps its priority.
    Collector col({});
    REQUIRE(col.capture->poll(0).ok());
    CHECK(sched_getscheduler(0) == SCHED_OTHER);
    CHECK_FALSE(col.capture->status().drain_yields);
  }
  CHECK(fc::capture::Capture::open({.drain_yields = true, .drain_yield_backlog_bytes = 0},
                                   [](const auto&) {})
            .ok() == false);
}

namespace {

std::uint64_t monotonic_now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(t.tv_nsec);
}

// A burst on each of two CPUs at once, one thread pinned to each: 60,000 64-byte writes, read
// back every 8, on a loopback connection of its own; reports the calls that moved bytes.
int two_cpu_burst_scenario(Child& self) {
  std::atomic<long long> calls{0};
  std::atomic<int> failed{0};
  auto burst = [&](int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
    int client = -1, server = -1;
    if (const int f = open_loopback(client, server)) return failed.store(f);
    const std::string msg = pattern(64, 3);
    char buf[4096];
    for (int i = 0; i < 60000; ++i) {
      if (write(client, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size()))
        return failed.store(12);
      ++calls;
      for (std::size_t pending = i % 8 == 7 ? 8 * msg.size() : 0; pending > 0;) {
        const ssize_t n = read(server, buf, std::min(pending, sizeof buf));
        if (n <= 0) return failed.store(13);
        ++calls;
        pending -= static_cast<std::size_t>(n);
      }
    }
  };
  std::thread first(burst, 0), second(burst, 1);
  first.join();
  second.join();
  if (failed != 0) return failed;
  self.report(calls);
  self.wait_parent();
  return 0;
}

struct OrderSeen {
  std::size_t handed = 0;
  std::size_t before_mark = 0;  // stamped over 1 ms before the mark of the polls before it
  std::size_t marks_ahead_of_now = 0;
  long long calls = 0;
  std::uint64_t drops = 0;
};

// Runs `scenario` under a drain away `away_us` after each poll, as one busy decoding would be,
// checking each record handed on against the mark the polls before it gave (less 1 ms for a
// program's timestamp-to-commit).
OrderSeen order_under_slow_drain(const fc::capture::Options& options, int (*scenario)(Child&),
                                 useconds_t away_us) {
  OrderSeen seen;
  std::uint64_t handing_mark = 0;
  auto opened = fc::capture::Capture::open(options, [&](const fc::capture::EventView& ev) {
    ++seen.handed;
    if (ev.common.timestamp_ns + 1'000'000 < handing_mark) ++seen.before_mark;
  });
  REQUIRE(opened.ok());
  auto& capture = *opened.value();
  Child target(scenario);
  REQUIRE(capture.add_target(target.pid()).ok());
  target.go();
  auto poll = [&](int timeout_ms) {
    handing_mark = capture.handed_through_ns();
    REQUIRE(capture.poll(timeout_ms).ok());
    if (capture.handed_through_ns() > monotonic_now_ns()) ++seen.marks_ahead_of_now;
  };
  while (!target.ready()) {
    poll(0);
    usleep(away_us);
  }
  seen.calls = target.receive();
  for (int i = 0; i < 5; ++i) poll(20);
  seen.drops = capture.status().totals.drops;
  target.nod();
  CHECK(target.wait() == 0);
  return seen;
}

}  // namespace

// fetchcostd orders the records of all CPUs and releases those older than the capture's
// handed_through_ns(). It used to release up to "now": records stamped before it that were still
// in a ring (a drain busy decoding for longer than the reorder window, a ring reader's pass cut
// short by its turns) were handed on after later ones, and an object-store response found no
// request (CI, session 54: 1,121 GETs unattributed on __unknown__, 955 counted failed). Here 24
// of 602 paced records did, and 1,770 of 150,000 in bursts on two CPUs. Every
// record a poll hands on must be stamped after the mark the polls before it gave; once the load
// stops, idle polls move the mark up to about now.
TEST_CASE("records a poll hands on are never older than the mark the polls before it gave") {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  {
    // Paced records, the reader passing every 5 ms, the drain away 30 ms after each poll.
    const OrderSeen seen = order_under_slow_drain(
        {.ring_bytes_per_cpu = 1 << 20, .pass_interval_ms = 5}, paced_scenario, 30'000);
    MESSAGE("paced: " << seen.handed << " records for " << seen.calls << " writes, "
                      << seen.before_mark << " stamped before the mark");
    CHECK(seen.handed >= static_cast<std::size_t>(2 * seen.calls));  // a send and a receive each
    CHECK(seen.before_mark == 0);
    CHECK(seen.marks_ahead_of_now == 0);
    CHECK(seen.drops == 0);
  }
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 2) {  // the burst's threads are pinned to CPUs 0 and 1
    // Bursts on two CPUs between the reader's 100 ms passes, the drain away 30 ms after each
    // poll: with the mark at the poll's "now", 1,770 of the 150,000 records came after it.
    const OrderSeen seen = order_under_slow_drain({.ring_bytes_per_cpu = 32 << 20,
                                                   .wakeup_bytes = 16 << 20,
                                                   .default_policy = {64, 64, FC_ROLE_OTHER},
                                                   .pass_interval_ms = 100},
                                                  two_cpu_burst_scenario, 30'000);
    MESSAGE("bursts on two CPUs: " << seen.handed << " records for " << seen.calls << " calls, "
                                   << seen.before_mark << " stamped before the mark");
    CHECK(seen.handed >= static_cast<std::size_t>(seen.calls));
    CHECK(seen.before_mark == 0);
    CHECK(seen.marks_ahead_of_now == 0);
    CHECK(seen.drops == 0);
  }
  // Idle: the rings empty, a poll moves the mark up to itself.
  auto opened = fc::capture::Capture::open({}, [](const auto&) {});
  REQUIRE(opened.ok());
  const std::uint64_t before = monotonic_now_ns();
  REQUIRE(opened.value()->poll(0).ok());
  CHECK(opened.value()->handed_through_ns() >= before);
  CHECK(opened.value()->handed_through_ns() <= monotonic_now_ns());
}
