// Loader and ring-buffer drain for bpf/capture.bpf.c (libbpf skeleton).
#include "capture/capture.h"

#include "base/clock.h"
#include "capture/drain_steering.h"
#include "capture/spool.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "fetchcost_capture.skel.h"

namespace fc::capture {
namespace {

std::string errno_text(int err) {
  return std::strerror(err < 0 ? -err : err);
}

// One more, on a counter only its own thread writes (others read it relaxed).
void bump(std::atomic<std::uint64_t>& counter) {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

std::size_t round_up_pow2(std::size_t n) {
  std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::size_t v = page;
  while (v < n) v <<= 1;
  return v;
}

// libbpf prints verifier logs and warnings through this; keep them, they explain load failures.
int print_libbpf(enum libbpf_print_level level, const char* format, va_list args) {
  if (level == LIBBPF_DEBUG) return 0;
  return std::vfprintf(stderr, format, args);
}

fc_policy to_abi(const Policy& p) {
  fc_policy out{};
  out.bytes_per_call = p.bytes_per_call > FC_MAX_CAPTURE ? FC_MAX_CAPTURE : p.bytes_per_call;
  out.bytes_per_iovec = p.bytes_per_iovec > FC_MAX_CAPTURE ? FC_MAX_CAPTURE : p.bytes_per_iovec;
  out.bulk_from = p.bulk_from;
  out.bulk_bytes = p.bulk_bytes > FC_MAX_CAPTURE ? FC_MAX_CAPTURE : p.bulk_bytes;
  out.role = static_cast<fc_u8>(p.role);
  out.head_bytes = p.head_bytes;
  return out;
}

bool kernel_has_state_tracepoint() {
  return libbpf_find_vmlinux_btf_id("inet_sock_set_state", BPF_TRACE_RAW_TP) > 0;
}

bool kernel_has_sock_tracepoints() {
  return libbpf_find_vmlinux_btf_id("sock_send_length", BPF_TRACE_RAW_TP) > 0 &&
         libbpf_find_vmlinux_btf_id("sock_recv_length", BPF_TRACE_RAW_TP) > 0 &&
         kernel_has_state_tracepoint();
}

// bpf_task_pt_regs in a tracepoint program (Linux >= 5.15): the syscall exit programs can read
// the call's arguments from the registers saved at its entry.
bool kernel_has_task_pt_regs() {
  return libbpf_probe_bpf_helper(BPF_PROG_TYPE_TRACEPOINT, BPF_FUNC_task_pt_regs, nullptr) == 1;
}

bool is_sock_program(const char* name) {
  return std::strncmp(name, "sock_", 5) == 0;
}
// The syscall variants' programs (bpf/capture.bpf.c): sc_ret alone, or the pairs sc_enter and
// sc_exit; sc_enter also reports close() for sc_ret.
bool is_syscall_program(const char* name, Variant variant) {
  if (std::strcmp(name, "sc_enter") == 0) return true;
  return std::strcmp(name, variant == Variant::kSyscallTracepoints ? "sc_ret" : "sc_exit") == 0;
}
// The syscalls whose tracepoints they attach to, each program to all of its own.
constexpr const char* kSyscallsTraced[] = {
    "read",   "readv",   "recvfrom", "recvmsg",    "recvmmsg", "write",   "writev",
    "sendto", "sendmsg", "sendmmsg", "sendfile64", "accept",   "accept4", "connect"};
constexpr const char* kTracefsHint =
    " (the syscall tracepoints need tracefs: `mount -t tracefs nodev /sys/kernel/tracing`)";
bool is_tls_program(const char* name) {
  return std::strncmp(name, "tls_", 4) == 0;
}

// Options::program_stats: one BPF_ENABLE_STATS fd for the whole process, taken once and kept
// until it exits (closed, the kernel stops timing unless another holder or the sysctl keeps it
// on). Process-wide, not per Capture: taking it needs CAP_SYS_ADMIN, which fetchcostd drops
// after its first capture is open, and a capture opened again (attribution off, then on) must
// find it still held.
struct ProgramStatsHold {
  std::mutex mutex;
  int fd = -1;
  std::string error;  // why the last attempt failed
};
ProgramStatsHold& program_stats_hold() {
  static ProgramStatsHold hold;
  return hold;
}

void hold_program_stats() {
  auto& hold = program_stats_hold();
  std::lock_guard lock(hold.mutex);
  if (hold.fd >= 0) return;
  const int fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (fd < 0) {
    hold.error =
        "cannot have the kernel time the BPF programs' runs (BPF_ENABLE_STATS: " +
        errno_text(errno) +
        "; needs Linux >= 5.8 and CAP_SYS_ADMIN when fetchcostd starts): the "
        "fetchcost_bpf_program_run* series are not listed; set capture.program_stats to false, "
        "or turn timing on for the whole host with `sysctl kernel.bpf_stats_enabled=1`";
    return;
  }
  hold.fd = fd;
  hold.error.clear();
}

// The sysctl kernel.bpf_stats_enabled: 1 when set by hand. It reads only its own setting, not the
// BPF_ENABLE_STATS holders (the kernel counts both, in a static key userspace cannot read).
bool host_times_programs() {
  std::ifstream f("/proc/sys/kernel/bpf_stats_enabled");
  int on = 0;
  return static_cast<bool>(f >> on) && on != 0;
}

std::string comm_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string s;
  std::getline(in, s);
  return s;
}

struct LinkDeleter {
  void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
using LinkPtr = std::unique_ptr<bpf_link, LinkDeleter>;

}  // namespace

const char* variant_name(Variant v) {
  switch (v) {
    case Variant::kSockTracepoints:
      return "sock-tracepoints";
    case Variant::kSyscallTracepoints:
      return "syscall-tracepoints";
    case Variant::kSyscallEntryExit:
      return "syscall-entry-exit";
    default:
      return "auto";
  }
}

struct Capture::Impl {
  struct Target {
    TargetStatus status;
    std::vector<LinkPtr> links;  // TLS uprobes for this pid
    std::uint32_t tls_hooks = 0;
  };

