// SPDX-License-Identifier: GPL-2.0
/* What the kernel charges per run of a program on the sock tracepoint, whatever the program does
 * (bench_dispatch_cost): a program that only counts the runs of one process. And the same on an
 * fentry of sock_sendmsg, which the bench only tries to load: a kernel that refuses it leaves the
 * tracepoints as the only socket hooks (no per-sendfile hook can replace the per-splice runs). */
#include <linux/types.h> /* first: bpf_helpers.h needs its __u32 and __u64 */

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <linux/bpf.h> /* socket-local storage's map type and flags */

char LICENSE[] SEC("license") = "GPL";

__u32 target_tgid = 0;
__u64 runs = 0;
__u64 closed_with_state = 0;

static __always_inline int count_target_run(void) {
  if ((__u32)(bpf_get_current_pid_tgid() >> 32) == target_tgid) runs++;
  return 0;
}

SEC("tp_btf/sock_send_length")
int send_count(__u64* ctx) {
  return count_target_run();
}

/* The other two sock tracepoints fetchcostd attaches to (bench_broker --hooks-floor holds all
 * three): a receive runs the receive program, a TCP state change the close program. */
SEC("tp_btf/sock_recv_length")
int recv_count(__u64* ctx) {
  return count_target_run();
}

SEC("tp_btf/inet_sock_set_state")
int state_count(__u64* ctx) {
  return count_target_run();
}

/* --hold --state: the least any observer that follows connections does on these hooks, for the
 * target's calls: find the socket's state (socket-local storage, made at the socket's first call,
 * dropped at its close) and add the call's length to it. What fetchcostd's programs do beyond
 * this (the call's registers, the framing, a request held or copied, the records) is B against
 * this round in bench_broker --hooks-state. */
struct conn_bytes {
  __u64 bytes[2]; /* sent, received */
};

struct {
  __uint(type, BPF_MAP_TYPE_SK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct conn_bytes);
} conn_bytes_of SEC(".maps");

struct sock;

static __always_inline int add_target_bytes(struct sock* sk, int ret, int dir) {
  if ((__u32)(bpf_get_current_pid_tgid() >> 32) != target_tgid || ret <= 0) return 0;
  struct conn_bytes* c = bpf_sk_storage_get(&conn_bytes_of, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
  if (c) c->bytes[dir] += (__u64)ret;
  return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(send_state, struct sock* sk, int ret, int flags) {
  return add_target_bytes(sk, ret, 0);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(recv_state, struct sock* sk, int ret, int flags) {
  return add_target_bytes(sk, ret, 1);
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(close_state, struct sock* sk, int oldstate, int newstate) {
  if (newstate == 7 /* TCP_CLOSE */ && bpf_sk_storage_delete(&conn_bytes_of, sk) == 0)
    closed_with_state++; /* once per connection: shows the lookups found and made state */
  return 0;
}

SEC("fentry/sock_sendmsg")
int fentry_count(__u64* ctx) {
  return count_target_run();
}
