// SPDX-License-Identifier: GPL-2.0
/* Socket and TLS capture: one ring-buffer record per socket send/receive (or TLS call) of a
 * target process, plus a record when a connection is first seen and when it closes.
 *
 * Two variants of the socket hooks live in this object; userspace loads exactly one
 * (bpf_program__set_autoload(false) on the other, chosen by a feature probe):
 *   sock_*      tp_btf/sock_send_length, tp_btf/sock_recv_length (Linux >= 6.3) and
 *               tp_btf/inet_sock_set_state: fire inside every socket send/receive with the
 *               struct sock, never for file I/O. The syscall's arguments come from the task's
 *               saved registers. Identity: the socket cookie. State: socket-local storage
 *               (`conn_store`), found from the socket without a hash lookup and freed with it.
 *   sc_*        tracepoint/syscalls/sys_{enter,exit}_* (Linux >= 5.8): the data calls, accept,
 *               accept4, connect, close; one program per role, attached by userspace to each of
 *               these. sc_ret alone (Linux >= 5.15: the arguments from the saved registers), or
 *               the pair sc_enter/sc_exit (the arguments kept in `sc_inflight` between them);
 *               sc_enter reports close() in both. The fd is resolved to its socket by CO-RE reads.
 *               Identity: a synthetic id per (socket, accept/connect/first sighting). State: the
 *               `conns` hash, keyed by the socket's address (a probe-read socket pointer
 *               cannot reach socket-local storage).
 * The TLS uprobes (tls_*) are shared; userspace attaches them per target process and library.
 *
 * Every program returns at once unless the current tgid is a target (`target_bits`, one load). */
#include "fc_kernel_types.h"
/* fc_kernel_types.h plays vmlinux.h: bpf_tracing.h then uses the kernel's pt_regs names. */
#define __VMLINUX_H__
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "fetchcost_abi.h"

char LICENSE[] SEC("license") = "GPL";

#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define TCP_CLOSE 7
#define MSG_PEEK 2
#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define PF_IO_WORKER 0x00000010

/* Set by userspace before load. */
/* Wake the reader only when a ring's unread data crosses this many bytes: a wakeup per record
 * (the ring buffer's default) costs an irq_work (an IPI, a VM exit under virtualisation) of
 * about a microsecond. Userspace polls with a timeout, so records never wait longer than it. */
const volatile __u64 cfg_wakeup_bytes = 1;
/* 1 when the syscall-tracepoint variant is loaded: sock_set_state (loaded with both) then
 * finds connections in `conns`, not in socket-local storage. */
const volatile __u8 cfg_conns_by_address = 0;
/* 1: record the socket calls of connections whose TLS plaintext is seen (length only, flagged
 * FC_FLAG_TLS_CIPHERTEXT). Nothing downstream reads them (the plaintext comes as TLS_DATA), and
 * an OpenSSL read of one TLS record makes two of them (its header, its body): off by default. */
const volatile __u8 cfg_record_ciphertext = 0;
/* 1: leave out quiet fetches (see fetchcost_abi.h, "Quiet fetches", and hold_request below). */
const volatile __u8 cfg_skip_quiet_fetches = 0;

/* Written by userspace at run time (skeleton .bss), read by every run of a target: their cache
 * line holds nothing the programs write, so no program's write takes it from another CPU's cache
 * (each CPU keeps a clean copy). policy_epoch: bumped whenever a policy map changes, so
 * connections re-resolve. */
__u64 policy_epoch __attribute__((aligned(64))) = 0;
__u32 tls_hooks = 0; /* number of attached TLS uprobes; 0 skips the TLS bookkeeping */
/* Entries in `tls_calls` (TLS library calls in progress). While there are none, a socket call
 * skips the lookup of its thread's entry: a hash lookup per call for every target that links
 * a TLS library, most of which never call it on their Kafka connections. Counted where an
 * entry is inserted or deleted (by the return value), so it is never below the number of
 * entries; a thread reads it after its own uprobe counted its call. A line of its own: every
 * TLS call writes it twice. */
__s64 tls_calls_open __attribute__((aligned(64))) = 0;
/* Synthetic connection ids (fallback variant), written per new connection: a line of its own. */
__u64 next_conn_id __attribute__((aligned(64))) = 0;

struct ringbuf_map {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);
};

/* One ring buffer per CPU (as falcosecurity/libs does): producers on different CPUs never
 * contend, and a burst on one CPU cannot starve the others. Userspace fills the slots. */
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
  __uint(max_entries, FC_MAX_CPUS);
  __type(key, __u32);
  __array(values, struct ringbuf_map);
} ringbufs SEC(".maps");

/* tgid -> capture settings (its bit in `target_bits` is set while it is here). */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, struct fc_target);
} targets SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, struct fc_port_key);
  __type(value, struct fc_policy);
} port_policy SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 65536);
  __type(key, __u64);
  __type(value, struct fc_policy);
} conn_policy SEC(".maps");

/* Per connection: socket-local storage on the sock variant, the `conns` hash on the fallback. */
struct conn_state {
  /* First: what a sendfile's later splices touch (fold_continuation), in the storage's first
   * cache line (socket-local storage puts the value 8 bytes into a line of its own): a splice
   * after the broker ran elsewhere finds these cold, one miss per line. */
  __u64 pos[2];
  /* Sock variant: the send-stream position up to which the sends that follow a folded sendfile
   * splice are the same sendfile's next splices, folded without a look at the call (0: none). */
  __u64 fold_to;
  /* Bytes folded and not reported yet: sendfile bytes [pos[SEND] - fold_len, pos[SEND]), or,
   * when fold_recv_src is set, object-body reads [pos[RECV] - fold_len, pos[RECV]). */
  __u32 fold_len;
  __u8 gathering;   /* sends are being gathered into the slot `gather_slot` (it owns it) */
  __u8 bulk_run[2]; /* per direction: the last call was bulk (fc_policy) */
  __u8 resp_state;  /* Kafka client connections: enum resp_state of the send direction */
  struct fc_policy policy;
  /* Splices folded by fold_continuation, added to FC_COUNTER_FOLDED by the connection's next
   * other event (or its close): a per-CPU counter is one more line per splice. */
  __u32 folds_uncounted;
  __u64 conn_id;
  __u64 policy_epoch; /* policy valid when == policy_epoch + 1 */
  __u32 tgid;
  __u32 generation;
  __s32 fd;
  __u16 local_port;
  __u16 peer_port;
  __u8 ignored; /* not an IPv4/IPv6 stream socket */
  __u8 tls;     /* a TLS library works on this socket: raw bytes are ciphertext */
  /* The source of the gathered record: the one call it holds (a response's first send), or
   * FC_SRC_GATHERED once it covers more. */
  __u8 gather_src;
  /* fold_len holds object-body reads (fold_body_read), made by calls of this source; 0: it
   * holds sendfile bytes, if any. */
  __u8 fold_recv_src;
  __u32 gather_slot;
  __u64 resp_end; /* RESP_IN, RESP_SKIP: send-stream position where the current response ends */
  /* Quiet fetches: a request held in request slot `req_slot` (enum held_request), where the
   * response being left out began (RESP_SKIP), and the bytes of whole messages left out per
   * direction that no record has reported yet. */
  __u8 req_held;
  /* Object-store connections: the source of the last receive recorded, which object-body reads
   * folded after it share (fold_body_read runs before the call's registers are read). */
  __u8 recv_src;
  /* Sock variant: a CPU's body hint (body_hints) may fold this socket's reads without this
   * state; recv_seq is the socket's copied_seq after the last receive this state counts. */
  __u8 body_hinted;
  __u8 pad2;
  __u32 req_slot;
  __u64 skip_from;
  __u64 skipped[2];
  __u32 recv_seq;
  /* Quiet fetches: this connection's held requests a store send reported, in a row, and the
   * requests left to record at once instead of holding (count_report). */
  __u8 reports_in_a_row;
  __u8 holds_paused;
  __u16 pad3;
};
/* The value starts 8 bytes into its line: what fold_continuation touches, before conn_id, fits. */
_Static_assert(__builtin_offsetof(struct conn_state, conn_id) <= 56,
               "fold_continuation's fields must stay in the storage's first cache line");
/* Fallback variant: keyed by the struct sock address. Userspace shrinks it on the sock variant,
 * which does not use it. */
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 65536);
  __type(key, __u64);
  __type(value, struct conn_state);
} conns SEC(".maps");

/* Sock variant: a connection's state lives with its socket. Per event this replaces a hash
 * lookup (an LRU one: it also writes the entry's reference bit) and a socket-cookie read that
 * told a reused socket address from the connection it once held; a socket's storage is freed
 * with it, so there is nothing stale to tell apart, and no cap on the connections tracked. */
struct {
  __uint(type, BPF_MAP_TYPE_SK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct conn_state);
} conn_store SEC(".maps");

/* Gathered sends (sock variant, Kafka client connections; see fetchcost_abi.h): the sends of a
 * response after its first one are copied here instead of into a record each, and leave as one
 * record when the response ends. A local fetch's response is its header, then per partition the
 * records (a sendfile) and the next partition's header (a small write): for 4 partitions, 5 send
 * records become 2. A record costs the broker far more than the copy (reserve, submit, clock,
 * header: cache lines of ring memory), and fetchcostd reads fewer.
 * A response holds a slot of `gather_slots` from its first gathered send until its record
 * leaves (microseconds for a local fetch): slots go to responses in flight, not to connections.
 * A preallocated array, not socket-local storage: its lookup is inlined, and a copy into it
 * skips the hardened-usercopy checks a slab object gets (two thirds of the header copy's cost,
 * session 20). A connection may use two slots (chosen by its id); when both are busy its
 * response keeps a record per send (FC_COUNTER_GATHER_NO_SLOT). */
#define FC_GATHER_BYTES 512
/* Slots - 1 (a power of two; userspace sizes the map to match). */
const volatile __u32 cfg_gather_slot_mask = 1023;
struct gather_buf {
  struct fc_data_event hdr;       /* stream_pos: first byte covered; captured, nsegs, segs so far */
  __u8 data[2 * FC_GATHER_BYTES]; /* twice: a masked offset plus a clamped length always fit */
};
struct gather_slot {
  __u64 owner; /* conn_id of the connection whose response is gathered here; 0: free */
  struct gather_buf buf;
};
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1024); /* userspace: Options::gather_slots */
  __type(key, __u32);
  __type(value, struct gather_slot);
} gather_slots SEC(".maps");

/* Quiet fetches (sock variant): a connection's Fetch request that may be left out waits here,
 * as the record it would have been (its whole header, one segment), from its arrival to its
 * response's first send, which decides whether it leaves or is left out. Indexed as gather_slots
 * (by the connection's id, two probes) and as many; a request that finds both busy gets its record
 * at once. A request larger than FC_HELD_BYTES is never held: 4 KiB holds a librdkafka fetch of
 * about 140 partitions (29 bytes each in v11; 64 partitions: 1,858 bytes). A request larger than
 * FC_HELD_UNLOOKED_BYTES is held only if its API key, read first, says Fetch: most of those are
 * Produce requests, which would pay the slot's copy and the copy out of it. */
#define FC_HELD_BYTES 4096
#define FC_HELD_UNLOOKED_BYTES 512
#define FC_REQUEST_SLOTS 1024
#define FC_HELD_WORDS (FC_REQUEST_SLOTS / 64)
/* request_slot.state: who may touch a claimed slot. The owner (its connection) fills it while
 * OWNED; once HELD, a store send may TAKE it to report the request (then EMITTED); the owner
 * ends its hold by setting LEFT, and whichever of the two comes last frees the slot. */
enum slot_state {
  SLOT_OWNED = 0,   /* being filled, or its size prefix only: the owner's alone */
  SLOT_HELD = 1,    /* a whole request, listed in held_bits */
  SLOT_TAKEN = 2,   /* a store send is reporting it */
  SLOT_EMITTED = 3, /* reported by a store send */
  SLOT_LEFT = 4,    /* the owner is done with it */
};
struct request_slot {
  __u64 owner; /* conn_id of the connection whose request is held here; 0: free */
  __u64 state; /* enum slot_state (64 bits: the atomics BPF has without -mcpu=v3) */
  struct fc_data_event hdr;
  /* Room past FC_HELD_BYTES for the 16 bytes quiet_candidate reads at a masked offset, and for
   * the size prefix before a rest of FC_HELD_BYTES. */
  __u8 data[FC_HELD_BYTES + 16];
};
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, FC_REQUEST_SLOTS);
  __type(key, __u32);
  __type(value, struct request_slot);
} request_slots SEC(".maps");
/* One bit per HELD request slot: what a store send reports before its own record. Slot i is bit
 * i / FC_HELD_WORDS of word i % FC_HELD_WORDS, and each word has a cache line of its own (the
 * stride of 8): connections' slots are consecutive (socket cookies are), so the broker's threads
 * holding requests on different CPUs set and clear bits in different lines, not in one line
 * bounced between the CPUs twice per fetch. */
#define FC_HELD_STRIDE 8
/* Aligned to a line: unaligned, word 0 shared its line with policy_epoch, which every run of a
 * target reads, and a hold in a slot of that word moved the line away from the other CPU twice
 * per fetch. */
__u64 held_bits[FC_HELD_WORDS * FC_HELD_STRIDE] __attribute__((aligned(64))) = {};
static __always_inline __u64* held_word(__u32 i) {
  return &held_bits[(i % FC_HELD_WORDS) * FC_HELD_STRIDE];
}
static __always_inline __u64 held_bit(__u32 i) {
  return 1ULL << ((i / FC_HELD_WORDS) & 63);
}

/* (tgid, fd) -> the last connection seen on it, for generations. */
struct fd_key {
  __u32 tgid;
  __s32 fd;
};
struct fd_gen {
  __u64 conn_id;
  __u32 generation;
  __u32 pad;
};
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 65536);
  __type(key, struct fd_key);
  __type(value, struct fd_gen);
} fdgens SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, FC_COUNTER_MAX);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

/* Sock variant: per CPU, the object-store socket whose body its reads fold (fetchcost_abi.h). */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct fc_body_hint);
} body_hints SEC(".maps");

/* Scratch space to build one variable-length event without using the 512-byte stack, one slot
 * per CPU (a plain array: a per-CPU value may not exceed 32 KiB). The payload area is twice
 * the cap so a masked offset plus a masked length always fits. Userspace sizes it to the CPUs. */
