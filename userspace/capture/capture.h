// capture: loads fetchcost's BPF programs into the kernel, tells them which processes to watch
// and how much to copy per connection role, attaches TLS uprobes per target, and drains the
// per-CPU ring buffers into a callback, one record at a time. Record layouts: fetchcost_abi.h.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "fetchcost_abi.h"

namespace fc::capture {

// Checks the things fetchcostd needs from the machine before it touches BPF, in the order a user
// would fix them: privileges, BTF, tracefs (mounted here when it can be), memlock.
Result<void> check_environment();

// Which socket hooks to load. kAuto picks the sock tracepoints when the kernel has them
// (Linux >= 6.3), else the syscall tracepoints. kSyscallTracepoints loads exit programs alone,
// which read a call's arguments from the registers saved at its entry (bpf_task_pt_regs,
// Linux >= 5.15), and becomes kSyscallEntryExit where the kernel lacks that helper: entry and
// exit programs, the arguments kept in a map between them (Linux >= 5.8).
enum class Variant { kAuto, kSockTracepoints, kSyscallTracepoints, kSyscallEntryExit };
const char* variant_name(Variant v);

// How many bytes to copy for a connection: per call and per iovec (writev/sendmsg/readv/recvmsg).
struct Policy {
  std::uint32_t bytes_per_call = 4096;   // <= FC_MAX_CAPTURE
  std::uint32_t bytes_per_iovec = 4096;  // each iovec's prefix, within bytes_per_call
  fc_role role = FC_ROLE_OTHER;
  // Bulk runs (fc_policy in fetchcost_abi.h): a call moving >= bulk_from bytes that follows
  // another such call in the same direction, nothing moved the other way in between, is inside
  // a message body (records, an object) and copies at most bulk_bytes. The decoders need
  // message headers, which start a run; copying bodies is most of the capture's cost at large
  // writes. Within a vectored send, an iovec of >= bulk_from bytes is a body too (records
  // between a Fetch response's headers) and gives bulk_bytes. bulk_from = 0 turns both off.
  std::uint32_t bulk_from = 16384;
  std::uint32_t bulk_bytes = 256;
  // Object-store connections (FC_ROLE_OBJECT_STORE, bulk_from != 0): a response's first read
  // copies at most this (its HTTP header; 0 = bytes_per_call), the reads after it none.
  std::uint16_t head_bytes = 2048;
};

// The wakeup mark of a ring of this size when Options::wakeup_bytes is 0: half the ring, at most
// 512 KiB. A small ring (1 MiB, the default) costs the broker less per record than a large one,
// its memory being written again sooner, and with half of it as the mark wakes the reader no
// more often than a 4 MiB ring with 512 KiB (docs/performance.md, "Session 38", "Session 39").
constexpr std::size_t default_wakeup_bytes(std::size_t ring_bytes) {
  return std::min(ring_bytes / 2, std::size_t{512} << 10);
}

struct Options {
  std::size_t ring_bytes_per_cpu = 1u << 20;  // rounded up to a power of two, >= page size
  // A ring wakes the reader when its unread data crosses this (0 = default_wakeup_bytes; below
  // the ring's size); otherwise records wait for the reader's next pass (pass_interval_ms).
  // Each wakeup costs the broker's thread an interrupt and a wakeup across CPUs: tens of us on
  // a KVM guest. The rest of the ring holds the records that arrive while the reader wakes.
  std::size_t wakeup_bytes = 0;
  Policy default_policy;             // for targets added without their own policy
  Variant variant = Variant::kAuto;  // kSyscall*: force a fallback
  bool tls = true;                   // attach TLS uprobes to targets' TLS libraries
  // TLS libraries NOT to hook: "openssl", "boringssl", "gnutls", or a substring of a library
  // path (e.g. "libgnutls"). A skipped library's connections stay ciphertext.
  std::vector<std::string> tls_skip;
  // Raw (ciphertext) data events of connections whose TLS plaintext is captured are neither
  // recorded nor delivered unless this is set; they are length-only in any case.
  bool deliver_tls_ciphertext = false;
  // Report the connections a target already holds when it is added (FC_ORIGIN_PROC_SCAN).
  bool scan_existing_connections = true;
  // Run the thread that moves records out of the rings at real-time priority (SCHED_FIFO 1;
  // needs CAP_SYS_NICE). Its work is a copy per record; at normal priority it can wait on the
  // run queue behind a busy broker while the rings overflow.
  bool realtime_reader = true;
  // While records flow, the reader hands what the rings hold to the drain at least every this
  // many ms (a ring crossing wakeup_bytes wakes it sooner); idle, every 100 ms. Each hand-over
  // is one pass of the drain, which holds a CPU while it decodes, a wait for a broker or client
  // thread woken onto that CPU. Shorter passes cost more wakeups: at 8,000 fetches/s, 10 ms
  // made them about a third as long and fetchcostd's CPU twice as much (docs/performance.md,
  // "Session 24"). 1 to 100.
  int pass_interval_ms = 100;
  // The drain (the thread that calls poll()) runs at SCHED_IDLE while it keeps up: a broker or
  // client thread woken onto its CPU then preempts it at once, instead of waiting for the rest
  // of its pass. The reader makes it a normal thread again (SCHED_OTHER, its nice value kept)
  // while the records it has not taken reach drain_yield_backlog_bytes, or while it has been
  // away from its wait for records in poll() for drain_yield_away_ms (decoding, other work, or
  // starved by a host whose CPUs are all busy), and back to SCHED_IDLE once it waits again
  // with an eighth of that backlog or less. Needs CAP_SYS_NICE (to leave SCHED_IDLE); without it
  // the drain keeps its priority and Status::drain_priority_error says why.
  bool drain_yields = false;
  std::size_t drain_yield_backlog_bytes = 8u << 20;
  int drain_yield_away_ms = 500;
  // Slots for gathering the sends of Kafka responses in flight into one record each (sock
  // variant; 1.2 KiB of kernel memory each). A response holds one from its first send until its
  // record leaves; a connection may use two (by its id), and when both are busy its response
  // keeps a record per send (Counters::gather_no_slot). A power of two, 1 to 65,536.
  std::uint32_t gather_slots = 1024;
  // Have the kernel time every run of every BPF program (bpf_prog_info run_time_ns and
  // run_cnt, in ProgramStatus): a BPF_ENABLE_STATS fd, taken by the first open() that asks and
  // held until fetchcostd exits (it needs CAP_SYS_ADMIN, which is dropped after the first open;
  // a capture opened again later finds it held). Timing costs each run two clock reads
  // (docs/performance.md, "Session 29" in "Capture (BPF)").
  bool program_stats = false;
  // Leave out quiet fetches (sock variant; fetchcost_abi.h, "Quiet fetches"): a Fetch request
  // no session state depends on (sessionless, or incremental and listing nothing) is held in a slot
  // until its response starts; if the broker made no send on a connection other than a Kafka
  // client's meanwhile (no GET can belong to it), neither it nor its response gets a record, and
  // the records after them report their bytes, delivered as EventView::skipped stand-ins. Any such
  // send reports the requests held first.
  bool skip_quiet_fetches = false;
  // Processes that exec'd kept between two take_execs() calls (a hash map of 4-byte keys in
  // kernel memory); more in between, and take_execs() says some are missing.
  std::uint32_t execs_kept = 4096;
  // Tests: act as a kernel whose verifier refuses the syscall exit programs (the loader then
  // falls back to the entry-exit pairs), a path no kernel that runs the tests takes.
  bool test_refuse_syscall_exit_programs = false;
};

struct Counters {
  std::uint64_t events = 0;  // records written into the ring buffers
  std::uint64_t drops = 0;   // records lost because a ring buffer was full
  std::uint64_t copy_faults = 0;
  std::uint64_t tls_events = 0;
  std::uint64_t conn_events = 0;
  // calls reported by a later record, none of their own: a Kafka response's sendfiles, an
  // object body's reads that left bytes queued behind them
  std::uint64_t folded = 0;
  // of `folded`: object-body reads folded by a CPU's body hint, without the connection's state
  // being looked up (sock variant; fetchcost_abi.h, fc_body_hint)
  std::uint64_t folded_by_hint = 0;
  std::uint64_t gathered = 0;  // sends gathered into a response's record (none of their own)
  // socket calls of connections whose TLS plaintext is seen: counted, not recorded
  std::uint64_t ciphertext_skipped = 0;
  // responses not gathered because both of their gather slots were busy (a record per send)
  std::uint64_t gather_no_slot = 0;
  // times a program woke the ring reader because a ring's unread data reached the wakeup mark
  // (a reader that keeps up on its own passes is not woken)
  std::uint64_t wakeups = 0;
  // fetches left out whole (Options::skip_quiet_fetches): no store send in their window
  std::uint64_t quiet_fetches = 0;
  // connections whose held requests object-store sends reported 8 times in a row (a consumer
  // reading from the remote tier): each time, the next 128 requests were recorded unheld but
  // for every 16th, held as a probe (a quiet one ends the pause)
  std::uint64_t hold_pauses = 0;
};

// One record as the BPF side wrote it. For DATA/TLS_DATA `data` is set, `payload` holds the
// captured bytes (the segments' bytes in order) and `segments` says where they sit in the call;
// for CONNECT/CLOSE `conn` is set.
struct EventView {
  const fc_event_common& common;
  const fc_data_event* data = nullptr;
  const fc_conn_event* conn = nullptr;
  std::span<const std::uint8_t> payload;
  std::span<const fc_segment> segments;
  // Calls the BPF side folded into the next record (length only): a Kafka response's sendfiles
  // (source FC_SRC_SENDFILE) or an object body's reads (a receive source).
  bool folded = false;
  // Whole Kafka messages the BPF side left out (quiet fetches; length only, source
  // FC_SRC_SKIPPED): consumers move past them to the message boundary after them.
  bool skipped = false;
};
using EventHandler = std::function<void(const EventView&)>;

// A TLS library found in a target and the functions hooked in it.
struct TlsAttachment {
  std::string path;     // as the target sees it (from /proc/PID/maps)
  std::string flavour;  // "openssl" (1.1/3), "boringssl" (also statically linked) or "gnutls"
  std::vector<std::string> functions;
  bool skipped = false;  // found, but not hooked (Options::tls_skip)
  std::string error;     // why attaching failed, if it did
};

struct TargetStatus {
  pid_t pid = 0;
  std::string comm;
  Policy policy;
  std::vector<TlsAttachment> tls;
  std::size_t existing_connections = 0;  // found in /proc when the target was added
};

struct ProgramStatus {
  std::string name;
  std::uint64_t run_time_ns = 0;  // from bpf_prog_info; 0 unless BPF stats are enabled
  std::uint64_t run_count = 0;
  // Instructions the verifier walked to accept it (bpf_prog_info, Linux >= 5.16; else 0): its
  // limit is 1,000,000, and the load time grows with it.
  std::uint32_t verified_insns = 0;
};

// Whether the kernel times the programs' runs now (fetchcostd holds a BPF_ENABLE_STATS fd, or the
// sysctl kernel.bpf_stats_enabled is 1; another process's fd is not visible), whether fetchcostd
// holds one (Options::program_stats), or why it could not take it.
struct ProgramStatsStatus {
  bool kernel_timing = false;
  bool held = false;
  std::string error;
};

struct Status {
  Variant variant = Variant::kAuto;
  std::vector<ProgramStatus> programs;  // loaded socket programs (TLS ones when attached)
  ProgramStatsStatus program_stats;
  std::vector<TargetStatus> targets;
  std::size_t ring_bytes_per_cpu = 0;
  std::size_t wakeup_bytes = 0;  // a ring's unread bytes that wake the reader (Options)
  double load_seconds = 0;       // wall time the kernel took to load (verify) the programs
  // When status() read the counters below (CLOCK_REALTIME, ns). fetchcostd refreshes its status
  // about once a second: a rate from two statuses divides by the difference of this, not by
  // the time between the two requests.
  std::int64_t counters_read_unix_ns = 0;
  std::vector<Counters> per_cpu;
  Counters totals;
  std::uint64_t delivered = 0;  // records handed to the handler
  // receive pieces handed on for object-body reads the BPF side folded (each one or more reads)
  std::uint64_t folded_read_pieces = 0;
  bool reader_realtime = false;       // the ring reader runs at real-time priority
  std::string reader_priority_error;  // why not, when it was asked to
  // Records the ring reader moved out of the rings that the drain has not decoded yet (now, the
  // most at once, and the limit, past which the rings fill and drop).
  std::size_t spool_bytes = 0, spool_peak_bytes = 0, spool_limit_bytes = 0;
  std::uint64_t reader_passes = 0;  // the reader's passes that moved records (one drain pass each)
  // The longest pass of the ring reader (wall time): a real-time thread copying records takes
  // microseconds to milliseconds; far more means it waited (on memory, on a lock) while the
  // rings filled.
  double reader_pass_max_seconds = 0;
  // poll() calls that waited for records in vain and found the rings empty: no pass asked of
  // the reader (an idle capture's, mostly).
  std::uint64_t idle_polls = 0;
  // Options::drain_yields: the drain yields (it has been made SCHED_IDLE), is at SCHED_IDLE now,
  // and how often the reader made it a normal thread again; why it does not yield, if asked to.
  bool drain_yields = false;
  bool drain_idle = false;
  std::uint64_t drain_promotions = 0;
  std::string drain_priority_error;
  std::int64_t tls_calls_in_progress = 0;  // TLS library calls between their two probes
  std::string exec_hook_error;  // why the exec hook is not attached (take_execs() has no list)
};

class Capture {
 public:
  // Opens, configures, loads and attaches the programs. The handler is called from poll()
  // (and from add_target() for connections found in /proc).
  static Result<std::unique_ptr<Capture>> open(const Options& options, EventHandler handler);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // Starts watching a process: its socket calls, its TLS libraries (uprobes for this pid) and
  // its existing connections. Adding a watched pid again updates its policy only.
  Result<TargetStatus> add_target(pid_t tgid);
  Result<TargetStatus> add_target(pid_t tgid, const Policy& policy);
  // Stops watching and detaches its uprobes (also call this when the process has exited).
  void remove_target(pid_t tgid);
  std::vector<pid_t> targets() const;

