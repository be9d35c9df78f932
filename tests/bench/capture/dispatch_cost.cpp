// bench_dispatch_cost: the floor under every socket program's cost on this kernel. Prints what
// one run of a program that does nothing (it counts the calls of one process) adds to a socket
// send, measured as the thread CPU time of a send that fails at once (a full non-blocking socket:
// the tracepoint still fires), in rounds with the program detached and attached in turn. The
// difference is the tracepoint's dispatch plus one helper call: a sendfile of 1 MiB pays it 17
// times (one per 64 KiB spliced) whatever the program does. A third round per pair runs the
// attached program with the kernel timing its runs (a BPF_ENABLE_STATS fd held, as fetchcostd's
// capture.program_stats does): the difference is what that timing adds to each run. Also
// reports whether this kernel loads an fentry program (the hook that could run once per
// sendfile instead). Root.
//
//   bench_dispatch_cost [PAIRS [CALLS]]   (defaults 10 pairs of 1,000,000 calls)
//   bench_dispatch_cost --hold            attach the same do-nothing program to the three sock
//                                         tracepoints fetchcostd uses until SIGTERM: the floor
//                                         under any observer on those hooks, measured on the
//                                         broker by bench_broker --hooks-floor
//   bench_dispatch_cost --hold --state PID  instead, programs that keep each of PID's
//                                         connections' byte counts in socket-local storage: the
//                                         least an observer that follows connections does
//                                         (bench_broker --hooks-state)
//   bench_dispatch_cost --hold --toggle   the do-nothing programs loaded but detached; each
//                                         line "on" or "off" on stdin attaches or detaches them
//                                         and is answered with the same word once done; exits at
//                                         end of input (bench_broker --hooks-interleave)
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "dispatch_cost.skel.h"

namespace {

double thread_cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// CPU ns per send() on a full non-blocking socket.
double ns_per_failed_send(int fd, long calls) {
  char byte = 0;
  const double t0 = thread_cpu_ns();
  for (long i = 0; i < calls; ++i) (void)!send(fd, &byte, 1, MSG_DONTWAIT);
  return (thread_cpu_ns() - t0) / static_cast<double>(calls);
}

// Whether the kernel loads the fentry program: an error message, or "" when it does.
std::string fentry_refusal() {
  dispatch_cost* skel = dispatch_cost__open();
  if (!skel) return std::string("cannot open the object: ") + std::strerror(errno);
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, skel->obj) {  // fentry alone: its load is the question
    bpf_program__set_autoload(prog, prog == skel->progs.fentry_count);
  }
  const int rc = dispatch_cost__load(skel);
  dispatch_cost__destroy(skel);
  return rc == 0 ? "" : std::strerror(-rc);
}

bool kernel_times_programs() {
  FILE* f = std::fopen("/proc/sys/kernel/bpf_stats_enabled", "r");
  int on = 0;
  if (f) {
    if (std::fscanf(f, "%d", &on) != 1) on = 0;
    std::fclose(f);
  }
  return on != 0;
}

// One program per sock tracepoint fetchcostd uses: the do-nothing ones (counting the target's
// runs), or with `with_state` the ones that keep the target's connections' byte counts.
std::array<bpf_program*, 3> socket_programs(const dispatch_cost* skel, bool with_state) {
  if (with_state) return {skel->progs.send_state, skel->progs.recv_state, skel->progs.close_state};
  return {skel->progs.send_count, skel->progs.recv_count, skel->progs.state_count};
}

// socket_programs(with_state) loaded, filtering on `tgid`; the others and fentry are left out
// (this kernel may refuse fentry; fentry_refusal() asks about it on its own). Null after saying
// why.
dispatch_cost* load_socket_programs(__u32 tgid, bool with_state = false) {
  dispatch_cost* skel = dispatch_cost__open();
  if (!skel) {
    std::fprintf(stderr, "bench_dispatch_cost: cannot open the BPF object\n");
    return nullptr;
  }
  bpf_program* prog = nullptr;
  bpf_object__for_each_program(prog, skel->obj) bpf_program__set_autoload(prog, false);
  for (bpf_program* wanted : socket_programs(skel, with_state))
    bpf_program__set_autoload(wanted, true);
  skel->bss->target_tgid = tgid;
  if (dispatch_cost__load(skel) != 0) {
    std::fprintf(stderr,
                 "bench_dispatch_cost: the tracepoint programs did not load (Linux >= 6.3 with "
                 "BTF is needed for tp_btf/sock_send_length)\n");
    dispatch_cost__destroy(skel);
    return nullptr;
  }
  return skel;
}