struct event_buf {
  struct fc_data_event hdr;
  __u8 data[2 * FC_MAX_CAPTURE];
  struct fc_user_iovec iovs[FC_MAX_SEGMENTS]; /* a vectored call's iovec array, read at once */
};
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, FC_MAX_CPUS);
  __type(key, __u32);
  __type(value, struct event_buf);
} scratch SEC(".maps");

static __always_inline struct event_buf* scratch_buf(void) {
  __u32 cpu = bpf_get_smp_processor_id();
  return bpf_map_lookup_elem(&scratch, &cpu);
}

/* A TLS call in progress on a thread (uprobe entry -> uretprobe), key tid. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, struct fc_tls_call);
} tls_calls SEC(".maps");

/* A TLS session: its connection (a copy of its identity, taken from the call that bound it) and
 * its plaintext stream positions. */
struct tls_key {
  __u64 obj;
  __u32 tgid;
  __u32 pad;
};
struct tls_state {
  struct fc_conn_ident conn; /* conn_id 0: not bound to a connection yet */
  __u64 pos[2];
  __u64 policy_epoch; /* policy valid when == policy_epoch + 1 */
  struct fc_policy policy;
  __u8 recv_run; /* the last call was a read (object-store role: the next one is body) */
  __u8 pad[7];
};
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 65536);
  __type(key, struct tls_key);
  __type(value, struct tls_state);
} tls_sessions SEC(".maps");

/* Syscall arguments saved at sys_enter for sys_exit (fallback variant), keyed by tid. */
struct sc_args {
  __u64 nr;
  __u64 args[4];
};
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, __u32);
  __type(value, struct sc_args);
} sc_inflight SEC(".maps");

static __always_inline void count_n(__u32 which, __u64 n) {
  __u64* c = bpf_map_lookup_elem(&counters, &which);
  if (c) *c += n;
}

static __always_inline void count(__u32 which) {
  count_n(which, 1);
}

/* Adds the splices fold_continuation folded on this connection to FC_COUNTER_FOLDED. */
static __always_inline void count_uncounted_folds(struct conn_state* st) {
  if (!st->folds_uncounted) return;
  count_n(FC_COUNTER_FOLDED, st->folds_uncounted);
  st->folds_uncounted = 0;
}

/* An upper bound on the unread bytes in this CPU's ring: what it held when last checked plus
 * what was put in since. Only when that bound reaches cfg_wakeup_bytes does a program ask the
 * ring what is unread (`bpf_ringbuf_query`, which reads the consumer position, a cache line the
 * reader writes), and it wakes the reader only if that is at the mark too. So a reader that
 * keeps up on its own passes (capture.pass_interval_ms) is never woken: each forced wakeup
 * costs the broker's thread an interrupt and a cross-CPU wakeup, tens of us on a KVM guest
 * (docs/performance.md, "Session 28"), while the query runs once per mark's worth of bytes. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} ring_unread_bound SEC(".maps");

/* The flags for a record of `size` bytes about to go into ring `rb`. */
static __always_inline __u64 wakeup_flags(void* rb, __u64 size) {
  __u32 zero = 0;
  __u64* bound = bpf_map_lookup_elem(&ring_unread_bound, &zero);
  if (!bound) return 0; /* cannot happen; 0 is the ring's own adaptive wakeup */
  __u64 n = *bound + size;
  if (n >= cfg_wakeup_bytes) {
    n = bpf_ringbuf_query(rb, BPF_RB_AVAIL_DATA) + size;
    if (n >= cfg_wakeup_bytes) {
      *bound = 0;
      count(FC_COUNTER_WAKEUPS);
      return BPF_RB_FORCE_WAKEUP;
    }
  }
  *bound = n;
  return BPF_RB_NO_WAKEUP;
}

static __always_inline int submit(void* data, __u64 size) {
  __u32 cpu = bpf_get_smp_processor_id();
  void* rb = bpf_map_lookup_elem(&ringbufs, &cpu);
  if (!rb) {
    count(FC_COUNTER_DROPS);
    return -1;
  }
  if (bpf_ringbuf_output(rb, data, size, wakeup_flags(rb, size)) != 0) {
    count(FC_COUNTER_DROPS);
    return -1;
  }
  count(FC_COUNTER_EVENTS);
  return 0;
}

/* One bit per tgid, set by userspace for the processes in `targets` (never fetchcostd's own:
 * Capture::add_target refuses it): the test every socket call on the machine pays is one load
 * (a read-only global checked beside it was one more cold line per run), and a target's events
 * skip the `targets` lookup unless a policy must be resolved. */
__u64 target_bits[FC_MAX_TGID / 64] = {};

static __always_inline int is_target(__u32 tgid) {
  __u32 word = tgid / 64;
  if (word >= FC_MAX_TGID / 64) return 0;
  /* The mask (a power of two) keeps the bound visible to the verifier; the barrier keeps the
   * compiler from dropping it as implied by the test above. */
  barrier_var(word);
  return (target_bits[word & (FC_MAX_TGID / 64 - 1)] >> (tgid & 63)) & 1;
}

/* bpf_get_current_pid_tgid() from a trusted task pointer: two loads instead of a helper call,
 * for the programs that need the task anyway. */
static __always_inline __u64 pid_tgid_of(struct task_struct* task) {
  return ((__u64)(__u32)task->tgid << 32) | (__u32)task->pid;
}

static __always_inline struct fc_target* target_of(__u32 tgid) {
  if (!is_target(tgid)) return 0;
  return bpf_map_lookup_elem(&targets, &tgid);
}

/* x86-64 syscall numbers. */
#define NR_read 0
#define NR_write 1
#define NR_close 3
#define NR_readv 19
#define NR_writev 20
#define NR_sendfile 40
#define NR_connect 42
#define NR_accept 43
#define NR_sendto 44
#define NR_recvfrom 45
#define NR_sendmsg 46
#define NR_recvmsg 47
#define NR_splice 275
#define NR_accept4 288
#define NR_recvmmsg 299
#define NR_sendmmsg 307
#define NR_io_uring_enter 426

static __always_inline __u8 source_of(long nr) {
  switch (nr) {
    case NR_read:
      return FC_SRC_READ;
    case NR_write:
      return FC_SRC_WRITE;
    case NR_readv:
      return FC_SRC_READV;
    case NR_writev:
      return FC_SRC_WRITEV;
    case NR_sendto:
      return FC_SRC_SENDTO;
    case NR_recvfrom:
      return FC_SRC_RECVFROM;
    case NR_sendmsg:
      return FC_SRC_SENDMSG;
    case NR_recvmsg:
      return FC_SRC_RECVMSG;
    case NR_sendfile:
      return FC_SRC_SENDFILE;
    case NR_recvmmsg:
      return FC_SRC_RECVMMSG;
    case NR_sendmmsg:
      return FC_SRC_SENDMMSG;
    case NR_splice:
      return FC_SRC_SPLICE;
    case NR_io_uring_enter:
      return FC_SRC_IO_URING;
    default:
      return FC_SRC_UNKNOWN;
  }
}

static __always_inline void fill_ids(struct fc_event_common* c, __u16 kind, __u64 pid_tgid) {
  c->timestamp_ns = bpf_ktime_get_ns();
  c->tgid = pid_tgid >> 32;
  c->tid = (__u32)pid_tgid;
  c->kind = kind;
}

/* `task`: the current task as a trusted BTF pointer (tp_btf programs, and the syscall exit
 * programs that read saved registers), whose name is read with two plain loads; 0 elsewhere
 * (the helper copies it). */
static __always_inline void fill_common_task(struct fc_event_common* c, __u16 kind, __u64 pid_tgid,
                                             struct task_struct* task) {
  fill_ids(c, kind, pid_tgid);
  if (task) {
    /* The kernel keeps comm NUL-terminated and NUL-padded (strscpy_pad), as the helper does. */
    __builtin_memcpy(c->comm, task->comm, sizeof(c->comm));
  } else if (c->tid == 0) { /* on behalf of a target from another context (see flush_fold) */
    __builtin_memset(c->comm, 0, sizeof(c->comm));
  } else {
    bpf_get_current_comm(c->comm, sizeof(c->comm));
  }
}

static __always_inline void fill_common(struct fc_event_common* c, __u16 kind, __u64 pid_tgid) {
  fill_common_task(c, kind, pid_tgid, 0);
}

/* The policy of a connection (its own rule, else its local port's, else its peer port's, else
 * the target's default), cached in `*policy` until the policy maps change. */
static __always_inline void resolve_policy_of(__u64 conn_id, __u16 local_port, __u16 peer_port,
                                              struct fc_policy* policy, __u64* cached_epoch,
                                              const struct fc_target* t) {
  __u64 epoch = policy_epoch;
  if (*cached_epoch == epoch + 1) return;
  struct fc_policy* p = bpf_map_lookup_elem(&conn_policy, &conn_id);
  if (!p) {
    struct fc_port_key k = {.port = local_port, .side = 0};
    p = bpf_map_lookup_elem(&port_policy, &k);
  }
  if (!p) {
    struct fc_port_key k = {.port = peer_port, .side = 1};
    p = bpf_map_lookup_elem(&port_policy, &k);
  }
  *policy = p ? *p : t->default_policy;
  *cached_epoch = epoch + 1;
}

static __always_inline void resolve_policy(struct conn_state* st, const struct fc_target* t) {
  resolve_policy_of(st->conn_id, st->local_port, st->peer_port, &st->policy, &st->policy_epoch, t);
}

static __always_inline __u32 next_generation(__u32 tgid, __s32 fd, __u64 conn_id) {
  if (fd < 0) return 0;
  struct fd_key k = {.tgid = tgid, .fd = fd};
  struct fd_gen* g = bpf_map_lookup_elem(&fdgens, &k);
  struct fd_gen fresh = {.conn_id = conn_id, .generation = 1};
  if (g) {
    if (g->conn_id == conn_id) return g->generation;
    fresh.generation = g->generation + 1;
  }
  bpf_map_update_elem(&fdgens, &k, &fresh, BPF_ANY);
  return fresh.generation;
}

/* Fills the state of a connection seen for the first time. `sk` may be an untrusted pointer:
 * every read is a CO-RE probe read. Returns 0 for sockets we do not track (`st->ignored`). */
static __always_inline int init_conn(struct conn_state* st, struct sock* sk, __u64 conn_id,
                                     __s32 fd, __u64 pid_tgid) {
  st->conn_id = conn_id;
  st->tgid = pid_tgid >> 32;
  st->fd = fd;
  __u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
  __u16 type = BPF_CORE_READ(sk, sk_type);
  if ((family != AF_INET && family != AF_INET6) || type != SOCK_STREAM) {
    st->ignored = 1;
    return 0;
  }
  st->generation = next_generation(st->tgid, fd, conn_id);
  st->local_port = BPF_CORE_READ(sk, __sk_common.skc_num);
  st->peer_port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
  return 1;
}

/* Reports a new connection, whose state was stored as `live` (0 if storing it failed). */
static __always_inline void report_conn(const struct conn_state* st, struct conn_state* live,
                                        struct sock* sk, __u8 origin, __u64 pid_tgid) {
  struct fc_conn_event ev = {};
  fill_common(&ev.c, FC_EVENT_CONNECT, pid_tgid);
  ev.c.conn_id = st->conn_id;
  ev.c.generation = st->generation;
  ev.c.fd = st->fd;
  __u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
  ev.family = family;
  ev.local_port = st->local_port;
  ev.peer_port = st->peer_port;
  ev.origin = origin;
  if (family == AF_INET) {
    bpf_core_read(ev.local_addr, 4, &sk->__sk_common.skc_rcv_saddr);
    bpf_core_read(ev.peer_addr, 4, &sk->__sk_common.skc_daddr);
  } else {
    bpf_core_read(ev.local_addr, 16, &sk->__sk_common.skc_v6_rcv_saddr);
    bpf_core_read(ev.peer_addr, 16, &sk->__sk_common.skc_v6_daddr);
  }
  if (live) {
    struct fc_target* t = bpf_map_lookup_elem(&targets, &st->tgid);
    if (t) resolve_policy(live, t);
    ev.c.role = live->policy.role;
  }
  count(FC_COUNTER_CONN_EVENTS);
  submit(&ev, sizeof(ev));
}

/* Fallback variant: creates the state of a connection seen for the first time, in `conns` under
 * `key`, and reports it. Returns 0 for sockets we do not track. */
static __always_inline struct conn_state* new_conn(__u64 key, struct sock* sk, __u64 conn_id,
                                                   __s32 fd, __u8 origin, __u64 pid_tgid) {
  struct conn_state st = {};
  int tracked = init_conn(&st, sk, conn_id, fd, pid_tgid);
  bpf_map_update_elem(&conns, &key, &st, BPF_ANY);
  if (!tracked) return 0;
  struct conn_state* live = bpf_map_lookup_elem(&conns, &key);
  report_conn(&st, live, sk, origin, pid_tgid);
  return live;
}

/* Sock variant: the same in the socket's own storage (`sk` is a trusted pointer). */
static __always_inline struct conn_state* new_sock_conn(struct sock* sk, __u64 conn_id, __s32 fd,
                                                        __u8 origin, __u64 pid_tgid) {
  struct conn_state st = {};
  int tracked = init_conn(&st, sk, conn_id, fd, pid_tgid);
  struct conn_state* live = bpf_sk_storage_get(&conn_store, sk, &st, BPF_SK_STORAGE_GET_F_CREATE);
  if (!tracked) return 0;
  report_conn(&st, live, sk, origin, pid_tgid);
  return live;
}

static __always_inline void flush_fold(struct conn_state* st, __u64 pid_tgid,
                                       struct task_struct* task, __u64 recv_end);
static __always_inline void flush_gather(struct conn_state* st, struct sock* sk, __u64 end,
                                         __u64 pid_tgid, struct task_struct* task);
static __always_inline int end_hold(struct conn_state* st, int report);
static __always_inline void abandon_skip(struct conn_state* st);