  // The reader thread (run_reader) moves records from the rings into the spool; the drain
  // thread (poll) takes them from there. Each CPU's ring has a ring_buffer of its own, read in
  // turns (read_rings): libbpf's consume reads one ring for as long as records keep arriving
  // in it, so a busy CPU's ring could hold the reader while another CPU's ring overflowed.
  struct RingReader {
    Spool* spool = nullptr;
    ring_buffer* rb = nullptr;
    std::size_t taken = 0;  // records read in this turn
    // The ring's consumer and producer positions, mapped read-only apart from libbpf's (whose
    // 1.1 does not show them): equal when the ring holds nothing.
    void* consumer_page = MAP_FAILED;
    void* producer_page = MAP_FAILED;
    bool empty() const {
      if (consumer_page == MAP_FAILED || producer_page == MAP_FAILED) return false;
      return __atomic_load_n(static_cast<const unsigned long*>(producer_page), __ATOMIC_ACQUIRE) ==
             __atomic_load_n(static_cast<const unsigned long*>(consumer_page), __ATOMIC_ACQUIRE);
    }
  };
  static constexpr std::size_t kRingTurn = 256;  // records per ring per turn
  static constexpr int kRingTurns = 64;          // then they are published to the drain
  static constexpr int kTurnOver = -ECANCELED;   // on_sample's "next ring" (not an error)
  static constexpr int kIdlePassMs = 100;  // the reader's wait when the last pass moved nothing
  static std::size_t page_bytes() { return static_cast<std::size_t>(sysconf(_SC_PAGESIZE)); }

  fetchcost_capture* skel = nullptr;
  // The reader waits here: every reader's epoll fd, and kick_fd. (Not a ring_buffer of all
  // rings: a second mapping of each ring doubles fetchcostd's resident size as reported.)
  int wait_fd = -1;
  std::vector<std::unique_ptr<RingReader>> readers;
  Spool spool;
  std::thread reader;
  std::atomic<bool> stop_reader{false};
  std::atomic<int> reader_error{0};           // a negative errno from reading the rings
  std::atomic<std::uint64_t> passes{0};       // the reader's passes that moved records
  std::atomic<std::uint64_t> pass_max_ns{0};  // Status::reader_pass_max_seconds
  std::atomic<bool> in_pass{false};  // the reader is between its first ring read and publish
  // The start of the reader's last published pass: every record committed before it is in the
  // spool or beyond (see Capture::handed_through_ns).
  std::atomic<std::uint64_t> published_through_ns{0};
  std::uint64_t idle_through_ns = 0;    // drain: when flush() last found every ring empty
  std::uint64_t handed_through_ns = 0;  // drain: what poll() handed on, Capture::handed_through_ns
  std::atomic<std::uint64_t> flushes_skipped{0};  // flush() found the rings empty, no pass asked
  // flush(): the drain asks for a pass now (kick_fd, in wait_fd) and waits until a
  // pass that began after its request (kicks) is done (covered, then pass_done_fd). No lock:
  // the reader must never wait for the drain, which may be preempted at SCHED_IDLE for seconds.
  int kick_fd = -1;
  int pass_done_fd = -1;
  std::atomic<std::uint64_t> kicks{0};
  std::atomic<std::uint64_t> covered{0};
  bool reader_realtime = false;
  std::string reader_priority_error;
  bool drain_checked = false;  // drain thread only: Options::drain_yields was tried
  mutable std::mutex drain_mutex;
  std::string drain_priority_error;  // under drain_mutex
  std::vector<int> ring_fds;
  std::vector<LinkPtr> syscall_links;  // the syscall variants' programs, one link per tracepoint
  LinkPtr exec_link;                   // the exec hook's; null when it could not attach
  std::string exec_error;              // why not
  EventHandler handler;
  Options options;
  // Options::drain_yields: after options (its marks come from them). Destroyed after ~Impl's
  // body has joined the reader, so no reader is left to steer the drain when it restores it.
  DrainSteering drain_steering{options};
  Variant variant = Variant::kAuto;
  int cpus = 0;
  std::size_t ring_bytes = 0;
  std::size_t wakeup_bytes = 0;  // the rings' wakeup mark, as loaded
  double load_seconds = 0;
  std::map<pid_t, Target> targets;
  // Written by the reader thread alone, read by status() on another: relaxed atomics, bumped
  // with a plain load and store (one writer) rather than a locked add per record.
  std::atomic<std::uint64_t> delivered{0};
  std::atomic<std::uint64_t> folded_read_pieces{0};  // Status::folded_read_pieces
  fc_data_event widened_event{};  // a short or one-segment record widened (on_sample)
  fc_data_event folded_event{};   // the calls a record's hole_before stands for (on_sample)
  fc_data_event skipped_event{};  // the whole messages a record's skipped_before stands for

  explicit Impl(const Options& opts) : options(opts) {}
  ~Impl() {
    if (reader.joinable()) {
      stop_reader = true;
      reader.join();
    }
    if (kick_fd >= 0) close(kick_fd);
    if (pass_done_fd >= 0) close(pass_done_fd);
    targets.clear();  // uprobe links first
    syscall_links.clear();
    exec_link.reset();
    if (wait_fd >= 0) close(wait_fd);
    for (auto& r : readers) {
      if (r->rb) ring_buffer__free(r->rb);
      if (r->consumer_page != MAP_FAILED) munmap(r->consumer_page, page_bytes());
      if (r->producer_page != MAP_FAILED) munmap(r->producer_page, page_bytes());
    }
    for (int fd : ring_fds) close(fd);
    if (skel) fetchcost_capture__destroy(skel);
  }

  // The programs' first test (is_target): one bit per tgid in their .bss.
  void set_target_bit(__u32 tgid, bool on) {
    __u64* word = &skel->bss->target_bits[tgid / 64];
    const __u64 bit = 1ULL << (tgid % 64);
    if (on)
      __atomic_fetch_or(word, bit, __ATOMIC_SEQ_CST);
    else
      __atomic_fetch_and(word, ~bit, __ATOMIC_SEQ_CST);
  }

  void bump_policy_epoch() { __atomic_add_fetch(&skel->bss->policy_epoch, 1, __ATOMIC_SEQ_CST); }

  static int on_sample(void* ctx, void* data, std::size_t size) {
    auto* reader = static_cast<RingReader*>(ctx);
    reader->spool->push(data, size);
    return ++reader->taken >= kRingTurn ? kTurnOver : 0;
  }

