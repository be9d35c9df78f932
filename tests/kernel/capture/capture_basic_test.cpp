// Kernel test: an event emitted by a real socket syscall of a target process arrives in userspace
// with the right pid, tid, comm and bytes; a process that is not a target produces none.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "capture/capture.h"
#include "testing.h"

namespace {

struct Seen {
  fc_data_event header;
  std::string payload;
};

// A loopback TCP connection: its client and accepted ends (the listener is closed). False on
// any failure.
bool open_loopback(int& client, int& server) {
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  bool ok = bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
            listen(listener, 1) == 0 &&
            getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  client = ok ? socket(AF_INET, SOCK_STREAM, 0) : -1;
  ok = ok && connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  server = ok ? accept(listener, nullptr, nullptr) : -1;
  close(listener);
  return ok && server >= 0;
}

// A child process that, when told to go, opens a loopback TCP connection to itself and has a
// thread named `thread_name` write `message` on it. It reports that thread's tid on `report`.
pid_t spawn_sender(const char* thread_name, const std::string& message, int& go_fd, int& tid_fd) {
  int go[2], report[2];
  REQUIRE(pipe(go) == 0);
  REQUIRE(pipe(report) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(go[1]);
    close(report[0]);
    char byte;
    if (read(go[0], &byte, 1) != 1) _exit(3);
    int client = -1, server = -1;
    if (!open_loopback(client, server)) _exit(4);
    std::thread sender([&] {
      prctl(PR_SET_NAME, thread_name);
      pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
      if (write(client, message.data(), message.size()) != static_cast<ssize_t>(message.size()))
        _exit(6);
      if (write(report[1], &tid, sizeof(tid)) != sizeof(tid)) _exit(7);
    });
    sender.join();
    std::string got(message.size(), '\0');
    std::size_t n = 0;
    while (n < got.size()) {
      ssize_t r = read(server, got.data() + n, got.size() - n);
      if (r <= 0) _exit(8);
      n += static_cast<std::size_t>(r);
    }
    _exit(got == message ? 0 : 9);
  }
  close(go[0]);
  close(report[1]);
  go_fd = go[1];
  tid_fd = report[0];
  return pid;
}

pid_t run_sender(int go_fd, int tid_fd, pid_t pid) {
  char byte = 'g';
  REQUIRE(write(go_fd, &byte, 1) == 1);
  pid_t tid = 0;
  REQUIRE(read(tid_fd, &tid, sizeof(tid)) == sizeof(tid));
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  close(go_fd);
  close(tid_fd);
  return tid;
}

}  // namespace

TEST_CASE("a target's socket write arrives with its pid, tid, comm and bytes; others are silent") {
  fc::testing::require_root("loading BPF programs");
  REQUIRE_MESSAGE(fc::capture::check_environment().ok(), "environment check failed");

  std::vector<Seen> seen;
  auto capture = fc::capture::Capture::open({.ring_bytes_per_cpu = 1 << 20}, [&](const auto& ev) {
    if (ev.data && ev.common.kind == FC_EVENT_DATA)
      seen.push_back({*ev.data, std::string(ev.payload.begin(), ev.payload.end())});
  });
  REQUIRE_MESSAGE(capture.ok(), (capture.ok() ? "" : capture.error().message));

  const std::string target_message = "fetchcost kernel test: target bytes 0123456789";
  const std::string other_message = "fetchcost kernel test: bytes nobody should see";
  int target_go, target_tid_fd, other_go, other_tid_fd;
  pid_t target = spawn_sender("fc-target-io", target_message, target_go, target_tid_fd);
  pid_t other = spawn_sender("fc-other-io", other_message, other_go, other_tid_fd);
  REQUIRE((*capture)->add_target(target).ok());

  pid_t target_tid = run_sender(target_go, target_tid_fd, target);
  pid_t other_tid = run_sender(other_go, other_tid_fd, other);
  CHECK(target_tid != target);  // the write came from a second thread

  for (int i = 0; i < 20; ++i) REQUIRE((*capture)->poll(50).ok());

  bool found_send = false, found_recv = false;
  for (const Seen& s : seen) {
    CHECK_MESSAGE(s.header.c.tgid != static_cast<__u32>(other), "a non-target produced an event");
    CHECK(s.payload.find("nobody should see") == std::string::npos);
    if (s.header.c.tgid != static_cast<__u32>(target)) continue;
    if (s.header.direction == FC_DIR_SEND && s.payload == target_message) {
      found_send = true;
      CHECK(s.header.c.tid == static_cast<__u32>(target_tid));
      CHECK(std::string(s.header.c.comm) == "fc-target-io");
      CHECK(s.header.source == FC_SRC_WRITE);
      CHECK(s.header.length == target_message.size());
      CHECK(s.header.captured == target_message.size());
      CHECK(s.header.stream_pos == 0);
    }
    if (s.header.direction == FC_DIR_RECV && s.payload == target_message) {
      found_recv = true;
      CHECK(s.header.c.tid == static_cast<__u32>(target));  // the main thread read it
      CHECK(s.header.source == FC_SRC_READ);
    }
  }
  CHECK(found_send);
  CHECK(found_recv);
  CHECK(other_tid > 0);
  const auto totals = (*capture)->totals();
  CHECK(totals.drops == 0);
  CHECK(totals.events >= 2);
}