/* `sk`: the socket as a trusted pointer (sock variant), else 0. */
static __always_inline void emit_close(struct conn_state* st, struct sock* sk, __u64 pid_tgid) {
  count_uncounted_folds(st);
  /* From another context (softirq, a timer): the owner, no thread. */
  __u64 owner = (pid_tgid >> 32) == st->tgid ? pid_tgid : (__u64)st->tgid << 32;
  if (st->req_held) end_hold(st, 1);
  abandon_skip(st);
  if (st->fold_len) flush_fold(st, owner, 0, st->pos[FC_DIR_RECV]);
  flush_gather(st, sk, st->pos[FC_DIR_SEND], owner, 0);
  struct fc_conn_event ev = {};
  fill_common(&ev.c, FC_EVENT_CLOSE, pid_tgid);
  if (ev.c.tgid != st->tgid) { /* closed from softirq or a timer: not the owner's thread */
    ev.c.tgid = st->tgid;
    ev.c.tid = 0;
    __builtin_memset(ev.c.comm, 0, sizeof(ev.c.comm));
  }
  ev.c.conn_id = st->conn_id;
  ev.c.generation = st->generation;
  ev.c.fd = st->fd;
  ev.c.role = st->policy.role;
  ev.bytes[0] = st->pos[0];
  ev.bytes[1] = st->pos[1];
  ev.local_port = st->local_port;
  ev.peer_port = st->peer_port;
  count(FC_COUNTER_CONN_EVENTS);
  submit(&ev, sizeof(ev));
}

/* Clamps `n` to `max` in asm, so the compiler cannot drop the bound the verifier needs for a
 * copy's length. Clamped, not masked: a mask turned a full-size length into 0. */
#define FC_CLAMP(n, max) \
  asm volatile("if %[v] <= %[m] goto +1; %[v] = %[m]" : [v] "+r"(n) : [m] "i"(max))

/* Copies up to `want` bytes from user `src` into the payload and records the segment. */
static __always_inline void add_segment(struct event_buf* ev, __u32 offset, __u32 want, __u64 src) {
  __u32 n = ev->hdr.nsegs;
  __u32 at = ev->hdr.captured;
  if (n >= FC_MAX_SEGMENTS || want == 0) return;
  if (at + want > FC_MAX_CAPTURE) want = FC_MAX_CAPTURE - at;
  if (want == 0 || want > FC_MAX_CAPTURE) return;
  __u64 off = at, len = want;
  /* Both bounds in asm (the area is twice FC_MAX_CAPTURE): a masked offset, a clamped length. */
  asm volatile("%[o] &= %[mask]" : [o] "+r"(off) : [mask] "i"(FC_CAPTURE_MASK));
  FC_CLAMP(len, FC_MAX_CAPTURE);
  if (bpf_probe_read_user(ev->data + off, len, (const void*)src) != 0) {
    count(FC_COUNTER_COPY_FAULTS);
    ev->hdr.c.flags |= FC_FLAG_COPY_FAULT;
    return;
  }
  ev->hdr.segs[n & (FC_MAX_SEGMENTS - 1)].offset = offset;
  ev->hdr.segs[n & (FC_MAX_SEGMENTS - 1)].length = want;
  ev->hdr.nsegs = n + 1;
  ev->hdr.captured = at + want;
}

static __always_inline __u32 min_u32(__u32 a, __u32 b) {
  return a < b ? a : b;
}

/* An object store's response, read after its request went out: the first read holds the HTTP
 * header (copied up to head_bytes, 0 = the call cap), the reads after it (`in_body`) object body,
 * whose bytes no decoder reads: length only. Plaintext (emit_data) and TLS (tls_exit) alike. */
static __always_inline __u32 object_store_read_cap(__u32 cap, const struct fc_policy* p,
                                                   int in_body) {
  if (in_body) return 0;
  return p->head_bytes ? min_u32(cap, p->head_bytes) : cap;
}

/* a / b with BPF's own rule for b == 0 (the result is 0), which C leaves undefined. */
static __always_inline __u64 bpf_div(__u64 a, __u64 b) {
  asm volatile("%[a] /= %[b]" : [a] "+r"(a) : [b] "r"(b));
  return a;
}

/* Walks a user iovec array: each iovec contributes a prefix of the bytes the call actually
 * moved through it, up to the per-iovec cap, until the per-call cap is reached. An iovec of at
 * least `body_from` bytes (0 = no such rule) is a message body handed over whole (a
 * partition's records between the headers of a Fetch response) and gives only `body_bytes`:
 * the call cap is then left for the headers after it. Sends only: a receive's iovec is a
 * buffer, whose size says nothing about the message in it.
 *
 * With that rule on, the first iovec (the message's own header) may use the whole cap, and
 * every later one an equal share of what it left: a Kafka response written from memory (a
 * remote read's records) alternates partition headers with records below body_from, and those
 * records must not use up the cap before the headers after them (the decoder skips record
 * bytes anyway). The share is fixed after the first iovec, so the loop carries no more state
 * than before (a running reserve of room for the iovecs still to come made the programs'
 * verification 2.5 times slower). */
static __always_inline void copy_iovecs(struct event_buf* ev, __u64 iov_ptr, __u64 iovcnt,
                                        __u32 ret, __u32 call_cap, __u32 iov_cap, __u32 body_from,
                                        __u32 body_bytes) {
  __u32 off = 0;
  call_cap = min_u32(call_cap, FC_MAX_CAPTURE);
  __u32 later_cap = iov_cap; /* the cap of each iovec after the first */
  /* The iovecs the call can have moved bytes through, in one copy: a helper call (and the
   * user-access window it opens) per iovec cost more than the 16 bytes each moves.
   * A product, then a clamp: a test of iovcnt itself would give the verifier ranges of it to
   * carry into every iovec below (see the share's comment). */
  __u64 array_bytes = iovcnt * sizeof(ev->iovs[0]);
  FC_CLAMP(array_bytes, sizeof(ev->iovs));
  if (array_bytes == 0) return;
  if (bpf_probe_read_user(ev->iovs, array_bytes, (const void*)iov_ptr) != 0) {
    count(FC_COUNTER_COPY_FAULTS);
    ev->hdr.c.flags |= FC_FLAG_COPY_FAULT;
    return;
  }
  int i;
#pragma unroll
  for (i = 0; i < FC_MAX_SEGMENTS; i++) {
    if (i >= iovcnt || off >= ret) break;
    const struct fc_user_iovec iov = ev->iovs[i];
    __u32 seg = iov.iov_len < (__u64)(ret - off) ? (__u32)iov.iov_len : ret - off;
    __u32 room = call_cap > ev->hdr.captured ? call_cap - ev->hdr.captured : 0;
    const __u32 this_cap = i == 0 ? iov_cap : later_cap;
    __u32 cap = body_from && iov.iov_len >= body_from ? min_u32(this_cap, body_bytes) : this_cap;
    __u32 want = min_u32(min_u32(seg, cap), room);
    add_segment(ev, off, want, iov.iov_base);
    off += seg;
    if (i == 0 && body_from) {
      /* left / min(iovcnt - 1, 15), computed so that the verifier learns no range from it:
       * a test of iovcnt, or a power-of-two divisor (a shift, whose range it tracks), made it
       * carry the ranges into every later iovec and walk those once per range, twice the
       * instructions (the kernel test "each program is verified within 40%" holds this). */
      const __u64 left = room - want;
      const __u64 by_count = bpf_div(left, iovcnt - 1), by_most = left / (FC_MAX_SEGMENTS - 1);
      later_cap = min_u32(iov_cap, by_count > by_most ? (__u32)by_count : (__u32)by_most);
    }
  }
  if (off < ret && i >= FC_MAX_SEGMENTS) ev->hdr.c.flags |= FC_FLAG_TRUNCATED_SEGS;
}

/* The header of a socket data event, written where the record is built (scratch space or,
 * for one-range and length-only calls, the reserved ring record itself). */
static __always_inline void fill_data_hdr(struct fc_data_event* h, struct conn_state* st,
                                          __u64 pid_tgid, struct task_struct* task, __u8 src,
                                          __u64 pos, __u32 ret, __u8 direction, __u32 hole) {
  if (st->policy.role == FC_ROLE_KAFKA_CLIENT) {
    /* No thread name: userspace reads it only on object-store connections (which thread wrote
     * a request), and these records are most of a broker's. Its copy read a cache line of the
     * task that nothing else of the call touches (9% of the send program's samples, session 9),
     * or cost a helper call (syscall variant). */
    fill_ids(&h->c, FC_EVENT_DATA, pid_tgid);
    __builtin_memset(h->c.comm, 0, sizeof(h->c.comm));
  } else {
    fill_common_task(&h->c, FC_EVENT_DATA, pid_tgid, task);
  }
  h->c.conn_id = st->conn_id;
  h->c.generation = st->generation;
  h->c.fd = st->fd;
  h->c.role = st->policy.role;
  h->c.flags = st->tls ? FC_FLAG_TLS_CIPHERTEXT : 0;
  /* The whole messages left out before this record are reported by it (hold_request gives
   * them back: a held request is not a record yet). */
  h->c.skipped_before = (__u32)st->skipped[direction & 1];
  st->skipped[direction & 1] = 0;
  h->stream_pos = pos;
  h->tls_obj = 0;
  h->length = ret;
  h->captured = 0;
  h->direction = direction;
  h->source = src;
  h->nsegs = 0;
  h->tls_lib = 0;
  h->hole_before = hole;
  if (direction == FC_DIR_RECV && st->fold_recv_src) { /* object-body reads folded before it */
    h->hole_before = st->fold_len;
    st->fold_len = 0;
    st->fold_recv_src = 0;
  }
}

/* A call whose bytes are not copied (sendfile, splice, mmsg, io_uring, TLS ciphertext, an
 * ignored role or a zero cap): a short record (FC_DATA_EVENT_SHORT, no segments) written
 * straight into the ring, with no scratch buffer and no second copy. These are most of a
 * broker's send events (sendfile of local records); their cost is mostly the cache lines of
 * ring memory they write, so fewer lines matter. */
struct fc_data_event_short {
  __u8 bytes[FC_DATA_EVENT_SHORT];
};
static __always_inline void emit_length_only(struct conn_state* st, __u64 pid_tgid,
                                             struct task_struct* task, __u8 src, __u64 pos,
                                             __u32 ret, __u8 direction, __u32 hole) {
  __u32 cpu = bpf_get_smp_processor_id();
  void* rb = bpf_map_lookup_elem(&ringbufs, &cpu);
  if (!rb) {
    count(FC_COUNTER_DROPS);
    return;
  }
  __u64 flags = wakeup_flags(rb, FC_DATA_EVENT_SHORT);
  struct fc_data_event_short* r = bpf_ringbuf_reserve(rb, sizeof(*r), 0);
  if (!r) {
    count(FC_COUNTER_DROPS);
    return;
  }
  /* Only the fields before `segs` are written (fill_data_hdr does not touch segs). */
  fill_data_hdr((struct fc_data_event*)r, st, pid_tgid, task, src, pos, ret, direction, hole);
  bpf_ringbuf_submit(r, flags);
  count(FC_COUNTER_EVENTS);
}

/* One-range calls (read/write/sendto/recvfrom, and vectored calls of one iovec) copy straight
 * into ring buffer memory: one copy instead of two. The record has a fixed size class
 * (reservations are constant-sized), so up to a class's size minus the capture is unused tail;
 * `captured` says what is valid. The small classes (128, 256 B) make a burst fit the ring: most
 * Kafka requests and small responses fit them (a 30-byte Metadata request reserved 608 B in the
 * 512 B class, 224 B now). The header stops after segs[0] (FC_FLAG_ONE_SEGMENT): such a call
 * has one segment. `*head` gets the call's first 4 bytes when they were copied (a Kafka
 * response's size prefix). */
#define FC_DIRECT_CLASS(N)                                                          \
  do {                                                                              \
    struct {                                                                        \
      __u8 hdr[FC_DATA_EVENT_ONE_SEGMENT]; /* struct fc_data_event up to segs[0] */ \
      __u8 data[N];                                                                 \
    } * r;                                                                          \
    __u64 flags = wakeup_flags(rb, sizeof(*r));                                     \
    r = bpf_ringbuf_reserve(rb, sizeof(*r), 0);                                     \
    if (!r) {                                                                       \
      count(FC_COUNTER_DROPS);                                                      \
      return;                                                                       \
    }                                                                               \
    struct fc_data_event* h = (struct fc_data_event*)r->hdr;                        \
    __u64 n = want;                                                                 \
    FC_CLAMP(n, N);                                                                 \
    fill_data_hdr(h, st, pid_tgid, task, src, pos, ret, direction, hole);           \
    h->c.flags |= FC_FLAG_ONE_SEGMENT;                                              \
    h->segs[0].offset = 0;                                                          \
    h->segs[0].length = 0;                                                          \
    if (bpf_probe_read_user(r->data, n, (const void*)buf) == 0) {                   \
      h->captured = n;                                                              \
      h->nsegs = 1;                                                                 \
      h->segs[0].length = n;                                                        \
      if (n >= 4) *head = *(__u32*)r->data;                                         \
    } else {                                                                        \
      count(FC_COUNTER_COPY_FAULTS);                                                \
      h->c.flags |= FC_FLAG_COPY_FAULT;                                             \
    }                                                                               \
    bpf_ringbuf_submit(r, flags);                                                   \
    count(FC_COUNTER_EVENTS);                                                       \
  } while (0)

static __always_inline void emit_direct(struct conn_state* st, __u64 pid_tgid,
                                        struct task_struct* task, __u8 src, __u64 pos, __u32 ret,
                                        __u8 direction, __u32 hole, __u32 want, __u64 buf,
                                        __u32* head) {
  __u32 cpu = bpf_get_smp_processor_id();
  void* rb = bpf_map_lookup_elem(&ringbufs, &cpu);
  if (!rb) {
    count(FC_COUNTER_DROPS);
    return;
  }
  if (want <= 128)
    FC_DIRECT_CLASS(128);
  else if (want <= 256)
    FC_DIRECT_CLASS(256);
  else if (want <= 512)
    FC_DIRECT_CLASS(512);
  else if (want <= 4096)
    FC_DIRECT_CLASS(4096);
  else
    FC_DIRECT_CLASS(FC_MAX_CAPTURE);
}

/* Response framing on Kafka client connections (send direction, plaintext): most of a
 * broker's send calls for a local fetch are sendfiles of partitions' records, which carry no
 * payload. One that ends inside a response is not given a record of its own: its length is
 * folded into the connection (`fold_len`) and reported as `hole_before` of the connection's
 * next send record, which comes microseconds later in the same response (the next partition's
 * header, or the sendfile that ends the response). The framing only decides which sendfiles
 * may wait; the bytes are always accounted: a receive or a close on the connection reports a
 * pending fold first, so a wrong guess delays a hole's report, never loses it.
 * Kafka alternates a request's receives and its response's sends on a connection (the channel
 * is muted until the response is out), so the first send after a receive starts a response:
 * its 4-byte size prefix gives the response's end, and each response that ends exactly there
 * is followed by the next. Framing starts at the first receive after attach. */