  // Rules that pick a connection's policy: per connection id, else local port, else peer
  // port, else the target's default. Take effect on the connection's next call.
  Result<void> set_port_policy(std::uint16_t port, bool peer_side, const Policy& policy);
  void clear_port_policy(std::uint16_t port, bool peer_side);
  Result<void> set_connection_policy(std::uint64_t conn_id, const Policy& policy);
  void clear_connection_policy(std::uint64_t conn_id);

  // Waits up to timeout_ms for records, then hands every record the ring reader thread has
  // moved out of the ring buffers to the handler. Returns how many, or an error.
  Result<int> poll(int timeout_ms);
  // Every record stamped (monotonic clock) before this time has been handed to the handler by
  // the polls so far, or was dropped: the start of the ring reader's last pass those polls
  // took, or when a poll found the rings empty and no pass under way. A consumer that orders
  // the records of all CPUs may release what is older (less the microseconds between a
  // program's timestamp and its record's commit), never "now": records a later pass brings
  // may be stamped before the time of this poll (the drain took long decoding, or the reader
  // was late), and handed on after later ones they would pair a response with no request.
  std::uint64_t handed_through_ns() const;

  // Processes that ran a new program (exec) since the last call, from the exec hook, for the
  // search for targets; nullopt when some may be missing (more than Options::execs_kept in
  // between): then read every process instead.
  std::optional<std::vector<pid_t>> take_execs();

  Counters totals() const;
  std::vector<Counters> per_cpu() const;
  int cpu_count() const;
  Variant variant() const;
  Status status() const;

 private:
  struct Impl;
  explicit Capture(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Connections a process holds now, from /proc/PID/fd and /proc/PID/net/tcp{,6} (its own
// network namespace), as FC_EVENT_CONNECT records with origin FC_ORIGIN_PROC_SCAN and
// conn_id 0 (match them to later records by address). Listening sockets are skipped.
std::vector<fc_conn_event> scan_connections(pid_t pid);

// Executable file-backed mappings of a process and the TLS entry points each defines.
struct TlsLibrary {
  std::string path;       // as the process sees it
  std::string host_path;  // /proc/PID/root/... (inside its mount namespace)
  std::string flavour;    // "openssl", "boringssl" or "gnutls"
  std::vector<std::string> functions;
};
std::vector<TlsLibrary> find_tls_libraries(pid_t pid);

}  // namespace fc::capture