TEST_CASE(
    "a poll that finds the rings empty asks the reader for no pass; one that does not, does") {
  fc::testing::require_root("loading BPF programs");
  REQUIRE_MESSAGE(fc::capture::check_environment().ok(), "environment check failed");
  std::vector<std::string> sent;
  auto capture = fc::capture::Capture::open({.ring_bytes_per_cpu = 1 << 20}, [&](const auto& ev) {
    if (ev.data && ev.common.kind == FC_EVENT_DATA && ev.data->direction == FC_DIR_SEND)
      sent.emplace_back(ev.payload.begin(), ev.payload.end());
  });
  REQUIRE_MESSAGE(capture.ok(), (capture.ok() ? "" : capture.error().message));
  int go, tid_fd;
  const std::string message = "fetchcost kernel test: in the ring when poll is called";
  const pid_t target = spawn_sender("fc-poll-io", message, go, tid_fd);
  REQUIRE((*capture)->add_target(target).ok());

  // Nothing in the rings: each poll waits its 10 ms and returns without a pass of the reader.
  const std::uint64_t idle_before = (*capture)->status().idle_polls;
  for (int i = 0; i < 20; ++i) REQUIRE((*capture)->poll(10).ok());
  CHECK((*capture)->status().idle_polls - idle_before >= 18);

  // Records far below the wakeup mark, in the rings when poll(0) is called: that one poll
  // hands them over (the reader's pass it asks for, or its own 100 ms pass if that came first).
  run_sender(go, tid_fd, target);
  const std::uint64_t idle_sent = (*capture)->status().idle_polls;
  REQUIRE((*capture)->poll(0).ok());
  CHECK(std::count(sent.begin(), sent.end(), message) == 1);
  CHECK((*capture)->status().idle_polls == idle_sent);
}

// The programs test only a process's target bit, so add_target is what keeps fetchcostd's own
// socket calls out of its capture.
TEST_CASE("fetchcostd's own process is refused as a target, and its socket calls stay silent") {
  fc::testing::require_root("loading BPF programs");
  REQUIRE_MESSAGE(fc::capture::check_environment().ok(), "environment check failed");
  std::size_t own_events = 0;
  auto capture = fc::capture::Capture::open({.ring_bytes_per_cpu = 1 << 20}, [&](const auto& ev) {
    if (ev.common.tgid == static_cast<__u32>(getpid())) ++own_events;
  });
  REQUIRE_MESSAGE(capture.ok(), (capture.ok() ? "" : capture.error().message));
  const auto refused = (*capture)->add_target(getpid());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("fetchcostd itself") != std::string::npos);

  // A loopback exchange of this process's own.
  int client = -1, server = -1;
  REQUIRE(open_loopback(client, server));
  char buf[64] = "fetchcost kernel test: fetchcostd's own bytes";
  REQUIRE(write(client, buf, sizeof(buf)) == static_cast<ssize_t>(sizeof(buf)));
  REQUIRE(read(server, buf, sizeof(buf)) > 0);
  close(server);
  close(client);

  for (int i = 0; i < 10; ++i) REQUIRE((*capture)->poll(50).ok());
  CHECK(own_events == 0);
  CHECK((*capture)->totals().events == 0);
}

// Where a kernel's verifier refuses the syscall exit programs (they walk trusted task pointers,
// whose rules changed between kernels), the loader falls back to the entry-exit pairs, which
// capture the same.
TEST_CASE("the syscall variant falls back to entry-exit pairs when its exit programs are refused") {
  fc::testing::require_root("loading BPF programs");
  std::vector<Seen> seen;
  auto capture = fc::capture::Capture::open(
      {.ring_bytes_per_cpu = 1 << 20,
       .variant = fc::capture::Variant::kSyscallTracepoints,
       .test_refuse_syscall_exit_programs = true},
      [&](const auto& ev) {
        if (ev.data && ev.common.kind == FC_EVENT_DATA)
          seen.push_back({*ev.data, std::string(ev.payload.begin(), ev.payload.end())});
      });
  REQUIRE_MESSAGE(capture.ok(), (capture.ok() ? "" : capture.error().message));
  CHECK((*capture)->variant() == fc::capture::Variant::kSyscallEntryExit);
  bool pairs = false;
  for (const auto& p : (*capture)->status().programs) pairs |= p.name == "sc_exit";
  CHECK(pairs);

  const std::string message = "fetchcost kernel test: captured by the entry-exit pairs";
  int go, tid_fd;
  pid_t target = spawn_sender("fc-target-pair", message, go, tid_fd);
  REQUIRE((*capture)->add_target(target).ok());
  const pid_t tid = run_sender(go, tid_fd, target);
  for (int i = 0; i < 20; ++i) REQUIRE((*capture)->poll(50).ok());
  int sends = 0;
  for (const Seen& s : seen) {
    if (s.header.direction != FC_DIR_SEND || s.payload != message) continue;
    ++sends;
    CHECK(s.header.c.tid == static_cast<__u32>(tid));
    CHECK(std::string(s.header.c.comm) == "fc-target-pair");
    CHECK(s.header.source == FC_SRC_WRITE);
  }
  CHECK(sends == 1);
}