enum resp_state {
  RESP_UNKNOWN = 0, /* not in step with the responses: nothing is folded */
  RESP_NEXT = 1,    /* the next send starts a response */
  RESP_IN = 2,      /* inside a response that ends at resp_end */
  RESP_SKIP = 3,    /* inside a quiet fetch's response, left out, that ends at resp_end */
};
#define FC_MAX_RESPONSE (256U << 20) /* a larger size prefix is taken for a wrong guess */

/* Reports the connection's folded bytes now: an empty record that carries them (hole_before).
 * Sendfile bytes end at the send stream's current end; object-body reads (fold_body_read) at
 * `recv_end`, the receive stream's end before the call in progress. */
static __always_inline void flush_fold(struct conn_state* st, __u64 pid_tgid,
                                       struct task_struct* task, __u64 recv_end) {
  __u32 n = st->fold_len;
  __u8 recv_src = st->fold_recv_src;
  /* A skipped response's splices stay out. */
  if (!n || (!recv_src && st->resp_state == RESP_SKIP)) return;
  __u8 d = recv_src ? FC_DIR_RECV : FC_DIR_SEND;
  st->fold_len = 0;
  st->fold_recv_src = 0;
  emit_length_only(st, pid_tgid, task, recv_src ? recv_src : FC_SRC_SENDFILE,
                   recv_src ? recv_end : st->pos[FC_DIR_SEND], 0, d, n);
}

/* The slot of the response the connection is gathering, or 0 (it holds none). */
static __always_inline struct gather_slot* held_slot(struct conn_state* st) {
  if (!st->gathering) return 0;
  __u32 i = st->gather_slot;
  struct gather_slot* s = bpf_map_lookup_elem(&gather_slots, &i);
  if (s && s->owner == st->conn_id) return s;
  st->gathering = 0; /* cannot happen: the slot is the connection's until its record leaves */
  return 0;
}

/* One of a connection's two slots in `map` (an array of `mask` + 1 slots that each start with
 * their owner's conn_id), chosen by its id, which a socket cookie makes sequential: free, or
 * already its own. Returns its owner field (0 if both are busy) and its index in `*index`. */
static __always_inline __u64* claim_in(void* map, __u32 mask, __u64 conn_id, __u32* index) {
  __u32 i = (__u32)conn_id & mask;
#pragma unroll
  for (int probe = 0; probe < 2; probe++) {
    __u64* owner = bpf_map_lookup_elem(map, &i);
    if (!owner) return 0;
    __u64 o = *owner;
    if (o == conn_id || (o == 0 && __sync_val_compare_and_swap(owner, 0, conn_id) == 0)) {
      *index = i;
      return owner;
    }
    i ^= (mask + 1) / 2; /* the other half's; one slot: the same again */
  }
  return 0;
}

/* Claims a slot for a gather about to open; 0 if both of the connection's are busy. */
static __always_inline struct gather_slot* claim_slot(struct conn_state* st) {
  __u32 i = 0;
  struct gather_slot* s =
      (struct gather_slot*)claim_in(&gather_slots, cfg_gather_slot_mask, st->conn_id, &i);
  if (!s) {
    count(FC_COUNTER_GATHER_NO_SLOT);
    return 0;
  }
  st->gather_slot = i;
  return s;
}

/* Frees a slot once its record has left: an atomic exchange, so that the copy out of it is
 * done before another connection can claim it (a plain store may pass earlier loads on arm64). */
static __always_inline void release_slot(struct gather_slot* s) {
  __sync_lock_test_and_set(&s->owner, 0);
}

/* Hands on the gathered record, which covers send-stream bytes [its stream_pos, end), and frees
 * its slot unless `keep` (a gather opened again at once in the same slot). */
static __always_inline void flush_gathered(struct conn_state* st, struct gather_slot* s, __u64 end,
                                           __u64 pid_tgid, struct task_struct* task, int keep) {
  struct gather_buf* g = &s->buf;
  st->gathering = 0;
  __u64 start = g->hdr.stream_pos;
  __u32 captured = g->hdr.captured;
  __u8 nsegs = g->hdr.nsegs;
  __u16 fault = g->hdr.c.flags & FC_FLAG_COPY_FAULT;
  fill_data_hdr(&g->hdr, st, pid_tgid, task, st->gather_src, start, (__u32)(end - start),
                FC_DIR_SEND, 0);
  g->hdr.c.flags |= fault;
  g->hdr.captured = captured;
  g->hdr.nsegs = nsegs;
  __u64 size = sizeof(struct fc_data_event) + (captured & (2 * FC_GATHER_BYTES - 1));
  if (size <= sizeof(*g)) submit(g, size);
  if (!keep) release_slot(s);
}

static __always_inline void flush_gather(struct conn_state* st, struct sock* sk, __u64 end,
                                         __u64 pid_tgid, struct task_struct* task) {
  if (!sk) return;
  struct gather_slot* s = held_slot(st);
  if (s) flush_gathered(st, s, end, pid_tgid, task, 0);
}

/* Adds a send's first `want` bytes (at `buf`, stream position `pos`) to the gather, starting
 * one (that also covers the `hole` folded sendfile bytes before the send) if none is open.
 * Returns 0 when the gather has no room left for them. */
static __always_inline int gather_add(struct conn_state* st, struct gather_buf* g, __u64 pos,
                                      __u32 hole, __u32 want, __u64 buf) {
  if (!st->gathering) {
    g->hdr.stream_pos = pos - hole;
    g->hdr.captured = 0;
    g->hdr.nsegs = 0;
    g->hdr.c.flags = 0;
    st->gathering = 1;
  }
  __u32 at = g->hdr.captured;
  __u32 n = g->hdr.nsegs;
  __u64 offset = pos - g->hdr.stream_pos;
  if (n >= FC_MAX_SEGMENTS || at + want > FC_GATHER_BYTES || offset > 0xffffffffULL) return 0;
  st->gather_src = FC_SRC_GATHERED; /* gather_start names a gather of its one call */
  count(FC_COUNTER_GATHERED);
  __u64 len = want;
  FC_CLAMP(len, FC_GATHER_BYTES);
  if (len == 0) return 1; /* nothing captured: its bytes are a hole of the record */
  if (bpf_probe_read_user(g->data + (at & (FC_GATHER_BYTES - 1)), len, (const void*)buf) != 0) {
    count(FC_COUNTER_COPY_FAULTS);
    g->hdr.c.flags |= FC_FLAG_COPY_FAULT;
    return 1;
  }
  g->hdr.segs[n & (FC_MAX_SEGMENTS - 1)].offset = (__u32)offset;
  g->hdr.segs[n & (FC_MAX_SEGMENTS - 1)].length = (__u32)len;
  g->hdr.nsegs = n + 1;
  g->hdr.captured = at + (__u32)len;
  return 1;
}

/* Gathers a send of `ret` bytes whose first `want` are captured, and hands the record on if the
 * send ends the response. Returns 0 if it cannot be gathered (too large, or no free slot): the
 * caller then gives it a record of its own, after the gathered one. */
static __always_inline int try_gather(struct conn_state* st, struct sock* sk, __u64 pos, __u32 ret,
                                      __u32 hole, __u32 want, __u64 buf, int ends, __u64 pid_tgid,
                                      struct task_struct* task) {
  if (!sk) return 0;
  if (want > FC_GATHER_BYTES) {
    flush_gather(st, sk, pos, pid_tgid, task);
    return 0;
  }
  struct gather_slot* s = st->gathering ? held_slot(st) : claim_slot(st);
  if (!s) return 0;
  if (!gather_add(st, &s->buf, pos, hole, want, buf)) { /* full: hand on what it holds, anew */
    flush_gathered(st, s, pos, pid_tgid, task, 1);
    gather_add(st, &s->buf, pos, 0, want, buf);
  }
  if (ends) flush_gathered(st, s, pos + ret, pid_tgid, task, 0);
  return 1;
}

/* A send that starts a response whose first bytes were captured. */
static __always_inline void start_response(struct conn_state* st, __u64 pos, __u32 ret,
                                           __u32 head) {
  __u32 size = bpf_ntohl(head);
  if (size < 8 || size > FC_MAX_RESPONSE) return; /* stays RESP_UNKNOWN */
  __u64 end = pos + 4 + size;
  if (pos + ret < end) {
    st->resp_end = end;
    st->resp_state = RESP_IN;
  } else if (pos + ret == end) {
    st->resp_state = RESP_NEXT;
  }
}

/* A send that starts a response (sock variant), whose first `want` bytes fit the gather: it
 * opens the gather instead of a record of its own, so that a response of a header and a
 * sendfile (a local fetch of one partition) leaves as one record, not two: a third fewer records
 * for fetchcostd to read (the reservation, submit, clock read and header it saves cost about
 * what the gather's lookup and second copy add, session 21). The record carries the response's
 * end time, microseconds after its start (the channel is muted until the response is out).
 * Its size prefix is read back from the gather; a response that ends with this send is handed
 * on at once. Returns 0 if it was not gathered (the caller gives it a record of its own). */
static __always_inline int gather_start(struct conn_state* st, struct sock* sk, __u8 src, __u64 pos,
                                        __u32 ret, __u32 hole, __u32 want, __u64 buf,
                                        __u64 pid_tgid, struct task_struct* task) {
  if (!sk || want < 4 || want > FC_GATHER_BYTES || st->gathering) return 0;
  struct gather_slot* s = claim_slot(st);
  if (!s) return 0;
  if (!gather_add(st, &s->buf, pos, hole, want, buf)) {
    st->gathering = 0;
    release_slot(s);
    return 0;
  }
  if (!hole) st->gather_src = src; /* one call so far: its record says which */
  /* The size prefix, read back from the slot (no segment: a copy fault). */
  if (s->buf.hdr.nsegs == 1) start_response(st, pos, ret, *(__u32*)s->buf.data);
  if (st->resp_state != RESP_IN) flush_gathered(st, s, pos + ret, pid_tgid, task, 0);
  return 1;
}

/* A sendfile to a TCP socket reaches sock_sendmsg once per pipe's worth of pages (64 KiB), and
 * the send program runs for each: a 1 MiB partition is 16 runs. Once the first splice of a
 * sendfile that starts at stream position `pos` and asks for `count` bytes is folded, the
 * sends that follow it on the socket up to pos + count are that sendfile's bytes (the stream
 * keeps its order; a sendfile that stops short is resumed with the rest, as Kafka's transferTo
 * does), so they are folded without the task, the call's registers or the policy
 * (fold_continuation). The splice that ends the response is left to emit_data. Any other call
 * on the socket ends the run; should one come from another thread in the middle of a sendfile,
 * the next splice starts a run from its own position with the whole count, which may reach
 * past that sendfile, never past the response. */
static __always_inline void expect_splices(struct conn_state* st, __u64 pos, __u64 count) {
  __u64 to = pos + count;
  if (to > st->resp_end - 1) to = st->resp_end - 1;
  st->fold_to = to;
}

/* A send that continues a folded sendfile (expect_splices): its length is folded, as emit_data
 * would. Returns 0 for any other call. */
static __always_inline int fold_continuation(struct conn_state* st, __u32 ret) {
  __u64 end = st->pos[FC_DIR_SEND] + ret;
  if (end > st->fold_to) return 0; /* also fold_to == 0 */
  st->pos[FC_DIR_SEND] = end;
  if (!st->gathering) st->fold_len += ret; /* < 256 MiB: inside one response */
  if (st->policy.bulk_from) st->bulk_run[FC_DIR_SEND] = ret >= st->policy.bulk_from;
  st->folds_uncounted++;
  return 1;
}

/* ---------------------------------------------------------------------------------------- */
/* Quiet fetches (sock variant, Kafka client connections, plaintext; fetchcost_abi.h).        */
/* A consumer's fetch answered from local segments costs the broker three socket calls, and
 * recording it two ring records (its request; its gathered response): about 0.7 us of the
 * programs' 2 us per 1 KiB fetch (docs/performance.md, "Session 26"). Attribution only needs
 * the fetches whose window holds an object-store GET. So a Fetch request that no fetch-session
 * state in userspace depends on seeing (quiet_candidate) waits in a request slot, listed in
 * held_bits. Any send of a target on a connection that is not a Kafka client's (a GET among
 * them) reports every listed request first, so their records come before the GET's. A request
 * still held when its response starts had no such send in its window: it and its response are
 * left out, and the next record in each direction reports their bytes (skipped_before). A GET
 * caused by a fetch is sent after its request arrived, so it always finds it held or reported. */
enum held_request {
  HELD_NONE = 0,
  HELD_PREFIX = 1, /* a 4-byte size prefix alone (a JVM broker reads it first, then the rest) */
  HELD_WHOLE = 2,  /* a whole Fetch request that may be left out, listed in held_bits */
};

/* 1 if d[0..n) is exactly one whole Fetch request whose absence userspace's fetch sessions
 * cannot notice: a version before sessions (v7); session id 0 and epoch -1 (as librdkafka and
 * kafkajs send); or an incremental fetch (a session id and epoch > 0, as the Java client sends)
 * that lists no topic and forgets none, so its session's partitions and offsets stay as they
 * were (a consumer whose positions did not move). An incremental fetch that lists a partition
 * changes its session; one that opens or closes a session changes the set: those are recorded. */
static __always_inline int quiet_candidate(const __u8* d, __u32 n) {
  if (n < 26 || n > FC_HELD_BYTES) return 0;
  if (bpf_ntohl(*(const __u32*)d) + 4 != n || d[4] != 0 || d[5] != 1) return 0;
  __u32 version = ((__u32)d[6] << 8) | d[7];
  if (version > 17) return 0;
  if (version < 7) return 1;
  __u32 client_id = ((__u32)d[12] << 8) | d[13];
  if (client_id == 0xffff) client_id = 0; /* null */
  if (client_id > FC_HELD_BYTES) return 0;
  __u32 off = 14 + client_id;
  if (version >= 12) { /* flexible header: no tagged fields */
    if (d[off & (FC_HELD_BYTES - 1)] != 0) return 0;
    off += 1;
  }
  if (version < 15) off += 4; /* replica_id */
  off += 4 + 4 + 4 + 1;       /* max_wait_ms, min_bytes, max_bytes, isolation_level */
  /* session_id, session_epoch, then the topics' and the forgotten topics' counts: two int32s
   * (0 and 0), or from v12 two unsigned varints of count + 1 (1 and 1) */
  const __u32 counts = version >= 12 ? 2 : 8;
  if (off + 8 + counts > n) return 0;
  off &= FC_HELD_BYTES - 1; /* < n: changes nothing, bounds the reads */
  const __u8* id = d + off;
  const __u32 session = ((__u32)id[0] << 24) | ((__u32)id[1] << 16) | ((__u32)id[2] << 8) | id[3];
  const __u32 epoch = ((__u32)id[4] << 24) | ((__u32)id[5] << 16) | ((__u32)id[6] << 8) | id[7];
  if (session == 0) return epoch == 0xffffffff;
  if (epoch == 0 || epoch >= 0x80000000) return 0; /* epoch 0 or -1: opens or closes */
  const __u8* c = id + 8;
  if (version >= 12) return c[0] == 1 && c[1] == 1;
  return (c[0] | c[1] | c[2] | c[3] | c[4] | c[5] | c[6] | c[7]) == 0;
}