// Attaches socket_programs(with_state) into `links`; on a refusal says which, and leaves none.
bool attach_socket_programs(const dispatch_cost* skel, bool with_state,
                            std::vector<bpf_link*>& links) {
  for (bpf_program* prog : socket_programs(skel, with_state)) {
    bpf_link* link = bpf_program__attach(prog);
    if (!link) {
      std::fprintf(stderr, "bench_dispatch_cost: cannot attach %s: %s\n", bpf_program__name(prog),
                   std::strerror(errno));
      for (bpf_link* l : links) bpf_link__destroy(l);
      links.clear();
      return false;
    }
    links.push_back(link);
  }
  return true;
}

// --hold --toggle: the same programs, attached and detached on command, so that a caller can
// alternate the hooks within one round many times a second, faster than the host drifts.
int toggle() {
  dispatch_cost* skel = load_socket_programs(0, false);
  if (!skel) return 1;
  std::vector<bpf_link*> links;
  auto detach = [&] {
    for (bpf_link* l : links) bpf_link__destroy(l);
    links.clear();
  };
  std::printf("ready\n");
  std::fflush(stdout);
  char line[16];
  while (std::fgets(line, sizeof line, stdin)) {
    const std::string command(line, strcspn(line, "\n"));
    if (command == "on" && links.empty()) {
      if (!attach_socket_programs(skel, false, links)) {
        dispatch_cost__destroy(skel);
        return 1;
      }
    } else if (command == "off") {
      detach();
    } else if (command != "on") {
      std::fprintf(stderr, "bench_dispatch_cost: --toggle reads \"on\" or \"off\", not \"%s\"\n",
                   command.c_str());
      continue;
    }
    std::printf("%s\n", command.c_str());
    std::fflush(stdout);
  }
  detach();
  dispatch_cost__destroy(skel);
  return 0;
}