// The verifier walks every path of a program, up to 1,000,000 instructions, and the load time
// grows with the walk (about 1 s here for the sock variant). A change that multiplies the
// paths (a branch whose outcome the verifier carries into every later iovec) can double it and
// still load here, but not on a kernel whose verifier prunes less: each program keeps 60% of
// the limit free. sock_recv_length needs about 309,000 on Linux 6.18. Loaded as fetchcostd loads
// them (quiet fetches on: the hold's paths are verified only then).
TEST_CASE("each program is verified within 40% of the verifier's instruction limit") {
  fc::testing::require_root("loading BPF programs");
  for (auto variant :
       {fc::capture::Variant::kSockTracepoints, fc::capture::Variant::kSyscallTracepoints,
        fc::capture::Variant::kSyscallEntryExit}) {
    INFO("variant " << fc::capture::variant_name(variant));
    auto capture = fc::capture::Capture::open(
        {.ring_bytes_per_cpu = 1 << 16, .variant = variant, .skip_quiet_fetches = true},
        [](const auto&) {});
    REQUIRE_MESSAGE(capture.ok(), (capture.ok() ? "" : capture.error().message));
    const auto status = (*capture)->status();
    CHECK(status.load_seconds > 0);
    // This kernel (>= 5.15) has bpf_task_pt_regs: each variant loads as asked.
    CHECK(status.variant == variant);
    REQUIRE(status.programs.size() >= 3);
    std::set<std::string> names;
    for (const auto& p : status.programs) {
      INFO("program " << p.name << ": " << p.verified_insns << " instructions");
      names.insert(p.name);
      CHECK(p.verified_insns > 0);
      CHECK(p.verified_insns <= 400000);
    }
    // The syscall variants: the exit program alone, or the entry-exit pair; close() in both.
    const bool by_syscall = variant != fc::capture::Variant::kSockTracepoints;
    const bool pairs = variant == fc::capture::Variant::kSyscallEntryExit;
    CHECK(names.count("sc_ret") == (by_syscall && !pairs));
    CHECK(names.count("sc_exit") == pairs);
    CHECK(names.count("sc_enter") == by_syscall);
    CHECK(names.count("sock_send_length") == !by_syscall);
  }
}

namespace {

// Forks a child that runs /bin/true (an exec under its own pid) and reaps it.
pid_t run_true() {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    execl("/bin/true", "true", static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return pid;
}

}  // namespace

// fetchcostd searches for brokers among the processes that exec'd since its last search (a launch
// script execs the broker under its own pid), reading every process only when some may be
// missing.
TEST_CASE("the exec hook lists the processes that ran a program, once, in every variant") {
  fc::testing::require_root("loading BPF programs");
  for (auto variant :
       {fc::capture::Variant::kSockTracepoints, fc::capture::Variant::kSyscallTracepoints}) {
    INFO("variant " << fc::capture::variant_name(variant));
    auto capture = fc::capture::Capture::open(
        {.ring_bytes_per_cpu = 1 << 16, .variant = variant, .execs_kept = 8}, [](const auto&) {});
    REQUIRE_MESSAGE(capture.ok(), (capture.ok() ? "" : capture.error().message));
    CHECK((*capture)->status().exec_hook_error.empty());
    (void)(*capture)->take_execs();  // whatever else on the host exec'd since the load
    const pid_t first = run_true();
    const pid_t second = run_true();
    auto execs = (*capture)->take_execs();
    REQUIRE(execs.has_value());
    CHECK(std::count(execs->begin(), execs->end(), first) == 1);
    CHECK(std::count(execs->begin(), execs->end(), second) == 1);
    // Taken: not listed again.
    execs = (*capture)->take_execs();
    REQUIRE(execs.has_value());
    CHECK(std::count(execs->begin(), execs->end(), first) == 0);
    // More than it keeps between two calls: some may be missing, and it says so.
    for (int i = 0; i < 9; ++i) run_true();
    CHECK_FALSE((*capture)->take_execs().has_value());
    execs = (*capture)->take_execs();  // emptied: counting again
    CHECK(execs.has_value());
  }
}