static __always_inline void free_request_slot(struct request_slot* s) {
  __sync_lock_test_and_set(&s->owner, 0);
}

static __always_inline void unlist_request_slot(__u32 i) {
  __sync_fetch_and_and(held_word(i), ~held_bit(i));
}

/* The request's record, as it would have been written when it arrived. */
static __always_inline void report_held(struct request_slot* s) {
  __u64 size = sizeof(struct fc_data_event) + s->hdr.captured;
  /* In asm: the compiler may merge this call with another whose size the verifier bounds less. */
  FC_CLAMP(size, sizeof(struct fc_data_event) + sizeof(s->data));
  submit(&s->hdr, size);
}

/* A store send's turn: reports the request in slot `i` if it is still held. A global function:
 * verified once, not once per bit of report_held_word's loop. */
__noinline int report_held_slot(__u32 i) {
  struct request_slot* s = bpf_map_lookup_elem(&request_slots, &i);
  if (!s || __sync_val_compare_and_swap(&s->state, SLOT_HELD, SLOT_TAKEN) != SLOT_HELD) return 0;
  unlist_request_slot(i);
  report_held(s);
  if (__sync_lock_test_and_set(&s->state, SLOT_EMITTED) == SLOT_LEFT) free_request_slot(s);
  return 1;
}

__noinline int report_held_word(__u32 w) {
  w &= FC_HELD_WORDS - 1;
  __u64 word = held_bits[w * FC_HELD_STRIDE];
  for (__u32 k = 0; k < 64; k++) {
    if (!(word >> k)) break;
    if ((word >> k) & 1) report_held_slot(k * FC_HELD_WORDS + w);
  }
  return 0;
}

/* A send on a connection that is not a Kafka client's: every held request is reported first. */
static __always_inline void report_held_requests(void) {
#pragma unroll
  for (int w = 0; w < FC_HELD_WORDS; w++)
    if (held_bits[w * FC_HELD_STRIDE]) report_held_word(w);
}

/* A connection whose held requests keep being reported by store sends is a consumer reading
 * from the remote tier: its fetches are not quiet, and holding each only to report it costs a
 * remote fetch about an eighth of the programs' time (docs/performance.md, "Session 44"). After
 * FC_PAUSE_AFTER_REPORTS reports in a row, its next FC_PAUSED_REQUESTS requests are recorded
 * as they arrive. A local consumer's request is reported only when another connection's GET
 * happens to leave while it is held: many in a row are rare unless GETs are frequent, and then
 * its holds are often reported anyway (0.961 of the programs' time per fetch at 2,500 GETs/s
 * beside 4,000 local fetches/s, "Session 45"); a long poll that outlasts GETs is reported every
 * time anyway, so its records are the same paused or not. Every FC_PAUSE_PROBE_EVERY-th request
 * of a pause is held as a probe: a local consumer paused by a burst of GETs is held again after
 * its first quiet probe, within 16 requests, and a remote consumer's reported probes renew its
 * pause. A request left out starts the count again and ends a pause (the counts are in
 * fetchcost_abi.h). A size prefix read alone (a JVM broker's) still waits in a slot for its
 * rest, so a paused request is one record, as a held one is. */
_Static_assert(FC_PAUSE_AFTER_REPORTS <= 255 && FC_PAUSED_REQUESTS <= 255,
               "reports_in_a_row and holds_paused are bytes");
_Static_assert((FC_PAUSE_PROBE_EVERY & (FC_PAUSE_PROBE_EVERY - 1)) == 0 &&
                   FC_PAUSED_REQUESTS % FC_PAUSE_PROBE_EVERY == 0,
               "a pause's last request is a probe; the test is a mask");
static __always_inline void count_report(struct conn_state* st, int reported) {
  if (!reported) {
    st->reports_in_a_row = 0;
    st->holds_paused = 0;
  } else if (++st->reports_in_a_row >= FC_PAUSE_AFTER_REPORTS) {
    st->reports_in_a_row = 0;
    st->holds_paused = FC_PAUSED_REQUESTS;
    count(FC_COUNTER_HOLD_PAUSES);
  }
}

/* Counts a request against the connection's pause: 1 when it is to be recorded as it
 * arrives, 0 when it is held (no pause, or a pause's probe). */
static __always_inline int paused_request(struct conn_state* st) {
  __u8 left = st->holds_paused;
  if (!left) return 0;
  st->holds_paused = --left;
  return (left & (FC_PAUSE_PROBE_EVERY - 1)) != 0;
}

static __always_inline struct request_slot* request_slot_of(struct conn_state* st) {
  __u32 i = st->req_slot;
  struct request_slot* s = bpf_map_lookup_elem(&request_slots, &i);
  if (s && s->owner == st->conn_id) return s;
  st->req_held = HELD_NONE; /* cannot happen: the slot is the connection's until it frees it */
  return 0;
}

/* Ends the connection's hold. A request not reported yet is reported now when `report`, else
 * left out (returns 1: the caller leaves its response out too). */
static __always_inline int end_hold(struct conn_state* st, int report) {
  struct request_slot* s = request_slot_of(st);
  st->req_held = HELD_NONE;
  if (!s) return 0;
  unlist_request_slot(st->req_slot);
  __u64 was = __sync_lock_test_and_set(&s->state, SLOT_LEFT);
  count_report(st, was == SLOT_TAKEN || was == SLOT_EMITTED);
  if (was == SLOT_TAKEN) return 0; /* a store send is reporting it, and frees the slot after */
  if (was == SLOT_HELD || was == SLOT_OWNED) {
    if (!report) {
      st->skipped[FC_DIR_RECV] += (__u64)s->hdr.c.skipped_before + s->hdr.length;
      free_request_slot(s);
      return 1;
    }
    report_held(s);
  }
  free_request_slot(s);
  return 0;
}

/* Whether the request whose API key is at user address `key` is a Fetch: a read of 2 bytes, for
 * requests larger than FC_HELD_UNLOOKED_BYTES, before they are copied into a slot. */
static __always_inline int fetch_key_at(__u64 key) {
  __u16 k = 0;
  return bpf_probe_read_user(&k, sizeof(k), (const void*)key) == 0 && k == bpf_htons(1);
}

/* Frames fetch_among_requests follows at most: a receive that starts with a burst of small
 * requests (kcat's ListOffsets, 52 bytes each: 111 of them and its first Fetch came in one 7 KiB
 * segment) fits, and a walk costs at most this many 8-byte reads. */
#define FC_FRAMES_WALKED 256

/* Whether the first `limit` bytes at user address `buf` (a Kafka client's receive) start a Fetch
 * request: read alone after its size prefix, as a JVM broker reads (the API key first), or
 * framed, first or after other requests read with it (followed by their size prefixes). Bytes
 * that only look like a Fetch header (a request read from its middle) are captured further: no
 * harm. A global function: the verifier walks its loop once, not in every program. */
__noinline int fetch_among_requests(__u64 buf, __u32 limit) {
  __u32 at = 0;
  for (int i = 0; i < FC_FRAMES_WALKED; i++) {
    __u8 h[8];
    if (limit < 8 || at > limit - 8 ||
        bpf_probe_read_user(h, sizeof(h), (const void*)(buf + at)) != 0)
      return 0;
    if (h[4] == 0 && h[5] == 1 && h[6] == 0 && h[7] <= 17) return 1;
    if (i == 0 && h[0] == 0 && h[1] == 1 && h[2] == 0 && h[3] <= 17) return 1;
    const __u32 size = (__u32)h[0] << 24 | (__u32)h[1] << 16 | (__u32)h[2] << 8 | h[3];
    if (size >= limit - at) return 0;
    at += 4 + size;
  }
  return 0;
}

/* A Kafka client's receive of `ret` bytes at `buf`, more than the `want` its policy captures: up
 * to FC_MAX_CAPTURE of it if a Fetch request starts in that much, else `want`. Attribution must
 * know every partition a fetch lists, and a librdkafka consumer lists all it reads on the broker
 * in one request (29 bytes each in v11: 4 KiB is about 140); a Fetch past the cut would lie
 * wholly in the hole. Other requests past the cap are mostly Produce requests, whose records no
 * decoder reads. */
static __always_inline __u32 fetch_request_want(__u64 buf, __u32 ret, __u32 want) {
  const __u32 limit = min_u32(ret, FC_MAX_CAPTURE);
  return fetch_among_requests(buf, limit) ? limit : want;
}

/* A receive of `ret` bytes at stream position `pos`, whose first `want` are at `buf`: held
 * (returns 1, no record now) if it is a whole Fetch request that may be left out
 * (quiet_candidate), or the size prefix of one. A whole request of another kind that was read
 * into a slot leaves from there. */
static __always_inline int hold_request(struct conn_state* st, struct sock* sk, __u8 src, __u64 pos,
                                        __u32 ret, __u32 want, __u64 buf, __u64 pid_tgid,
                                        struct task_struct* task) {
  struct request_slot* s = 0;
  int record_now = 0; /* the rest of a size prefix read while holds are paused */
  __u32 n = ret;
  __u64 len = ret; /* clamped in asm: the verifier needs the bound on the copy's own register */
  FC_CLAMP(len, FC_HELD_BYTES);
  if (st->req_held == HELD_PREFIX) { /* the rest of the request whose prefix is held */
    s = request_slot_of(st);
    if (!s) return 0;
    if (want != ret || ret != bpf_ntohl(*(__u32*)s->data) || ret > FC_HELD_BYTES - 4 ||
        pos != s->hdr.stream_pos + 4 || (ret > FC_HELD_UNLOOKED_BYTES - 4 && !fetch_key_at(buf)) ||
        bpf_probe_read_user(s->data + 4, len, (const void*)buf) != 0) {
      end_hold(st, 1); /* the prefix's own record; this call gets one as any other */
      return 0;
    }
    n = ret + 4;
    record_now = paused_request(st);
    s->hdr.c.timestamp_ns = bpf_ktime_get_ns(); /* the request is in when its last byte is */
    s->hdr.c.tid = (__u32)pid_tgid;
    s->hdr.source = src;
    s->hdr.length = n;
  } else {
    /* Bytes left out are reported by the next record in their direction (skipped_before, 32
     * bits): past 1 GiB of them, requests are recorded until one has reported them. */
    if (!cfg_skip_quiet_fetches || !sk || want != ret || st->resp_state != RESP_NEXT ||
        st->gathering || (ret != 4 && (ret < 26 || ret > FC_HELD_BYTES)) ||
        (st->skipped[FC_DIR_RECV] | st->skipped[FC_DIR_SEND]) >= (1U << 30) ||
        (ret > FC_HELD_UNLOOKED_BYTES && !fetch_key_at(buf + 4)))
      return 0;
    if (ret != 4 && paused_request(st)) return 0; /* a size prefix waits for its rest */
    __u32 i = 0;
    s = (struct request_slot*)claim_in(&request_slots, FC_REQUEST_SLOTS - 1, st->conn_id, &i);
    if (!s) return 0;
    if (bpf_probe_read_user(s->data, len, (const void*)buf) != 0) {
      free_request_slot(s);
      return 0;
    }
    s->state = SLOT_OWNED;
    st->req_slot = i;
    /* Takes the whole messages left out before it: a request left out gives them back. */
    fill_data_hdr(&s->hdr, st, pid_tgid, task, src, pos, ret, FC_DIR_RECV, 0);
    s->hdr.nsegs = 1;
    s->hdr.segs[0].offset = 0;
    if (ret == 4) {
      s->hdr.captured = 4;
      s->hdr.segs[0].length = 4;
      st->req_held = HELD_PREFIX;
      return 1;
    }
  }
  s->hdr.captured = n;
  s->hdr.segs[0].length = n;
  st->req_held = HELD_NONE;
  /* Holds paused (the rest of a size prefix: one record, as a held request's), or another
   * request read whole: its record, from here. */
  if (record_now || !quiet_candidate(s->data, n)) {
    report_held(s); /* OWNED, never listed: no store send can have taken it */
    free_request_slot(s);
    return 1;
  }
  __sync_lock_test_and_set(&s->state, SLOT_HELD);
  __sync_fetch_and_or(held_word(st->req_slot), held_bit(st->req_slot));
  st->req_held = HELD_WHOLE;
  return 1;
}

/* The first 8 bytes of a send (a Kafka response's size prefix and correlation id), for the calls
 * that have them in their first buffer. */
static __always_inline int response_head(__u8 src, __u64 buf, __u64 cnt, __u32 ret, __u32* head) {
  if (ret < 8) return 0;
  if (src == FC_SRC_WRITE || src == FC_SRC_SENDTO)
    return bpf_probe_read_user(head, 8, (const void*)buf) == 0;
  __u64 iov_ptr = buf;
  if (src == FC_SRC_SENDMSG) {
    struct fc_user_msghdr msg;
    if (bpf_probe_read_user(&msg, sizeof(msg), (const void*)buf) != 0) return 0;
    iov_ptr = msg.msg_iov;
    cnt = msg.msg_iovlen;
  } else if (src != FC_SRC_WRITEV) {
    return 0;
  }
  struct fc_user_iovec iov;
  if (cnt == 0 || bpf_probe_read_user(&iov, sizeof(iov), (const void*)iov_ptr) != 0 ||
      iov.iov_len < 8)
    return 0;
  return bpf_probe_read_user(head, 8, (const void*)iov.iov_base) == 0;
}

/* Whether this call continues the connection's held request: the rest of its size prefix (a
 * one-range receive), or the first send of a response. */
static __always_inline int continues_hold(struct conn_state* st, __u8 src, __u8 direction) {
  if (st->policy.role != FC_ROLE_KAFKA_CLIENT || st->tls) return 0;
  if (direction == FC_DIR_RECV)
    return st->req_held == HELD_PREFIX && (src == FC_SRC_READ || src == FC_SRC_RECVFROM);
  return st->req_held == HELD_WHOLE && st->resp_state == RESP_NEXT;
}

