// SPDX-License-Identifier: GPL-2.0
/* Socket capture: one event per socket send/receive of a target process.
 *
 * Hooks tp_btf/sock_send_length and tp_btf/sock_recv_length (kernel >= 6.3): they fire inside
 * every socket send/receive after the data moved, with the struct sock and the byte count, and
 * never for file I/O. The syscall's buffer comes from the task's saved registers. */
#include "fc_kernel_types.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "fetchcost_abi.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by userspace before load. */
const volatile __u32 cfg_self_tgid = 0; /* never trace fetchcostd itself */

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

/* tgid -> capture settings; a process absent here costs one hash lookup per socket call. */
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, struct fc_target);
} targets SEC(".maps");

/* Stream positions per (socket, direction). */
struct conn_state {
  __u64 pos[2];
  __u32 generation;
  __u32 pad;
};
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 65536);
  __type(key, __u64);
  __type(value, struct conn_state);
} conns SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, FC_COUNTER_MAX);
  __type(key, __u32);
  __type(value, __u64);
} counters SEC(".maps");

/* Scratch space to build one variable-length event without using the 512-byte stack. */
struct event_buf {
  struct fc_event hdr;
  __u8 data[FC_MAX_CAPTURE];
};
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct event_buf);
} scratch SEC(".maps");

static __always_inline void count(__u32 which) {
  __u64* c = bpf_map_lookup_elem(&counters, &which);
  if (c) *c += 1;
}

/* x86-64 syscall numbers of the calls whose buffer argument we can read directly. */
#define NR_read 0
#define NR_write 1
#define NR_sendto 44
#define NR_recvfrom 45
#define NR_sendmsg 46
#define NR_recvmsg 47
#define NR_readv 19
#define NR_writev 20
#define NR_sendfile 40

static __always_inline __u8 source_of(long nr) {
  switch (nr) {
    case NR_read: return FC_SRC_READ;
    case NR_write: return FC_SRC_WRITE;
    case NR_readv: return FC_SRC_READV;
    case NR_writev: return FC_SRC_WRITEV;
    case NR_sendto: return FC_SRC_SENDTO;
    case NR_recvfrom: return FC_SRC_RECVFROM;
    case NR_sendmsg: return FC_SRC_SENDMSG;
    case NR_recvmsg: return FC_SRC_RECVMSG;
    case NR_sendfile: return FC_SRC_SENDFILE;
    default: return FC_SRC_UNKNOWN;
  }
}

static __always_inline int on_socket_io(struct sock* sk, int ret, __u8 direction) {
  if (ret <= 0) return 0;
  __u64 pid_tgid = bpf_get_current_pid_tgid();
  __u32 tgid = pid_tgid >> 32;
  struct fc_target* target = bpf_map_lookup_elem(&targets, &tgid);
  if (!target || tgid == cfg_self_tgid) return 0;

  __u64 conn_id = (__u64)sk;
  struct conn_state* st = bpf_map_lookup_elem(&conns, &conn_id);
  if (!st) {
    struct conn_state fresh = {};
    bpf_map_update_elem(&conns, &conn_id, &fresh, BPF_NOEXIST);
    st = bpf_map_lookup_elem(&conns, &conn_id);
    if (!st) return 0;
  }
  __u64 pos = __sync_fetch_and_add(&st->pos[direction & 1], (__u64)ret);

  __u32 zero = 0;
  struct event_buf* ev = bpf_map_lookup_elem(&scratch, &zero);
  if (!ev) return 0;
  struct task_struct* task = bpf_get_current_task_btf();
  struct pt_regs* regs = (struct pt_regs*)bpf_task_pt_regs(task);
  long nr = BPF_CORE_READ(regs, orig_ax);

  ev->hdr.timestamp_ns = bpf_ktime_get_ns();
  ev->hdr.conn_id = conn_id;
  ev->hdr.stream_pos = pos;
  ev->hdr.tgid = tgid;
  ev->hdr.tid = (__u32)pid_tgid;
  ev->hdr.length = (__u32)ret;
  ev->hdr.generation = st->generation;
  ev->hdr.kind = FC_EVENT_DATA;
  ev->hdr.direction = direction;
  ev->hdr.source = source_of(nr);
  ev->hdr.fd = (__s32)BPF_CORE_READ(regs, di);
  bpf_get_current_comm(ev->hdr.comm, sizeof(ev->hdr.comm));

  __u32 want = 0;
  __u8 src = ev->hdr.source;
  if (src == FC_SRC_READ || src == FC_SRC_WRITE || src == FC_SRC_SENDTO || src == FC_SRC_RECVFROM) {
    want = (__u32)ret;
    if (want > target->capture_bytes) want = target->capture_bytes;
    if (want > FC_MAX_CAPTURE) want = FC_MAX_CAPTURE;
    const void* buf = (const void*)BPF_CORE_READ(regs, si);
    if (want && bpf_probe_read_user(ev->data, want & FC_CAPTURE_MASK, buf) != 0) {
      count(FC_COUNTER_COPY_FAULTS);
      want = 0;
    }
  }
  ev->hdr.captured = want;

  __u32 cpu = bpf_get_smp_processor_id();
  void* rb = bpf_map_lookup_elem(&ringbufs, &cpu);
  __u64 size = sizeof(struct fc_event) + (want & FC_CAPTURE_MASK);
  if (!rb || size > sizeof(*ev) || bpf_ringbuf_output(rb, ev, size, 0) != 0) {
    count(FC_COUNTER_DROPS);
    return 0;
  }
  count(FC_COUNTER_EVENTS);
  return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(sock_send_length, struct sock* sk, int ret, int flags) {
  return on_socket_io(sk, ret, FC_DIR_SEND);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(sock_recv_length, struct sock* sk, int ret, int flags) {
  return on_socket_io(sk, ret, FC_DIR_RECV);
}