// --hold: every socket call on the machine runs a program that does nothing, on each hook
// fetchcostd's sock variant attaches to, until SIGTERM or SIGINT. Prints "attached" once the
// three links are up. The programs compare the caller's tgid with 0 (no process's), as any
// observer filters its target first, and count nothing, which no observer needs (counting the
// broker's runs in one shared line measured no cost on the broker, session 35). With a
// `state_tgid` (--state PID), that process's calls also add their length to their socket's state.
int hold(__u32 state_tgid) {
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before the links: a stop then waits for sigwait
  dispatch_cost* skel = load_socket_programs(state_tgid, state_tgid != 0);
  if (!skel) return 1;
  std::vector<bpf_link*> links;
  if (!attach_socket_programs(skel, state_tgid != 0, links)) {
    dispatch_cost__destroy(skel);
    return 1;
  }
  std::printf("attached\n");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  for (bpf_link* l : links) bpf_link__destroy(l);
  if (state_tgid != 0)
    std::fprintf(stderr, "bench_dispatch_cost: %llu connections of %u closed with state\n",
                 static_cast<unsigned long long>(skel->bss->closed_with_state), state_tgid);
  dispatch_cost__destroy(skel);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool holding = argc > 1 && std::strcmp(argv[1], "--hold") == 0;
  const int pairs = argc > 1 && !holding ? std::atoi(argv[1]) : 10;
  const long calls = argc > 2 ? std::atol(argv[2]) : 1000000;
  if (geteuid() != 0) {
    std::fprintf(stderr, "bench_dispatch_cost: needs root (BPF programs); skipped\n");
    const char* ci = std::getenv("CI");
    return ci && std::strcmp(ci, "true") == 0 ? 1 : 77;
  }
  libbpf_set_print([](libbpf_print_level, const char*, va_list) { return 0; });
  if (holding) {
    if (argc == 3 && std::strcmp(argv[2], "--toggle") == 0) return toggle();
    const bool with_state = argc == 4 && std::strcmp(argv[2], "--state") == 0;
    const long state_tgid = with_state ? std::atol(argv[3]) : 0;
    if ((argc != 2 && !with_state) || (with_state && state_tgid <= 0)) {
      std::fprintf(stderr, "usage: bench_dispatch_cost --hold [--state PID | --toggle]\n");
      return 2;
    }
    return hold(static_cast<__u32>(state_tgid));
  }
  const std::string refusal = fentry_refusal();

  dispatch_cost* skel = load_socket_programs(static_cast<__u32>(getpid()));
  if (!skel) return 1;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 1;
  std::vector<char> fill(4096);
  while (send(sv[0], fill.data(), fill.size(), MSG_DONTWAIT) > 0) {
  }
  (void)ns_per_failed_send(sv[0], calls / 10);  // warm up

  if (kernel_times_programs())
    std::fprintf(stderr,
                 "bench_dispatch_cost: warning: kernel.bpf_stats_enabled is 1 already, so every "
                 "attached round is timed and the timing's cost reads about 0\n");
  std::vector<double> off, on, timed, diff, timing;
  __u64 runs_before = skel->bss->runs;
  long attached_calls = 0;
  enum Mode { kDetached, kAttached, kTimed };
  for (int p = 0; p < pairs; ++p) {
    for (int round = 0; round < 3; ++round) {
      const Mode mode = static_cast<Mode>((round + p) % 3);  // the order rotates every pair
      bpf_link* link = mode != kDetached ? bpf_program__attach(skel->progs.send_count) : nullptr;
      if (mode != kDetached && !link) {
        std::fprintf(stderr, "bench_dispatch_cost: cannot attach to sock_send_length\n");
        return 1;
      }
      const int stats_fd = mode == kTimed ? bpf_enable_stats(BPF_STATS_RUN_TIME) : -1;
      if (mode == kTimed && stats_fd < 0) {
        std::fprintf(stderr, "bench_dispatch_cost: BPF_ENABLE_STATS refused: %s\n",
                     std::strerror(errno));
        return 1;
      }
      const double ns = ns_per_failed_send(sv[0], calls);
      if (stats_fd >= 0) close(stats_fd);
      if (link) {
        bpf_link__destroy(link);
        attached_calls += calls;
      }
      (mode == kDetached ? off : mode == kAttached ? on : timed).push_back(ns);
    }
    diff.push_back(on.back() - off.back());
    timing.push_back(timed.back() - on.back());
    std::printf("pair %d: detached %.1f ns/send, attached %.1f, attached and timed %.1f\n", p,
                off.back(), on.back(), timed.back());
  }
  const __u64 runs = skel->bss->runs - runs_before;
  std::printf("\nsend() on a full non-blocking socket, %d pairs of %ld calls:\n", pairs, calls);
  std::printf("  detached: median %.1f ns; attached: median %.1f ns\n", median(off), median(on));
  std::printf(
      "  per run of a program that does nothing (dispatch + one helper call): median "
      "%.1f ns (pairs %.1f..%.1f); runs counted per attached call: %.3f\n",
      median(diff), *std::min_element(diff.begin(), diff.end()),
      *std::max_element(diff.begin(), diff.end()),
      static_cast<double>(runs) / static_cast<double>(attached_calls));
  std::printf(
      "  what the kernel's timing of each run adds (BPF_ENABLE_STATS, capture.program_stats): "
      "median %.1f ns per run (pairs %.1f..%.1f)\n",
      median(timing), *std::min_element(timing.begin(), timing.end()),
      *std::max_element(timing.begin(), timing.end()));
  std::printf("fentry/sock_sendmsg: %s\n",
              refusal.empty() ? "loads (a per-sendfile hook is possible here)"
                              : ("refused by this kernel (" + refusal + ")").c_str());
  dispatch_cost__destroy(skel);
  close(sv[0]);
  close(sv[1]);
  return 0;
}