/* The first send of a response while a request is held (`ret` bytes at `pos`). If it answers
 * that request (its correlation id: a client that pipelines may have sent another since) and no
 * store send reported the request, both are left out (returns 1); else the request leaves now,
 * if it has not, and the response is handled as any other (returns 0). */
static __always_inline int start_skip(struct conn_state* st, __u8 src, __u64 buf, __u64 cnt,
                                      __u64 pos, __u32 ret, __u64 pid_tgid,
                                      struct task_struct* task) {
  __u32 head[2] = {};
  int framed =
      st->req_held == HELD_WHOLE && st->fold_len == 0 && response_head(src, buf, cnt, ret, head);
  if (framed) {
    struct request_slot* s = request_slot_of(st);
    framed = s && *(__u32*)(s->data + 8) == head[1];
  }
  __u32 size = bpf_ntohl(head[0]);
  __u64 end = pos + 4 + size;
  if (!framed || size < 8 || size > FC_MAX_RESPONSE || pos + ret > end) {
    end_hold(st, 1);
    return 0;
  }
  if (!end_hold(st, 0)) return 0;
  st->skip_from = pos;
  if (pos + ret == end) { /* the whole response in one send */
    st->skipped[FC_DIR_SEND] += ret;
    st->resp_state = RESP_NEXT;
    count(FC_COUNTER_QUIET_FETCHES);
  } else {
    /* Its later sends up to its end only move the position (fold_continuation, before the
     * task's registers are read); the next call on the connection finishes it (finish_skip). */
    st->resp_end = end;
    st->fold_to = end;
    st->resp_state = RESP_SKIP;
  }
  return 1;
}

/* A send inside a response left out: returns 1 if it is one (its bytes are left out too), 0
 * if it runs past the response's end (the framing was wrong: the bytes left out so far become
 * a hole before this send, and it is handled as any other). */
static __always_inline int skip_send(struct conn_state* st, __u64 pos, __u32 ret) {
  __u64 end = pos + ret;
  if (end <= st->resp_end) {
    st->fold_to = st->resp_end; /* again: a receive in the middle ended the fast path */
    return 1;
  }
  st->fold_len = (__u32)(pos - st->skip_from); /* < FC_MAX_RESPONSE */
  st->resp_state = RESP_UNKNOWN;
  return 0;
}

/* The response left out has been sent whole (its last bytes may have come through
 * fold_continuation, which only moves the position): its bytes join the count the next send
 * record reports, and the connection waits for the next response. */
static __always_inline void finish_skip(struct conn_state* st) {
  st->skipped[FC_DIR_SEND] += st->resp_end - st->skip_from;
  st->fold_len = 0;        /* fold_continuation's bytes: inside the response left out */
  st->folds_uncounted = 0; /* not sendfiles folded into a record */
  st->fold_to = 0;
  st->resp_state = RESP_NEXT;
  count(FC_COUNTER_QUIET_FETCHES);
}

/* The connection is closing (or leaves the Kafka framing) while a response is left out: sent
 * whole, it is finished; else what was left out of it becomes a hole, reported as folded bytes. */
static __always_inline void abandon_skip(struct conn_state* st) {
  if (st->resp_state != RESP_SKIP) return;
  if (st->pos[FC_DIR_SEND] == st->resp_end) {
    finish_skip(st);
    return;
  }
  st->fold_len = (__u32)(st->pos[FC_DIR_SEND] - st->skip_from);
  st->folds_uncounted = 0;
  st->fold_to = 0;
  st->resp_state = RESP_UNKNOWN;
}

/* A pending fold this call cannot carry, to report before it: sendfile bytes (outside the Kafka
 * path: its role or TLS changed), or object-body reads before a send (the next request), a role
 * or a TLS change. A receive of the object-store connection carries them in its record
 * (fill_data_hdr). */
static __always_inline int fold_to_flush(const struct conn_state* st, __u8 direction) {
  return st->fold_len && (direction == FC_DIR_SEND || !st->fold_recv_src ||
                          st->policy.role != FC_ROLE_OBJECT_STORE || st->tls);
}

/* One data event for a target's socket call. `buf`, `cnt`: the call's buffer and its count or
 * iovec count when `src` names a syscall, else ignored. */
static __always_inline void emit_data(struct conn_state* st, struct sock* sk, __u64 pid_tgid,
                                      __u8 src, __u64 buf, __u64 cnt, __u32 ret, __u8 direction,
                                      struct task_struct* task) {
  if (st->policy_epoch != policy_epoch + 1) { /* the target's default policy is needed */
    struct fc_target* t = target_of(pid_tgid >> 32);
    if (!t) return; /* being removed */
    resolve_policy(st, t);
  }
  __u64 pos = __sync_fetch_and_add(&st->pos[direction & 1], (__u64)ret);
  /* Quiet fetches: a send that may be a GET reports every held request before its own record;
   * a held request that this call does not continue (its rest, its response) leaves first.
   * Nothing computed here stays live below: the verifier would carry it through every path. */
  if (direction == FC_DIR_SEND && st->policy.role != FC_ROLE_KAFKA_CLIENT) report_held_requests();
  if (st->req_held && !continues_hold(st, src, direction)) end_hold(st, 1);
  __u32 call_cap = st->policy.bytes_per_call;
  __u32 iov_cap = st->policy.bytes_per_iovec;
  if (st->policy.bulk_from) { /* inside a bulk run: a message body, copy only a prefix */
    __u8 d = direction & 1;
    if (st->bulk_run[d]) {
      /* One-range calls: the call's prefix. Vectored calls: each iovec's prefix, so headers
       * written as their own iovecs between bodies (Kafka's partition headers) still fit. */
      iov_cap = min_u32(iov_cap, st->policy.bulk_bytes);
      if (src != FC_SRC_READV && src != FC_SRC_WRITEV && src != FC_SRC_SENDMSG &&
          src != FC_SRC_RECVMSG)
        call_cap = min_u32(call_cap, st->policy.bulk_bytes);
    }
    /* The broker's object-store connections (plaintext): the response to a GET arrives in as
     * many reads as the socket hands it over in, often below bulk_from each. Its header is in
     * the first read after the request went out; every read after that one is object body. */
    if (direction == FC_DIR_RECV && st->policy.role == FC_ROLE_OBJECT_STORE) {
      st->recv_src = src;
      call_cap = object_store_read_cap(call_cap, &st->policy, st->bulk_run[d]);
      iov_cap = min_u32(iov_cap, call_cap);
    }
    st->bulk_run[d] = ret >= st->policy.bulk_from ||
                      (direction == FC_DIR_RECV && st->policy.role == FC_ROLE_OBJECT_STORE);
    st->bulk_run[d ^ 1] = 0;
    /* A large one-range send that continues a Kafka response is a partition's records (a JVM
     * broker writes each in-memory records buffer with a write of its own, between the headers'
     * writevs): its first bytes are not a header either. */
    if (direction == FC_DIR_SEND && st->resp_state == RESP_IN && ret >= st->policy.bulk_from &&
        st->policy.role == FC_ROLE_KAFKA_CLIENT && !st->tls)
      call_cap = min_u32(call_cap, st->policy.bulk_bytes);
  }

  /* A TLS library call in progress on this thread owns this socket. The hooked calls (SSL_read,
   * SSL_write, gnutls_record_recv/send) move bytes with read/write/send/recv calls, never with
   * sendfile or splice: those, most of a broker's sends for local fetches, skip the lookup. */
  if (tls_calls_open > 0 && src != FC_SRC_SENDFILE && src != FC_SRC_SPLICE) {
    __u32 tid = (__u32)pid_tgid;
    struct fc_tls_call* call = bpf_map_lookup_elem(&tls_calls, &tid);
    if (call) {
      call->conn.conn_id = st->conn_id;
      call->conn.generation = st->generation;
      call->conn.fd = st->fd;
      call->conn.local_port = st->local_port;
      call->conn.peer_port = st->peer_port;
      st->tls = 1;
    }
  }

  /* A response left out, sent whole by now: counted before this call is handled. */
  if (st->resp_state == RESP_SKIP &&
      (direction == FC_DIR_SEND ? pos : st->pos[FC_DIR_SEND]) == st->resp_end)
    finish_skip(st);
  /* A call that is not a folded splice ends a sendfile's run of them. */
  st->fold_to = 0;
  count_uncounted_folds(st);

  __u32 hole = 0; /* folded sendfile bytes right before this call (send direction) */
  int starts = 0; /* this send starts a Kafka response */
  int gather = 0; /* this send continues a response: gather it (sock variant) */
  int ends = 0;   /* ... and ends it */
  if (st->policy.role == FC_ROLE_KAFKA_CLIENT && !st->tls && !st->fold_recv_src) {
    if (direction == FC_DIR_RECV) {
      flush_fold(st, pid_tgid, task, pos);
      flush_gather(st, sk, st->pos[FC_DIR_SEND], pid_tgid, task);
      if (st->resp_state == RESP_UNKNOWN) st->resp_state = RESP_NEXT;
    } else if (st->resp_state == RESP_SKIP && skip_send(st, pos, ret)) {
      return;
    } else if (st->resp_state == RESP_IN) {
      __u64 end = pos + ret;
      if (end < st->resp_end) {
        if (src == FC_SRC_SENDFILE && st->gathering) { /* inside the gathered record's range */
          st->gather_src = FC_SRC_GATHERED;
          if (sk) expect_splices(st, pos, cnt);
          count(FC_COUNTER_FOLDED);
          return;
        }
        if (src == FC_SRC_SENDFILE && ret <= 0xffffffffU - st->fold_len) {
          st->fold_len += ret;
          if (sk) expect_splices(st, pos, cnt);
          count(FC_COUNTER_FOLDED);
          return;
        }
        gather = sk != 0;
      } else {
        st->resp_state = end == st->resp_end ? RESP_NEXT : RESP_UNKNOWN;
        /* The send that ends the response joins an open gather; alone it needs none. */
        ends = gather = end == st->resp_end && st->gathering;
        if (ends && src == FC_SRC_SENDFILE) {
          st->gather_src = FC_SRC_GATHERED;
          count(FC_COUNTER_FOLDED);
          flush_gather(st, sk, end, pid_tgid, task);
          return;
        }
      }
    } else if (st->resp_state == RESP_NEXT) {
      starts = 1;
      st->resp_state = RESP_UNKNOWN; /* until the size prefix is read below */
      if (st->req_held && start_skip(st, src, buf, cnt, pos, ret, pid_tgid, task)) return;
    }
    if (direction == FC_DIR_SEND) {
      hole = st->fold_len;
      st->fold_len = 0;
    }
  } else if (fold_to_flush(st, direction) || st->gathering || st->resp_state == RESP_SKIP) {
    /* Its role or TLS changed with one pending (a gather, a skip, a fold). */
    abandon_skip(st);
    flush_fold(st, pid_tgid, task, direction == FC_DIR_RECV ? pos : st->pos[FC_DIR_RECV]);
    flush_gather(st, sk, direction == FC_DIR_SEND ? pos : st->pos[FC_DIR_SEND], pid_tgid, task);
  }
  /* A send that is not gathered comes after what was (a wrong guess of the framing, a call that
   * cannot be gathered). */
  if (direction == FC_DIR_SEND && !gather) flush_gather(st, sk, pos, pid_tgid, task);
  if (st->tls && !cfg_record_ciphertext) { /* its plaintext comes as TLS_DATA */
    count(FC_COUNTER_CIPHERTEXT_SKIPPED);
    return;
  }

  const int one_range =
      src == FC_SRC_READ || src == FC_SRC_WRITE || src == FC_SRC_SENDTO || src == FC_SRC_RECVFROM;
  const int vectored =
      src == FC_SRC_READV || src == FC_SRC_WRITEV || src == FC_SRC_SENDMSG || src == FC_SRC_RECVMSG;
  if (st->tls || st->policy.role == FC_ROLE_IGNORE || call_cap == 0 || !(one_range || vectored)) {
    if (gather) flush_gather(st, sk, pos, pid_tgid, task);
    emit_length_only(st, pid_tgid, task, src, pos, ret, direction, hole);
    return;
  }
  __u32 head = 0; /* the call's first 4 bytes, when captured */
  if (one_range) {
    __u32 want = min_u32(ret, call_cap);
    if (direction == FC_DIR_RECV && st->policy.role == FC_ROLE_KAFKA_CLIENT) {
      if (hold_request(st, sk, src, pos, ret, want, buf, pid_tgid, task)) return;
      if (ret > want) want = fetch_request_want(buf, ret, want);
    }
    if (gather && try_gather(st, sk, pos, ret, hole, want, buf, ends, pid_tgid, task)) return;
    if (starts && gather_start(st, sk, src, pos, ret, hole, want, buf, pid_tgid, task)) return;
    emit_direct(st, pid_tgid, task, src, pos, ret, direction, hole, want, buf, &head);
    if (starts && head) start_response(st, pos, ret, head);
    return;
  }

  const __u32 body_from = direction == FC_DIR_SEND ? st->policy.bulk_from : 0;
  const __u32 body_bytes = st->policy.bulk_bytes;
  __u64 iov_ptr = buf, iovcnt = cnt;
  int msg_fault = 0;
  if (src == FC_SRC_SENDMSG || src == FC_SRC_RECVMSG) {
    struct fc_user_msghdr msg;
    if (bpf_probe_read_user(&msg, sizeof(msg), (const void*)buf) == 0) {
      iov_ptr = msg.msg_iov;
      iovcnt = msg.msg_iovlen;
    } else {
      msg_fault = 1;
    }
  }
  /* One iovec (a header written on its own between sendfiles, a request read into one buffer):
   * a one-range record, copied straight into the ring, with the short header; a Fetch among a
   * Kafka client's requests captured further, as by read. */
  if (!msg_fault && iovcnt == 1) {
    struct fc_user_iovec iov;
    if (bpf_probe_read_user(&iov, sizeof(iov), (const void*)iov_ptr) == 0) {
      __u32 seg = iov.iov_len < (__u64)ret ? (__u32)iov.iov_len : ret;
      __u32 cap = body_from && iov.iov_len >= body_from ? min_u32(iov_cap, body_bytes) : iov_cap;
      __u32 want = min_u32(min_u32(seg, cap), min_u32(call_cap, FC_MAX_CAPTURE));
      if (direction == FC_DIR_RECV && st->policy.role == FC_ROLE_KAFKA_CLIENT && seg > want)
        want = fetch_request_want(iov.iov_base, seg, want);
      if (gather && try_gather(st, sk, pos, ret, hole, want, iov.iov_base, ends, pid_tgid, task))
        return;
      if (starts && gather_start(st, sk, src, pos, ret, hole, want, iov.iov_base, pid_tgid, task))
        return;
      if (want == 0)
        emit_length_only(st, pid_tgid, task, src, pos, ret, direction, hole);
      else
        emit_direct(st, pid_tgid, task, src, pos, ret, direction, hole, want, iov.iov_base, &head);
      if (starts && head) start_response(st, pos, ret, head);
      return;
    }
  }

  if (gather) flush_gather(st, sk, pos, pid_tgid, task); /* several iovecs: not gathered */
  struct event_buf* ev = scratch_buf();
  if (!ev) return;
  fill_data_hdr(&ev->hdr, st, pid_tgid, task, src, pos, ret, direction, hole);
  if (msg_fault) {
    count(FC_COUNTER_COPY_FAULTS);
    ev->hdr.c.flags |= FC_FLAG_COPY_FAULT;
  } else {
    copy_iovecs(ev, iov_ptr, iovcnt, ret, call_cap, iov_cap, body_from, body_bytes);
  }
  if (starts && ev->hdr.nsegs > 0 && ev->hdr.segs[0].offset == 0 && ev->hdr.segs[0].length >= 4)
    start_response(st, pos, ret, *(__u32*)ev->data);
  __u64 size = sizeof(struct fc_data_event) + (__u64)ev->hdr.captured; /* up to FC_MAX_CAPTURE */
  if (size > sizeof(*ev)) return;
  submit(ev, size);
}