  // Moves records from the rings into the spool in turns of at most kRingTurn records per
  // ring, until all are empty, the spool is full, or kRingTurns turns. Returns 0 when the rings
  // were emptied, 1 when records may be left (read again without waiting), or a negative errno.
  int read_rings() {
    for (int turn = 0; turn < kRingTurns; ++turn) {
      if (spool.full()) return 1;
      bool more = false;
      for (auto& r : readers) {
        r->taken = 0;
        const int n = ring_buffer__consume(r->rb);
        if (n == kTurnOver) {
          more = true;
        } else if (n < 0 && n != -EINTR) {
          return n;
        }
      }
      if (!more) return 0;
    }
    return 1;
  }

  // Options::drain_yields, on the drain thread at its first poll().
  void start_yielding() {
    drain_checked = true;
    if (const int err = drain_steering.yield_from_here(monotonic_ns()); err != 0) {
      std::lock_guard lock(drain_mutex);
      drain_priority_error = "the drain thread cannot yield to the broker (SCHED_IDLE, " +
                             errno_text(err) +
                             "): it keeps its priority; grant CAP_SYS_NICE or set "
                             "capture.drain_yields to false";
    }
  }

  // On the reader thread after each pass.
  void steer_drain() { drain_steering.steer(spool.held_bytes(), monotonic_ns()); }