/* Body hints (fetchcost_abi.h): set by a body read folded in step with the socket's copied_seq;
 * a later read of the socket on this CPU is folded without the connection's state while no byte
 * was written on the socket since (a request) and no policy changed. */
static __always_inline struct fc_body_hint* this_cpu_body_hint(void) {
  __u32 zero = 0;
  return bpf_map_lookup_elem(&body_hints, &zero);
}

static __always_inline void set_body_hint(struct conn_state* st, struct sock* sk, __u32 write_seq) {
  struct fc_body_hint* h = this_cpu_body_hint();
  if (!h) return;
  h->sk = (__u64)sk;
  h->policy_epoch = policy_epoch;
  h->write_seq = write_seq;
  st->body_hinted = 1;
}

/* A receive that this CPU's body hint folds: returns 1, and the connection's state is not
 * looked up (catch_up_hinted counts the bytes at its next other event). */
static __always_inline int folded_by_hint(struct sock* sk) {
  struct fc_body_hint* h = this_cpu_body_hint();
  if (!h || h->sk != (__u64)sk || h->policy_epoch != policy_epoch) return 0;
  /* Closed (its state gone with the close's record): a read of what a reset left queued is a
   * new connection's, as it was without hints. */
  if (sk->__sk_common.skc_state == TCP_CLOSE) return 0;
  struct tcp_sock* tp = bpf_skc_to_tcp_sock(sk);
  if (!tp || tp->write_seq != h->write_seq || tp->rcv_nxt - tp->copied_seq <= 1) return 0;
  h->reads++;
  return 1;
}

/* Reads folded by body hints left the connection's state as it was; the socket's copied_seq has
 * their bytes. Before the connection's next other event (`this_read`: the bytes of the receive
 * in progress, if it is one) they join its pending fold. A send or the close ends the hints. */
static __always_inline void catch_up_hinted(struct conn_state* st, struct sock* sk, __u32 this_read,
                                            int ends) {
  struct tcp_sock* tp = bpf_skc_to_tcp_sock(sk);
  if (!tp) return;
  __u32 copied = tp->copied_seq;
  __u32 gap = copied - this_read - st->recv_seq;
  st->recv_seq = copied;
  if (ends) st->body_hinted = 0;
  /* Sendfile bytes cannot be pending (a send ends the hints before it is handled); a gap past
   * 2 GiB is a read on another CPU racing this one, left out rather than misplaced. */
  if (!gap || gap > 0x7fffffffU || (st->fold_len && !st->fold_recv_src) ||
      gap > 0xffffffffU - st->fold_len)
    return;
  __sync_fetch_and_add(&st->pos[FC_DIR_RECV], (__u64)gap);
  st->fold_len += gap;
  st->fold_recv_src = st->recv_src;
}

/* Object-body reads (the broker's object-store connections, plaintext or opaque TLS): a GET's
 * response body comes in as many reads as the client's buffer takes (a JVM HTTP client reads
 * 8-16 KiB at a time, hundreds of reads per 4 MiB chunk), each a record of its length alone. A
 * body read that leaves bytes in the socket's receive queue is certain to be followed by another
 * read of this connection (or its close), so it makes no record: its length is folded into the
 * connection and reported as hole_before of the connection's next receive record
 * (fill_data_hdr). The read that empties the queue, the response's last among them, keeps its
 * record, so the response's end is reported when it is read, not later. A send (the next
 * request) or the close reports a pending fold first, in an empty receive record. The folded
 * reads share the source of the receive recorded before them.
 * Called right after the socket's state is found, outside emit_data, where one more branch that
 * returns doubled the paths the verifier walks; in the sock variant, as fold_continuation is for
 * sends, before the call's registers are read. Returns 1 if folded. */
static __always_inline int fold_body_read(struct conn_state* st, struct sock* sk, __u32 ret,
                                          int trusted_sk) {
  if (st->policy.role != FC_ROLE_OBJECT_STORE || !st->bulk_run[FC_DIR_RECV] || st->tls ||
      st->policy_epoch != policy_epoch + 1)
    return 0; /* not inside a response's body, or its policy must be looked up again */
  if (st->fold_len && !st->fold_recv_src) return 0; /* sendfile bytes pending (a role change) */
  __u64 folded = (__u64)st->fold_len + ret;
  __u8 src = st->recv_src;
  if (folded > 0xffffffffU || src == FC_SRC_UNKNOWN) return 0;
  /* Unread bytes after this read. More than one: a FIN counts one in rcv_nxt, and a fold behind
   * it would wait for the close. */
  __u32 queued;
  int in_step = 0;     /* sock variant: the fold may set this CPU's body hint */
  __u32 write_seq = 0; /* ... for the socket as it is now */
  if (trusted_sk) {    /* sock variant */
    struct tcp_sock* tp = bpf_skc_to_tcp_sock(sk);
    if (!tp) return 0;
    __u32 copied = tp->copied_seq;
    queued = tp->rcv_nxt - copied;
    /* The socket's copied_seq moved by this read alone since the last one seen here (or
     * catch_up_hinted saw it, this call): it counts what the reads return (no kernel TLS, no
     * reads outside these hooks), so this CPU's next reads of the socket can be folded by its
     * body hint and counted from it later. */
    __u32 moved = copied - st->recv_seq;
    in_step = moved == ret || moved == 0;
    write_seq = tp->write_seq;
    st->recv_seq = copied;
  } else { /* syscall variants: the socket found from the fd, read by CO-RE probe reads. A stream
            * socket that is not TCP (MPTCP, SCTP) gives a meaningless count here, which can only
            * fold a last read, reported then by the connection's next call or close. */
    struct tcp_sock* tp = (struct tcp_sock*)sk;
    queued = BPF_CORE_READ(tp, rcv_nxt) - BPF_CORE_READ(tp, copied_seq);
  }
  if (queued <= 1) return 0;
  __sync_fetch_and_add(&st->pos[FC_DIR_RECV], (__u64)ret);
  st->fold_len = (__u32)folded;
  st->fold_recv_src = src;
  st->folds_uncounted++;
  if (in_step) set_body_hint(st, sk, write_seq);
  return 1;
}

/* ---------------------------------------------------------------------------------------- */
/* Variant 1: sock tracepoints (tp_btf).                                                      */

static __always_inline int on_sock_io(struct sock* sk, int ret, int flags, __u8 direction) {
  if (ret <= 0) return 0;
  /* Trusted BTF pointers: plain (CO-RE relocated) loads, no probe-read helper calls. */
  struct task_struct* task = bpf_get_current_task_btf();
  __u64 pid_tgid = pid_tgid_of(task);
  if (!is_target(pid_tgid >> 32)) return 0;
  if (direction == FC_DIR_RECV && (flags & MSG_PEEK)) return 0; /* not consumed */
  if (direction == FC_DIR_RECV && folded_by_hint(sk)) return 0;
  /* The socket's state before the call's registers: a sendfile's later splices need no more. */
  struct conn_state* st = bpf_sk_storage_get(&conn_store, sk, 0, 0);
  if (st && direction == FC_DIR_SEND && fold_continuation(st, (__u32)ret)) return 0;
  if (st && st->body_hinted)
    catch_up_hinted(st, sk, direction == FC_DIR_RECV ? (__u32)ret : 0, direction == FC_DIR_SEND);
  if (st && direction == FC_DIR_RECV && fold_body_read(st, sk, (__u32)ret, 1)) return 0;

  struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(task);
  __u8 src = FC_SRC_IO_URING;
  long nr = -1;
  if (!(task->flags & PF_IO_WORKER)) {
    nr = regs->orig_ax;
    src = source_of(nr);
  }
  __s32 fd = -1;
  __u64 arg_buf = 0, arg_cnt = 0;
  if (src != FC_SRC_UNKNOWN && src != FC_SRC_IO_URING) {
    fd = (__s32)regs->di;
    arg_buf = regs->si;
    arg_cnt = src == FC_SRC_SENDFILE ? regs->r10 : regs->dx; /* sendfile's count is its 4th */
  }

  if (!st) {
    st = new_sock_conn(sk, bpf_get_socket_cookie(sk), fd, FC_ORIGIN_FIRST_DATA, pid_tgid);
    if (!st) return 0;
  } else if (st->ignored) {
    return 0;
  } else if (st->fd < 0 && fd >= 0) { /* first seen without an fd (io_uring): learn it now */
    st->fd = fd;
    st->generation = next_generation(pid_tgid >> 32, fd, st->conn_id);
  }
  emit_data(st, sk, pid_tgid, src, arg_buf, arg_cnt, (__u32)ret, direction, task);
  return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send_length, struct sock* sk, int ret, int flags) {
  return on_sock_io(sk, ret, flags, FC_DIR_SEND);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(sock_recv_length, struct sock* sk, int ret, int flags) {
  return on_sock_io(sk, ret, flags, FC_DIR_RECV);
}

/* A tracked socket reaching TCP_CLOSE is gone (after close(), a reset, or TIME_WAIT). Also
 * loaded with the syscall-tracepoint variant where the kernel has it: there it reports the
 * connections that end without a close() of their own (reset by the peer, timed out, the
 * process exited); an explicit close() has already reported and removed the connection. */
SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(sock_set_state, struct sock* sk, int oldstate, int newstate) {
  if (newstate != TCP_CLOSE) return 0;
  if (!cfg_conns_by_address) {
    struct conn_state* st = bpf_sk_storage_get(&conn_store, sk, 0, 0);
    if (!st) return 0;
    if (st->body_hinted) catch_up_hinted(st, sk, 0, 1);
    if (!st->ignored) emit_close(st, sk, bpf_get_current_pid_tgid());
    /* Gone now, not when the socket is freed: a socket connected again is a new connection. */
    bpf_sk_storage_delete(&conn_store, sk);
    return 0;
  }
  __u64 key = (__u64)sk;
  struct conn_state* st = bpf_map_lookup_elem(&conns, &key);
  if (!st) return 0;
  /* Synthetic ids (fallback) are keyed by the live socket: accept/connect replace the entry. */
  if (!st->ignored &&
      ((st->conn_id & FC_CONN_ID_SYNTHETIC) || st->conn_id == bpf_get_socket_cookie(sk)))
    emit_close(st, sk, bpf_get_current_pid_tgid());
  bpf_map_delete_elem(&conns, &key);
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* Variant 2: syscall tracepoints.                                                           */

/* `task`: the current task as a trusted pointer (the exit programs), or 0. With it, the walk to
 * the fd table is plain loads (guarded by the verifier as probe reads are, without a helper call
 * each); the rest are probe reads either way: an array of pointers and `void *private_data` are
 * not typed pointers the verifier follows. */
static __always_inline struct sock* sock_of_fd(__s32 fd, struct task_struct* task) {
  if (fd < 0) return 0;
  __u32 max_fds;
  struct file** fds;
  if (task) {
    struct files_struct* files = task->files;
    if (!files) return 0;
    struct fdtable* fdt = files->fdt;
    if (!fdt) return 0;
    max_fds = fdt->max_fds;
    fds = fdt->fd;
  } else {
    struct task_struct* current = (struct task_struct*)bpf_get_current_task();
    struct fdtable* fdt = BPF_CORE_READ(current, files, fdt);
    if (!fdt) return 0;
    max_fds = BPF_CORE_READ(fdt, max_fds);
    fds = BPF_CORE_READ(fdt, fd);
  }
  if ((__u32)fd >= max_fds) return 0;
  struct file* f = 0;
  if (bpf_core_read(&f, sizeof(f), &fds[fd]) != 0 || !f) return 0;
  unsigned short mode = BPF_CORE_READ(f, f_inode, i_mode);
  if ((mode & S_IFMT) != S_IFSOCK) return 0;
  struct socket* so = BPF_CORE_READ(f, private_data);
  if (!so) return 0;
  return BPF_CORE_READ(so, sk);
}

static __always_inline __u64 synthetic_conn_id(void) {
  return FC_CONN_ID_SYNTHETIC | (__sync_fetch_and_add(&next_conn_id, 1) + 1);
}

/* The record layout of tracepoint/syscalls/sys_{enter,exit}_* (stable ABI of the syscall
 * tracepoints: `struct syscall_trace_enter/exit` in the kernel, not raw_syscalls' layout). */
struct fc_syscall_enter {
  __u64 ent; /* struct trace_entry */
  __s32 nr;
  __s32 pad;
  __u64 args[6]; /* only as many as the syscall has; the rest is not ours to read */
};
struct fc_syscall_exit {
  __u64 ent;
  __s32 nr;
  __s32 pad;
  __s64 ret;
};

static __always_inline int on_sys_enter(struct fc_syscall_enter* ctx) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  /* The bit alone, as on the sock variant's path: userspace sets it only while the target's
   * entry exists (after adding it, cleared before removing it), so looking the entry up here
   * as well only cost every target's call a hash lookup. */
  if (!is_target(pid_tgid >> 32)) return 0;
  struct sc_args a = {};
  a.nr = ctx->nr;
  /* Probe-read: a syscall with fewer than four arguments has a shorter record; the extra
   * words are never used for it. Plain loads of them would make the attach fail (EACCES):
   * the kernel refuses a program whose furthest context read passes the record's end. */
  bpf_probe_read_kernel(a.args, sizeof(a.args), ctx->args);
  __u32 tid = (__u32)pid_tgid;
  if (a.nr == NR_close) { /* nothing to wait for: report and forget the connection now */
    struct sock* sk = sock_of_fd((__s32)a.args[0], 0);
    if (!sk) return 0;
    __u64 key = (__u64)sk;
    struct conn_state* st = bpf_map_lookup_elem(&conns, &key);
    if (!st) return 0;
    if (!st->ignored) emit_close(st, 0, pid_tgid);
    bpf_map_delete_elem(&conns, &key);
    return 0;
  }
  bpf_map_update_elem(&sc_inflight, &tid, &a, BPF_ANY);
  return 0;
}

static __always_inline __u32 mmsg_total(__u64 vec, long n) {
  __u32 total = 0;
#pragma unroll
  for (int i = 0; i < FC_MAX_SEGMENTS; i++) {
    if (i >= n) break;
    __u32 len = 0;
    bpf_probe_read_user(&len, sizeof(len),
                        (const void*)(vec + i * sizeof(struct fc_user_mmsghdr) +
                                      __builtin_offsetof(struct fc_user_mmsghdr, msg_len)));
    total += len;
  }
  return total;
}

/* A target's syscall returned `ret`: its number and first four arguments are in `a`. `task`: the
 * current task as a trusted pointer, or 0 (see fill_common_task). */
static __always_inline int on_call_exit(const struct sc_args* ap, long ret, __u64 pid_tgid,
                                        struct task_struct* task) {
  const struct sc_args a = *ap;
  if (a.nr == NR_accept || a.nr == NR_accept4 || a.nr == NR_connect) {
    if (a.nr == NR_connect && ret != 0 && ret != -115 /* EINPROGRESS */) return 0;
    if (a.nr != NR_connect && ret < 0) return 0;
    __s32 fd = a.nr == NR_connect ? (__s32)a.args[0] : (__s32)ret;
    struct sock* sk = sock_of_fd(fd, task);
    if (!sk) return 0;
    __u64 key = (__u64)sk;
    bpf_map_delete_elem(&conns, &key);
    new_conn(key, sk, synthetic_conn_id(), fd,
             a.nr == NR_connect ? FC_ORIGIN_CONNECT : FC_ORIGIN_ACCEPT, pid_tgid);
    return 0;
  }

  if (ret <= 0) return 0;
  __u8 src = source_of(a.nr);
  __u8 direction = FC_DIR_RECV;
  switch (src) {
    case FC_SRC_WRITE:
    case FC_SRC_WRITEV:
    case FC_SRC_SENDTO:
    case FC_SRC_SENDMSG:
    case FC_SRC_SENDFILE:
    case FC_SRC_SENDMMSG:
      direction = FC_DIR_SEND;
      break;
    case FC_SRC_RECVFROM:
      if (a.args[3] & MSG_PEEK) return 0;
      break;
    case FC_SRC_RECVMSG:
      if (a.args[2] & MSG_PEEK) return 0;
      break;
    default:
      break;
  }
  __s32 fd = (__s32)a.args[0];
  struct sock* sk = sock_of_fd(fd, task);
  if (!sk) return 0; /* file I/O: never captured */
  __u64 key = (__u64)sk;
  struct conn_state* st = bpf_map_lookup_elem(&conns, &key);
  if (!st) {
    st = new_conn(key, sk, synthetic_conn_id(), fd, FC_ORIGIN_FIRST_DATA, pid_tgid);
    if (!st) return 0;
  } else if (st->ignored) {
    return 0;
  }
  __u32 len = (__u32)ret;
  if (src == FC_SRC_RECVMMSG || src == FC_SRC_SENDMMSG) len = mmsg_total(a.args[1], ret);
  if (len == 0) return 0;
  if (direction == FC_DIR_RECV && src != FC_SRC_RECVMMSG && fold_body_read(st, sk, len, 0))
    return 0;
  emit_data(st, 0, pid_tgid, src, a.args[1], a.args[2], len, direction, task);
  return 0;
}

/* Entry-exit pairs (Linux 5.8 to 5.14): the arguments on_sys_enter kept for this thread. */
static __always_inline int on_sys_exit(struct fc_syscall_exit* ctx) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  if (!is_target(pid_tgid >> 32)) return 0;
  __u32 tid = (__u32)pid_tgid;
  struct sc_args* ap = bpf_map_lookup_elem(&sc_inflight, &tid);
  if (!ap) return 0;
  struct sc_args a = *ap;
  bpf_map_delete_elem(&sc_inflight, &tid);
  return on_call_exit(&a, ctx->ret, pid_tgid, 0);
}