  // The reader thread: wakes with the rings (cfg_wakeup_bytes), or every pass_interval_ms while
  // records flow (100 ms idle), moves what they hold into the spool and hands it to the drain.
  // It does nothing else, so it can run as a real-time thread (set by open()): its CPU time is
  // a copy per record.
  void run_reader() {
    pthread_setname_np(pthread_self(), "fc-ring-reader");
    bool again = false;
    bool flowing = false;  // the last pass moved records
    while (!stop_reader.load(std::memory_order_relaxed)) {
      if (spool.full()) {  // the drain is behind: the rings hold what comes meanwhile
        steer_drain();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      if (!again) {
        epoll_event ready[8];
        const int n =
            epoll_wait(wait_fd, ready, 8, flowing ? options.pass_interval_ms : kIdlePassMs);
        if (n < 0 && errno != EINTR) {
          reader_error = -errno;
          break;
        }
        std::uint64_t count;
        if (read(kick_fd, &count, sizeof count) < 0) { /* not kicked */
        }
      }
      const std::uint64_t asked = kicks.load();
      const std::uint64_t pushed = spool.pushed();
      const std::uint64_t pass_start = monotonic_ns();
      in_pass = true;
      const int r = read_rings();
      spool.publish();
      // Only a pass that emptied every ring has every record committed before it: one cut short
      // (its turns used up, the spool full) may leave older records than those it took.
      if (r == 0) published_through_ns.store(pass_start, std::memory_order_release);
      in_pass = false;
      if (const std::uint64_t took = monotonic_ns() - pass_start;
          took > pass_max_ns.load(std::memory_order_relaxed))
        pass_max_ns.store(took, std::memory_order_relaxed);
      flowing = spool.pushed() != pushed;
      if (flowing) passes.fetch_add(1, std::memory_order_relaxed);
      if (covered.exchange(asked) != asked) {
        const std::uint64_t one = 1;
        if (write(pass_done_fd, &one, sizeof one) < 0) { /* the counter is full: readable */
        }
      }
      steer_drain();
      if (r < 0) {
        reader_error = r;
        break;
      }
      again = r > 0;
    }
  }

  // Drain thread: everything in the rings now reaches the spool before this returns (or after
  // 100 ms, should the reader be stuck).
  void flush() {
    // Rings that hold nothing, with no pass under way that has read some of them and not yet
    // published (checked after the rings: such a pass would have emptied them first), leave
    // nothing to ask for. An idle fetchcostd's drain asked each time it had waited 100 ms: half
    // of its wakeups and its ring reader's (each about 90 us of CPU on a VM).
    const std::uint64_t checked = monotonic_ns();
    if (std::all_of(readers.begin(), readers.end(), [](const auto& r) { return r->empty(); }) &&
        !in_pass) {
      flushes_skipped.fetch_add(1, std::memory_order_relaxed);
      idle_through_ns = checked;  // every record before it is published, so taken next
      return;
    }
    const std::uint64_t ask = kicks.fetch_add(1) + 1;
    const std::uint64_t one = 1;
    if (write(kick_fd, &one, sizeof one) < 0) { /* the counter is full: already kicked */
    }
    const std::uint64_t give_up = monotonic_ns() + 100'000'000;
    while (covered.load() < ask) {
      const std::uint64_t at = monotonic_ns();
      if (at >= give_up) break;
      pollfd done{pass_done_fd, POLLIN, 0};
      ::poll(&done, 1, static_cast<int>((give_up - at + 999'999) / 1'000'000));
      std::uint64_t count;
      if (read(pass_done_fd, &count, sizeof count) < 0) { /* a timeout: nothing signalled */
      }
    }
  }

  void handle_sample(const void* data, std::size_t size) {
    if (size < sizeof(fc_event_common)) return;  // cannot happen with our programs
    const auto* common = static_cast<const fc_event_common*>(data);
    EventView view{*common};
    if (common->kind == FC_EVENT_DATA || common->kind == FC_EVENT_TLS_DATA) {
      const auto* d = static_cast<const fc_data_event*>(data);
      // Where the payload starts: after the whole header, or after segs[0] for a one-range
      // call's record (FC_FLAG_ONE_SEGMENT), whose header is widened here like a short one.
      const auto* payload_at = static_cast<const std::uint8_t*>(data) + sizeof(fc_data_event);
      std::size_t payload_room = size >= sizeof(fc_data_event) ? size - sizeof(fc_data_event) : 0;
      if (size >= FC_DATA_EVENT_ONE_SEGMENT && (d->c.flags & FC_FLAG_ONE_SEGMENT)) {
        std::memcpy(&widened_event, data, FC_DATA_EVENT_ONE_SEGMENT);
        std::memset(widened_event.segs + 1, 0, sizeof(widened_event.segs) - sizeof(fc_segment));
        if (widened_event.nsegs > 1) widened_event.nsegs = 1;
        widened_event.c.flags &= ~FC_FLAG_ONE_SEGMENT;
        payload_at = static_cast<const std::uint8_t*>(data) + FC_DATA_EVENT_ONE_SEGMENT;
        payload_room = size - FC_DATA_EVENT_ONE_SEGMENT;
        d = &widened_event;
      } else if (size < sizeof(fc_data_event)) {
        // A record without payload ends before its segments (FC_DATA_EVENT_SHORT): hand on a
        // full header with no segments, so consumers never see the difference.
        if (size < FC_DATA_EVENT_SHORT) return;
        std::memcpy(&widened_event, data, FC_DATA_EVENT_SHORT);
        std::memset(widened_event.segs, 0, sizeof(widened_event.segs));
        widened_event.captured = 0;
        widened_event.nsegs = 0;
        d = &widened_event;
      }
      if (d->c.skipped_before != 0 &&
          std::uint64_t{d->c.skipped_before} + d->hole_before <= d->stream_pos)
        deliver_stand_in(skipped_event, *d, d->stream_pos - d->hole_before - d->c.skipped_before,
                         d->c.skipped_before, FC_SRC_SKIPPED);
      if (d->hole_before != 0 && d->hole_before <= d->stream_pos) {
        if (d->direction == FC_DIR_RECV) bump(folded_read_pieces);
        deliver_stand_in(folded_event, *d, d->stream_pos - d->hole_before, d->hole_before,
                         d->direction == FC_DIR_SEND ? fc_u8{FC_SRC_SENDFILE} : d->source);
      }
      if (d->length == 0) return;  // only carried folded calls (another call or the close came)
      std::size_t payload = std::min<std::size_t>(d->captured, payload_room);
      std::size_t nsegs = d->nsegs > FC_MAX_SEGMENTS ? FC_MAX_SEGMENTS : d->nsegs;
      view.data = d;
      view.payload = {payload_at, payload};
      view.segments = {d->segs, nsegs};
    } else if (common->kind == FC_EVENT_CONNECT || common->kind == FC_EVENT_CLOSE) {
      if (size < sizeof(fc_conn_event)) return;
      view.conn = static_cast<const fc_conn_event*>(data);
    } else {
      return;
    }
    bump(delivered);
    handler(view);
  }

  // A length-only stand-in for bytes record `d` covers without a call of their own, handed on
  // before it, so consumers see the stream exactly as if each had a record:
  // - calls the BPF side folded into it (hole_before, bpf/capture.bpf.c): a Kafka response's
  //   sendfiles, as the one sendfile record they add up to; an object body's reads, as one read
  //   of the carrying record's source;
  // - whole messages the BPF side left out right before it (quiet fetches, skipped_before), as
  //   one record of source FC_SRC_SKIPPED.
  void deliver_stand_in(fc_data_event& ev, const fc_data_event& d, std::uint64_t position,
                        std::uint32_t length, std::uint8_t source) {
    ev = fc_data_event{};
    ev.c = d.c;
    ev.c.flags = 0;
    ev.c.skipped_before = 0;
    ev.stream_pos = position;
    ev.length = length;
    ev.direction = d.direction;
    ev.source = source;
    EventView view{ev.c};
    view.data = &ev;
    view.folded = source != FC_SRC_SKIPPED;
    view.skipped = source == FC_SRC_SKIPPED;
    bump(delivered);
    handler(view);
  }

  void deliver_conn(const fc_conn_event& ev) {
    EventView view{ev.c};
    view.conn = &ev;
    bump(delivered);
    handler(view);
  }

  bool tls_skipped(const TlsLibrary& lib) const {
    for (const auto& s : options.tls_skip)
      if (!s.empty() && (s == lib.flavour || lib.path.find(s) != std::string::npos)) return true;
    return false;
  }

  bpf_program* entry_program(const std::string& fn) {
    if (fn == "SSL_read") return skel->progs.tls_ossl_read;
    if (fn == "SSL_write") return skel->progs.tls_ossl_write;
    if (fn == "SSL_read_ex") return skel->progs.tls_ossl_read_ex;
    if (fn == "SSL_write_ex") return skel->progs.tls_ossl_write_ex;
    if (fn == "gnutls_record_recv") return skel->progs.tls_gnutls_recv;
    if (fn == "gnutls_record_send") return skel->progs.tls_gnutls_send;
    return nullptr;
  }

  void attach_tls(pid_t pid, Target& target) {
    for (const TlsLibrary& lib : find_tls_libraries(pid)) {
      TlsAttachment att{lib.path, lib.flavour, {}, false, {}};
      if (tls_skipped(lib)) {
        att.skipped = true;
        target.status.tls.push_back(att);
        continue;
      }
      for (const std::string& fn : lib.functions) {
        bpf_program* entry = entry_program(fn);
        if (!entry) continue;
        LIBBPF_OPTS(bpf_uprobe_opts, enter_opts, .func_name = fn.c_str());
        LIBBPF_OPTS(bpf_uprobe_opts, exit_opts, .retprobe = true, .func_name = fn.c_str());
        bpf_link* in =
            bpf_program__attach_uprobe_opts(entry, pid, lib.host_path.c_str(), 0, &enter_opts);
        if (!in) {
          att.error = "cannot attach uprobe " + fn + ": " + errno_text(errno);
          continue;
        }
        target.links.emplace_back(in);
        bpf_link* out = bpf_program__attach_uprobe_opts(skel->progs.tls_exit, pid,
                                                        lib.host_path.c_str(), 0, &exit_opts);
        if (!out) {
          att.error = "cannot attach uretprobe " + fn + ": " + errno_text(errno);
          target.links.pop_back();
          continue;
        }
        target.links.emplace_back(out);
        ++target.tls_hooks;
        att.functions.push_back(fn);
      }
      target.status.tls.push_back(att);
    }
    __atomic_add_fetch(&skel->bss->tls_hooks, target.tls_hooks, __ATOMIC_SEQ_CST);
  }
};

Capture::Capture(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Capture::~Capture() = default;

Result<std::unique_ptr<Capture>> Capture::open(const Options& options, EventHandler handler) {
  libbpf_set_print(print_libbpf);
  auto impl = std::make_unique<Impl>(options);
  impl->handler = std::move(handler);
  if (options.pass_interval_ms < 1 || options.pass_interval_ms > Impl::kIdlePassMs)
    return make_error("the capture's pass interval must be from 1 to 100 ms, not " +
                      std::to_string(options.pass_interval_ms));
  if (options.drain_yields &&
      (options.drain_yield_backlog_bytes == 0 || options.drain_yield_away_ms < 1))
    return make_error(
        "a yielding drain needs a backlog mark above 0 bytes and an away time of "
        "at least 1 ms");
  if (options.gather_slots == 0 || options.gather_slots > 65536 ||
      (options.gather_slots & (options.gather_slots - 1)) != 0)
    return make_error("the capture's gather slots must be a power of two from 1 to 65536, not " +
                      std::to_string(options.gather_slots));
  if (options.program_stats) hold_program_stats();
  impl->cpus = libbpf_num_possible_cpus();
  if (impl->cpus <= 0) return make_error("cannot count CPUs: " + errno_text(impl->cpus));
  if (impl->cpus > FC_MAX_CPUS)
    return make_error("this machine has " + std::to_string(impl->cpus) +
                      " possible CPUs; fetchcost supports up to " + std::to_string(FC_MAX_CPUS));

  const bool has_sock_tp = kernel_has_sock_tracepoints();
  impl->variant = options.variant;
  if (impl->variant == Variant::kAuto)
    impl->variant = has_sock_tp ? Variant::kSockTracepoints : Variant::kSyscallTracepoints;
  if (impl->variant == Variant::kSockTracepoints && !has_sock_tp)
    return make_error(
        "this kernel lacks the sock_send_length/sock_recv_length tracepoints (Linux >= 6.3): "
        "use the syscall-tracepoint variant (--capture-variant=syscall-tracepoints or auto)");
  if (impl->variant == Variant::kSyscallTracepoints && !kernel_has_task_pt_regs())
    impl->variant = Variant::kSyscallEntryExit;  // Linux < 5.15: the same hooks, in pairs

  impl->ring_bytes = round_up_pow2(options.ring_bytes_per_cpu);
  if (options.wakeup_bytes >= impl->ring_bytes)
    return make_error("the wakeup mark (" + std::to_string(options.wakeup_bytes) +
                      " bytes) must be below the ring's size (" + std::to_string(impl->ring_bytes) +
                      " bytes): records that arrive while the reader wakes need the rest (lower "
                      "capture.wakeup_kib or raise capture.ring_kib_per_cpu)");
  // The ring buffers are created first: their size is the one the verifier checks every inner
  // map against (the first one doubles as the array's inner-map template).
  for (int cpu = 0; cpu < impl->cpus; ++cpu) {
    int fd = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "fc_ring", 0, 0,
                            static_cast<__u32>(impl->ring_bytes), nullptr);
    if (fd < 0)
      return make_error("cannot create a " + std::to_string(impl->ring_bytes) +
                        "-byte ring buffer: " + errno_text(errno) +
                        " (lower the ring size or raise the memory limit)");
    impl->ring_fds.push_back(fd);
  }

  // Opens and loads the object for impl->variant; returns the load's error (0: loaded).
  const bool state_tp = kernel_has_state_tracepoint();
  auto open_and_load = [&]() -> Result<int> {
    if (impl->skel) fetchcost_capture__destroy(impl->skel);
    impl->skel = fetchcost_capture__open();
    if (!impl->skel) return make_error("cannot open the BPF object: " + errno_text(errno));
    const bool by_syscall = impl->variant != Variant::kSockTracepoints;
    impl->skel->rodata->cfg_record_ciphertext = options.deliver_tls_ciphertext;
    impl->skel->rodata->cfg_skip_quiet_fetches = options.skip_quiet_fetches && !by_syscall;
    impl->wakeup_bytes =
        options.wakeup_bytes ? options.wakeup_bytes : default_wakeup_bytes(impl->ring_bytes);
    impl->skel->rodata->cfg_wakeup_bytes = impl->wakeup_bytes;
    // Feature probe result: load exactly one socket variant; TLS programs load always (they are
    // attached per target later, by hand). The fallback also takes the TCP state tracepoint
    // when the kernel has it, for connections that end without a close() (resets, exit).
    bpf_program* prog;
    bpf_object__for_each_program(prog, impl->skel->obj) {
      const char* name = bpf_program__name(prog);
      const bool load = is_tls_program(name) || std::strcmp(name, "exec_seen") == 0 ||
                        (by_syscall ? is_syscall_program(name, impl->variant) ||
                                          (state_tp && std::strcmp(name, "sock_set_state") == 0)
                                    : is_sock_program(name));
      bpf_program__set_autoload(prog, load);
    }
    // The exec hook only spares the search for targets its reads: attached on its own, so that
    // a kernel that refuses it still captures (take_execs() then says every process is to read).
    bpf_program__set_autoattach(impl->skel->progs.exec_seen, false);
    // The fallback keeps connections in a hash keyed by socket address; the sock variant keeps
    // them in socket-local storage and leaves the hash empty (one entry per CPU, not 64 Ki
    // preallocated ones: about 10 MiB of kernel memory).
    impl->skel->rodata->cfg_conns_by_address = by_syscall;
    if (!by_syscall)
      bpf_map__set_max_entries(impl->skel->maps.conns, static_cast<__u32>(impl->cpus));
    // Only the entry-exit pairs carry arguments in a map (16 Ki preallocated entries).
    if (impl->variant != Variant::kSyscallEntryExit)
      bpf_map__set_max_entries(impl->skel->maps.sc_inflight, 1);
    // Gather slots (1.2 KiB each) serve the sock variant's programs alone.
    const __u32 gather_slots = by_syscall ? 1 : options.gather_slots;
    bpf_map__set_max_entries(impl->skel->maps.gather_slots, gather_slots);
    // Request slots hold quiet fetches' requests (1.3 MiB); without them, one unused entry.
    bpf_map__set_max_entries(impl->skel->maps.request_slots,
                             options.skip_quiet_fetches && !by_syscall ? 1024 : 1);
    impl->skel->rodata->cfg_gather_slot_mask = gather_slots - 1;
    bpf_map__set_max_entries(impl->skel->maps.ringbufs, static_cast<__u32>(impl->cpus));
    bpf_map__set_max_entries(impl->skel->maps.execs, std::max<__u32>(options.execs_kept, 1));
    bpf_map__set_max_entries(impl->skel->maps.scratch, static_cast<__u32>(impl->cpus));
    if (bpf_map__set_inner_map_fd(impl->skel->maps.ringbufs, impl->ring_fds[0]) != 0)
      return make_error("cannot set the ring buffer template: " + errno_text(errno));
    const auto load_start = std::chrono::steady_clock::now();
    const int err =
        impl->variant == Variant::kSyscallTracepoints && options.test_refuse_syscall_exit_programs
            ? -EACCES
            : fetchcost_capture__load(impl->skel);
    impl->load_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    return err;
  };
  auto load_err = open_and_load();
  if (!load_err.ok()) return load_err.error();
  if (*load_err != 0 && impl->variant == Variant::kSyscallTracepoints) {
    // The exit programs read saved registers through trusted task pointers, which a kernel's
    // verifier may refuse even where the helper exists: the pairs need neither.
    std::fprintf(stderr,
                 "fetchcost: the kernel refused the syscall exit programs (%s); loading the "
                 "entry-exit pairs instead\n",
                 errno_text(*load_err).c_str());
    impl->variant = Variant::kSyscallEntryExit;
    load_err = open_and_load();
    if (!load_err.ok()) return load_err.error();
  }
  if (int err = *load_err; err != 0) {
    return make_error(std::string("the kernel refused fetchcost's BPF programs (") +
                      errno_text(err) + ", variant " + variant_name(impl->variant) +
                      "); the verifier log above says why. fetchcost needs Linux >= 5.8 with "
                      "BTF (>= 6.3 for the sock-tracepoint variant)");
  }

  const int outer_fd = bpf_map__fd(impl->skel->maps.ringbufs);
  for (int cpu = 0; cpu < impl->cpus; ++cpu) {
    const int fd = impl->ring_fds[static_cast<std::size_t>(cpu)];
    __u32 key = static_cast<__u32>(cpu);
    if (bpf_map_update_elem(outer_fd, &key, &fd, BPF_ANY) != 0)
      return make_error("cannot install the ring buffer of CPU " + std::to_string(cpu) + ": " +
                        errno_text(errno));
    auto reader = std::make_unique<Impl::RingReader>();
    reader->spool = &impl->spool;
    reader->rb = ring_buffer__new(fd, &Impl::on_sample, reader.get(), nullptr);
    if (!reader->rb) return make_error("cannot map ring buffer: " + errno_text(errno));
    // Unmapped, the ring counts as never empty: flush() asks for a pass, as before.
    reader->consumer_page = mmap(nullptr, Impl::page_bytes(), PROT_READ, MAP_SHARED, fd, 0);
    reader->producer_page = mmap(nullptr, Impl::page_bytes(), PROT_READ, MAP_SHARED, fd,
                                 static_cast<off_t>(Impl::page_bytes()));
    impl->readers.push_back(std::move(reader));
  }

  // Attach the socket programs (the TLS ones have no attach target in their SEC and are
  // skipped by the skeleton's auto-attach).
  if (int err = fetchcost_capture__attach(impl->skel); err != 0) {
    return make_error("cannot attach fetchcost's BPF programs: " + errno_text(err) +
                      (impl->variant != Variant::kSockTracepoints ? kTracefsHint : ""));
  }
  impl->exec_link.reset(bpf_program__attach(impl->skel->progs.exec_seen));
  if (!impl->exec_link) impl->exec_error = "cannot attach the exec hook: " + errno_text(errno);
  if (impl->variant != Variant::kSockTracepoints) {
    // One program per role, attached to every syscall it serves (no auto-attach in its SEC).
    const bool pairs = impl->variant == Variant::kSyscallEntryExit;
    std::vector<std::pair<bpf_program*, std::string>> hooks{
        {impl->skel->progs.sc_enter, "sys_enter_close"}};
    for (const char* call : kSyscallsTraced) {
      if (pairs) hooks.emplace_back(impl->skel->progs.sc_enter, std::string("sys_enter_") + call);
      hooks.emplace_back(pairs ? impl->skel->progs.sc_exit : impl->skel->progs.sc_ret,
                         std::string("sys_exit_") + call);
    }
    for (const auto& [prog, tracepoint] : hooks) {
      bpf_link* link = bpf_program__attach_tracepoint(prog, "syscalls", tracepoint.c_str());
      if (!link)
        return make_error("cannot attach fetchcost's BPF programs to syscalls:" + tracepoint +
                          ": " + errno_text(errno) + kTracefsHint);
      impl->syscall_links.emplace_back(link);
    }
  }
  impl->wait_fd = epoll_create1(EPOLL_CLOEXEC);
  impl->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  impl->pass_done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl->wait_fd < 0 || impl->kick_fd < 0 || impl->pass_done_fd < 0)
    return make_error("cannot set up the ring reader: " + errno_text(errno));
  std::vector<int> waited{impl->kick_fd};
  for (const auto& r : impl->readers) waited.push_back(ring_buffer__epoll_fd(r->rb));
  for (int fd : waited) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    if (epoll_ctl(impl->wait_fd, EPOLL_CTL_ADD, fd, &ev) != 0)
      return make_error("cannot set up the ring reader: " + errno_text(errno));
  }
  Impl* self = impl.get();
  impl->reader = std::thread([self] { self->run_reader(); });
  if (options.realtime_reader) {
    sched_param param{};
    param.sched_priority = 1;  // the lowest real-time priority: above every normal thread
    const int rc = pthread_setschedparam(impl->reader.native_handle(), SCHED_FIFO, &param);
    impl->reader_realtime = rc == 0;
    if (rc != 0)
      impl->reader_priority_error = "cannot make the ring reader a real-time thread (" +
                                    errno_text(rc) +
                                    "): it runs at normal priority, so ring-buffer drops are more "
                                    "likely when the host's CPUs are all busy; grant "
                                    "CAP_SYS_NICE or set capture.realtime_reader to false";
  }
  return std::unique_ptr<Capture>(new Capture(std::move(impl)));
}

Result<TargetStatus> Capture::add_target(pid_t tgid) {
  return add_target(tgid, impl_->options.default_policy);
}

Result<TargetStatus> Capture::add_target(pid_t tgid, const Policy& policy) {
  if (tgid <= 0 || static_cast<std::uint32_t>(tgid) >= FC_MAX_TGID)
    return make_error("cannot watch process " + std::to_string(tgid) +
                      ": process ids must be below " + std::to_string(FC_MAX_TGID));
  // The programs test only the target bit (is_target), so this is what keeps fetchcostd's own
  // socket calls (its exporter's) out of its capture.
  if (tgid == getpid())
    return make_error("cannot watch process " + std::to_string(tgid) +
                      ": it is fetchcostd itself; give the broker's pid");
  fc_target target{};
  target.default_policy = to_abi(policy);
  __u32 key = static_cast<__u32>(tgid);
  if (bpf_map__update_elem(impl_->skel->maps.targets, &key, sizeof(key), &target, sizeof(target),
                           BPF_ANY) != 0)
    return make_error("cannot watch process " + std::to_string(tgid) + ": " + errno_text(errno));
  impl_->set_target_bit(key, true);  // after the map entry: the programs look it up
  impl_->bump_policy_epoch();

  auto existing = impl_->targets.find(tgid);
  if (existing != impl_->targets.end()) {
    existing->second.status.policy = policy;
    return existing->second.status;
  }
  Impl::Target& t = impl_->targets[tgid];
  t.status.pid = tgid;
  t.status.comm = comm_of(tgid);
  t.status.policy = policy;
  if (impl_->options.tls) impl_->attach_tls(tgid, t);
  if (impl_->options.scan_existing_connections) {
    const auto conns = scan_connections(tgid);
    t.status.existing_connections = conns.size();
    for (const auto& c : conns) impl_->deliver_conn(c);
  }
  return t.status;
}

void Capture::remove_target(pid_t tgid) {
  __u32 key = static_cast<__u32>(tgid);
  if (key < FC_MAX_TGID) impl_->set_target_bit(key, false);
  bpf_map__delete_elem(impl_->skel->maps.targets, &key, sizeof(key), 0);
  auto it = impl_->targets.find(tgid);
  if (it == impl_->targets.end()) return;
  __atomic_sub_fetch(&impl_->skel->bss->tls_hooks, it->second.tls_hooks, __ATOMIC_SEQ_CST);
  impl_->targets.erase(it);  // detaches its uprobes
  // TLS calls in flight when the uprobes went away never return through them: forget them.
  const int calls_fd = bpf_map__fd(impl_->skel->maps.tls_calls);
  std::vector<__u32> stale;
  __u32 tid = 0, next = 0;
  bool first = true;
  while (bpf_map_get_next_key(calls_fd, first ? nullptr : &tid, &next) == 0) {
    first = false;
    tid = next;
    fc_tls_call call{};
    if (bpf_map_lookup_elem(calls_fd, &tid, &call) == 0 && call.tgid == key) stale.push_back(tid);
  }
  for (__u32 t : stale)
    if (bpf_map_delete_elem(calls_fd, &t) == 0)
      __atomic_sub_fetch(&impl_->skel->bss->tls_calls_open, 1, __ATOMIC_SEQ_CST);
}

std::vector<pid_t> Capture::targets() const {
  std::vector<pid_t> out;
  for (const auto& [pid, t] : impl_->targets) out.push_back(pid);
  return out;
}

Result<void> Capture::set_port_policy(std::uint16_t port, bool peer_side, const Policy& policy) {
  fc_port_key key{port, static_cast<fc_u8>(peer_side ? 1 : 0), 0};
  fc_policy value = to_abi(policy);
  if (bpf_map__update_elem(impl_->skel->maps.port_policy, &key, sizeof(key), &value, sizeof(value),
                           BPF_ANY) != 0)
    return make_error("cannot set the capture policy of port " + std::to_string(port) + ": " +
                      errno_text(errno) + " (at most 1024 port rules)");
  impl_->bump_policy_epoch();
  return {};
}

void Capture::clear_port_policy(std::uint16_t port, bool peer_side) {
  fc_port_key key{port, static_cast<fc_u8>(peer_side ? 1 : 0), 0};
  bpf_map__delete_elem(impl_->skel->maps.port_policy, &key, sizeof(key), 0);
  impl_->bump_policy_epoch();
}

Result<void> Capture::set_connection_policy(std::uint64_t conn_id, const Policy& policy) {
  fc_policy value = to_abi(policy);
  if (bpf_map__update_elem(impl_->skel->maps.conn_policy, &conn_id, sizeof(conn_id), &value,
                           sizeof(value), BPF_ANY) != 0)
    return make_error("cannot set the capture policy of connection " + std::to_string(conn_id) +
                      ": " + errno_text(errno));
  impl_->bump_policy_epoch();
  return {};
}

void Capture::clear_connection_policy(std::uint64_t conn_id) {
  bpf_map__delete_elem(impl_->skel->maps.conn_policy, &conn_id, sizeof(conn_id), 0);
  impl_->bump_policy_epoch();
}

Result<int> Capture::poll(int timeout_ms) {
  // The reader thread hands records over when the rings wake it (see cfg_wakeup_bytes) or
  // every 100 ms: wait for that or the timeout, then handle everything handed over.
  if (const int err = impl_->reader_error.load(); err != 0)
    return make_error("reading ring buffers failed: " + errno_text(err));
  if (impl_->options.drain_yields && !impl_->drain_checked) impl_->start_yielding();
  // Waiting for records (below, and in flush(), whose pass the reader steers the drain in) is
  // the only time the drain is not away (Impl::steer_drain); decoding them is.
  impl_->drain_steering.set_away_since(0);
  if (timeout_ms != 0 && impl_->spool.held_bytes() == 0) {
    pollfd wake{impl_->spool.wake_fd(), POLLIN, 0};
    if (::poll(&wake, 1, timeout_ms) < 0 && errno != EINTR)
      return make_error("waiting for ring buffers failed: " + errno_text(errno));
  }
  // Nothing handed over (no ring crossed its wakeup mark): read what the rings hold now, as a
  // drain reading them itself would.
  if (impl_->spool.held_bytes() == 0) impl_->flush();
  impl_->drain_steering.set_away_since(monotonic_ns());
  // Loaded before the take: the pass it names published before, so its records are taken now.
  const std::uint64_t through =
      std::max(impl_->published_through_ns.load(std::memory_order_acquire), impl_->idle_through_ns);
  const std::size_t n = impl_->spool.take(
      [this](const void* data, std::size_t size) { impl_->handle_sample(data, size); });
  impl_->handed_through_ns = std::max(impl_->handed_through_ns, through);
  return static_cast<int>(n);
}

std::uint64_t Capture::handed_through_ns() const {
  return impl_->handed_through_ns;
}

std::vector<Counters> Capture::per_cpu() const {
  std::vector<Counters> result(static_cast<std::size_t>(impl_->cpus));
  std::vector<__u64> values(static_cast<std::size_t>(impl_->cpus));
  auto read = [&](__u32 which, std::uint64_t Counters::*field) {
    if (bpf_map__lookup_elem(impl_->skel->maps.counters, &which, sizeof(which), values.data(),
                             values.size() * sizeof(__u64), 0) != 0)
      return;
    for (std::size_t i = 0; i < values.size(); ++i) result[i].*field = values[i];
  };
  read(FC_COUNTER_EVENTS, &Counters::events);
  read(FC_COUNTER_DROPS, &Counters::drops);
  read(FC_COUNTER_COPY_FAULTS, &Counters::copy_faults);
  read(FC_COUNTER_TLS_EVENTS, &Counters::tls_events);
  read(FC_COUNTER_CONN_EVENTS, &Counters::conn_events);
  read(FC_COUNTER_FOLDED, &Counters::folded);
  read(FC_COUNTER_GATHERED, &Counters::gathered);
  read(FC_COUNTER_CIPHERTEXT_SKIPPED, &Counters::ciphertext_skipped);
  read(FC_COUNTER_GATHER_NO_SLOT, &Counters::gather_no_slot);
  read(FC_COUNTER_WAKEUPS, &Counters::wakeups);
  read(FC_COUNTER_QUIET_FETCHES, &Counters::quiet_fetches);
  read(FC_COUNTER_HOLD_PAUSES, &Counters::hold_pauses);
  std::vector<fc_body_hint> hints(static_cast<std::size_t>(impl_->cpus));
  const __u32 zero = 0;
  if (bpf_map__lookup_elem(impl_->skel->maps.body_hints, &zero, sizeof(zero), hints.data(),
                           hints.size() * sizeof(fc_body_hint), 0) == 0)
    for (std::size_t i = 0; i < hints.size(); ++i) {
      result[i].folded_by_hint = hints[i].reads;
      result[i].folded += hints[i].reads;
    }
  return result;
}

namespace {

Counters sum_of(const std::vector<Counters>& per_cpu) {
  Counters sum;
  for (const auto& c : per_cpu) {
    sum.events += c.events;
    sum.drops += c.drops;
    sum.copy_faults += c.copy_faults;
    sum.tls_events += c.tls_events;
    sum.conn_events += c.conn_events;
    sum.folded += c.folded;
    sum.folded_by_hint += c.folded_by_hint;
    sum.gathered += c.gathered;
    sum.ciphertext_skipped += c.ciphertext_skipped;
    sum.gather_no_slot += c.gather_no_slot;
    sum.wakeups += c.wakeups;
    sum.quiet_fetches += c.quiet_fetches;
    sum.hold_pauses += c.hold_pauses;
  }
  return sum;
}

}  // namespace

std::optional<std::vector<pid_t>> Capture::take_execs() {
  if (!impl_->exec_link) return std::nullopt;
  const int fd = bpf_map__fd(impl_->skel->maps.execs);
  std::vector<__u32> keys;
  __u32 next = 0;
  while (bpf_map_get_next_key(fd, keys.empty() ? nullptr : &keys.back(), &next) == 0)
    keys.push_back(next);
  // Deleted before the caller reads them: a process that execs again meanwhile is listed anew.
  for (__u32 k : keys) bpf_map_delete_elem(fd, &k);
  if (keys.size() >= impl_->options.execs_kept) return std::nullopt;  // full: execs refused
  return std::vector<pid_t>(keys.begin(), keys.end());
}

Counters Capture::totals() const {
  return sum_of(per_cpu());
}

int Capture::cpu_count() const {
  return impl_->cpus;
}
Variant Capture::variant() const {
  return impl_->variant;
}

Status Capture::status() const {
  Status s;
  s.variant = impl_->variant;
  s.ring_bytes_per_cpu = impl_->ring_bytes;
  s.wakeup_bytes = impl_->wakeup_bytes;
  s.load_seconds = impl_->load_seconds;
  bpf_program* prog;
  bpf_object__for_each_program(prog, impl_->skel->obj) {
    if (!bpf_program__autoload(prog)) continue;
    const char* name = bpf_program__name(prog);
    if (is_tls_program(name) && impl_->skel->bss->tls_hooks == 0) continue;
    ProgramStatus p{name, 0, 0};
    bpf_prog_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) == 0) {
      p.run_time_ns = info.run_time_ns;
      p.run_count = info.run_cnt;
      p.verified_insns = info.verified_insns;
    }
    s.programs.push_back(p);
  }
  if (impl_->options.program_stats) {
    auto& hold = program_stats_hold();
    std::lock_guard lock(hold.mutex);
    s.program_stats.held = hold.fd >= 0;
    s.program_stats.error = hold.error;
  }
  s.program_stats.kernel_timing = s.program_stats.held || host_times_programs();
  for (const auto& [pid, t] : impl_->targets) s.targets.push_back(t.status);
  s.counters_read_unix_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count();
  s.per_cpu = per_cpu();
  s.totals = sum_of(s.per_cpu);
  s.delivered = impl_->delivered.load(std::memory_order_relaxed);
  s.folded_read_pieces = impl_->folded_read_pieces.load(std::memory_order_relaxed);
  s.reader_realtime = impl_->reader_realtime;
  s.reader_priority_error = impl_->reader_priority_error;
  s.spool_bytes = impl_->spool.held_bytes();
  s.spool_peak_bytes = impl_->spool.peak_bytes();
  s.reader_passes = impl_->passes.load(std::memory_order_relaxed);
  s.reader_pass_max_seconds =
      static_cast<double>(impl_->pass_max_ns.load(std::memory_order_relaxed)) / 1e9;
  s.idle_polls = impl_->flushes_skipped.load(std::memory_order_relaxed);
  s.spool_limit_bytes = impl_->spool.max_bytes();
  s.drain_yields = impl_->drain_steering.yielding();
  s.drain_idle = impl_->drain_steering.idle();
  s.drain_promotions = impl_->drain_steering.promotions();
  {
    std::lock_guard lock(impl_->drain_mutex);
    s.drain_priority_error = impl_->drain_priority_error;
  }
  s.tls_calls_in_progress = __atomic_load_n(&impl_->skel->bss->tls_calls_open, __ATOMIC_RELAXED);
  s.exec_hook_error = impl_->exec_error;
  return s;
}

}  // namespace fc::capture