/* Exit programs alone (Linux >= 5.15, bpf_task_pt_regs): the arguments are still in the user
 * registers the kernel saved at the call's entry (x86-64: di, si, dx, r10; a syscall never
 * writes them, only ax), as the sock variant reads them. One program run per call instead of
 * two, and no hash update, lookup and delete per call to carry the arguments between them. */
static __always_inline int on_sys_exit_regs(struct fc_syscall_exit* ctx) {
  struct task_struct* task = bpf_get_current_task_btf();
  __u64 pid_tgid = pid_tgid_of(task);
  if (!is_target(pid_tgid >> 32)) return 0;
  struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(task);
  struct sc_args a = {.nr = ctx->nr, .args = {regs->di, regs->si, regs->dx, regs->r10}};
  return on_call_exit(&a, ctx->ret, pid_tgid, task);
}

/* One program per role, attached by userspace to every syscall tracepoint it serves: the record
 * layout is the same for all of them (the number comes from the record), so the verifier walks
 * each program once instead of once per syscall (14 times the walk, 5 s of CPU at start).
 *   sc_ret    exit programs alone (Linux >= 5.15): sys_exit_ of the data calls, accept,
 *             accept4 and connect;
 *   sc_enter  the entry-exit pairs' entry (sys_enter_ of the same calls), and close() in both;
 *   sc_exit   the pairs' exit. */
SEC("tracepoint")
int sc_enter(struct fc_syscall_enter* ctx) {
  return on_sys_enter(ctx);
}

SEC("tracepoint")
int sc_exit(struct fc_syscall_exit* ctx) {
  return on_sys_exit(ctx);
}

SEC("tracepoint")
int sc_ret(struct fc_syscall_exit* ctx) {
  return on_sys_exit_regs(ctx);
}

/* ---------------------------------------------------------------------------------------- */
/* Execs (every variant): the processes that ran a new program, for fetchcostd's search for the  */
/* brokers to watch. A launch script execs the broker under its own pid; reading every          */
/* process's command line each second instead took 36 ms a second on a node of 2,000 processes. */
/* Userspace takes the entries and deletes them; a full map refuses new pids, and userspace,    */
/* finding it full, reads every process instead. Sized by userspace (Options::execs_kept).      */

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);
  __type(value, __u8);
} execs SEC(".maps");

SEC("tp_btf/sched_process_exec")
int BPF_PROG(exec_seen, struct task_struct* p, int old_pid, struct linux_binprm* bprm) {
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  __u8 seen = 1;
  bpf_map_update_elem(&execs, &tgid, &seen, BPF_ANY);
  return 0;
}

/* ---------------------------------------------------------------------------------------- */
/* TLS uprobes (both variants). Attached per target process and library by userspace.        */

static __always_inline int tls_enter(__u64 obj, __u64 buf, __u64 len_ptr, __u8 direction, __u8 ex,
                                     __u8 int_ret, __u8 lib) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  if (!is_target(pid_tgid >> 32)) return 0; /* the bit: see on_sys_enter */
  __u32 tid = (__u32)pid_tgid;
  struct fc_tls_call call = {.obj = obj,
                             .buf = buf,
                             .len_ptr = len_ptr,
                             .direction = direction,
                             .ex = ex,
                             .int_ret = int_ret,
                             .lib = lib,
                             .tgid = pid_tgid >> 32};
  /* Replaces any entry: a call whose return was never seen (uprobes detached mid-call) must not
   * shadow this one; if one entry point ever calls another, the inner call reports and the
   * outer one finds no entry, so the bytes are reported once. Only a new entry is counted. */
  if (bpf_map_update_elem(&tls_calls, &tid, &call, BPF_NOEXIST) == 0)
    __sync_fetch_and_add(&tls_calls_open, 1);
  else
    bpf_map_update_elem(&tls_calls, &tid, &call, BPF_EXIST);
  return 0;
}

SEC("uprobe")
int BPF_KPROBE(tls_ossl_read, void* ssl, void* buf, int num) {
  return tls_enter((__u64)ssl, (__u64)buf, 0, FC_DIR_RECV, 0, 1, FC_TLS_OPENSSL);
}
SEC("uprobe")
int BPF_KPROBE(tls_ossl_write, void* ssl, void* buf, int num) {
  return tls_enter((__u64)ssl, (__u64)buf, 0, FC_DIR_SEND, 0, 1, FC_TLS_OPENSSL);
}
SEC("uprobe")
int BPF_KPROBE(tls_ossl_read_ex, void* ssl, void* buf, __u64 num, void* readbytes) {
  return tls_enter((__u64)ssl, (__u64)buf, (__u64)readbytes, FC_DIR_RECV, 1, 1, FC_TLS_OPENSSL);
}
SEC("uprobe")
int BPF_KPROBE(tls_ossl_write_ex, void* ssl, void* buf, __u64 num, void* written) {
  return tls_enter((__u64)ssl, (__u64)buf, (__u64)written, FC_DIR_SEND, 1, 1, FC_TLS_OPENSSL);
}
SEC("uprobe")
int BPF_KPROBE(tls_gnutls_recv, void* session, void* buf, __u64 size) {
  return tls_enter((__u64)session, (__u64)buf, 0, FC_DIR_RECV, 0, 0, FC_TLS_GNUTLS);
}
SEC("uprobe")
int BPF_KPROBE(tls_gnutls_send, void* session, void* buf, __u64 size) {
  return tls_enter((__u64)session, (__u64)buf, 0, FC_DIR_SEND, 0, 0, FC_TLS_GNUTLS);
}

SEC("uretprobe")
int BPF_KRETPROBE(tls_exit, long rc) {
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  struct fc_target* t = target_of(pid_tgid >> 32);
  if (!t) return 0;
  __u32 tid = (__u32)pid_tgid;
  struct fc_tls_call* cp = bpf_map_lookup_elem(&tls_calls, &tid);
  if (!cp) return 0;
  struct fc_tls_call call = *cp;
  if (bpf_map_delete_elem(&tls_calls, &tid) == 0) __sync_fetch_and_sub(&tls_calls_open, 1);

  __u64 n = 0;
  if (call.ex) {
    if ((int)rc != 1) return 0;
    if (bpf_probe_read_user(&n, sizeof(n), (const void*)call.len_ptr) != 0) return 0;
  } else {
    long r = call.int_ret ? (long)(int)rc : rc;
    if (r <= 0) return 0;
    n = (__u64)r;
  }
  if (n == 0 || n > 0xffffffffULL) return 0;

  struct tls_key tk = {.obj = call.obj, .tgid = pid_tgid >> 32};
  struct tls_state* ts = bpf_map_lookup_elem(&tls_sessions, &tk);
  if (!ts || (call.conn.conn_id && ts->conn.conn_id != call.conn.conn_id)) {
    struct tls_state fresh = {.conn = call.conn};
    if (ts && !ts->conn.conn_id) { /* bound late: keep the positions counted so far */
      fresh.pos[0] = ts->pos[0];
      fresh.pos[1] = ts->pos[1];
    }
    bpf_map_update_elem(&tls_sessions, &tk, &fresh, BPF_ANY);
    ts = bpf_map_lookup_elem(&tls_sessions, &tk);
    if (!ts) return 0;
  } else if (call.conn.conn_id) { /* the same connection: its fd may have been learned since */
    ts->conn = call.conn;
  }
  __u8 dir = call.direction & 1;
  __u64 pos = __sync_fetch_and_add(&ts->pos[dir], n);

  struct event_buf* ev = scratch_buf();
  if (!ev) return 0;
  fill_common(&ev->hdr.c, FC_EVENT_TLS_DATA, pid_tgid);
  ev->hdr.c.skipped_before = 0;
  ev->hdr.stream_pos = pos;
  ev->hdr.tls_obj = call.obj;
  ev->hdr.length = (__u32)n;
  ev->hdr.captured = 0;
  ev->hdr.direction = dir;
  ev->hdr.source = FC_SRC_TLS;
  ev->hdr.nsegs = 0;
  ev->hdr.tls_lib = call.lib;
  ev->hdr.hole_before = 0;
  struct fc_policy pol = t->default_policy;
  if (ts->conn.conn_id) {
    resolve_policy_of(ts->conn.conn_id, ts->conn.local_port, ts->conn.peer_port, &ts->policy,
                      &ts->policy_epoch, t);
    pol = ts->policy;
    ev->hdr.c.conn_id = ts->conn.conn_id;
    ev->hdr.c.generation = ts->conn.generation;
    ev->hdr.c.fd = ts->conn.fd;
    ev->hdr.c.flags = 0;
  } else {
    ev->hdr.c.conn_id = 0;
    ev->hdr.c.generation = 0;
    ev->hdr.c.fd = -1;
    ev->hdr.c.flags = FC_FLAG_TLS_UNBOUND;
  }
  ev->hdr.c.role = pol.role;
  /* An object store's response over TLS: as on plaintext (emit_data's bulk runs). */
  __u32 cap = pol.bytes_per_call;
  if (pol.role == FC_ROLE_OBJECT_STORE && pol.bulk_from) {
    if (dir == FC_DIR_RECV) cap = object_store_read_cap(cap, &pol, ts->recv_run);
    ts->recv_run = dir == FC_DIR_RECV;
  }
  if (pol.role != FC_ROLE_IGNORE) add_segment(ev, 0, min_u32((__u32)n, cap), call.buf);
  count(FC_COUNTER_TLS_EVENTS);
  __u64 size = sizeof(struct fc_data_event) + (__u64)ev->hdr.captured; /* up to FC_MAX_CAPTURE */
  if (size > sizeof(*ev)) return 0;
  submit(ev, size);
  return 0;
}
