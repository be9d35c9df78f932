// SPDX-License-Identifier: GPL-2.0
/* What the kernel charges per run of a program on the sock tracepoint, whatever the program does
 * (bench_dispatch_cost): a program that only counts the runs of one process. And the same on an
 * fentry of sock_sendmsg, which the bench only tries to load: a kernel that refuses it leaves the
 * tracepoints as the only socket hooks (no per-sendfile hook can replace the per-splice runs). */
#include <linux/types.h> /* first: bpf_helpers.h needs its __u32 and __u64 */

#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

__u32 target_tgid = 0;
__u64 runs = 0;

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

SEC("fentry/sock_sendmsg")
int fentry_count(__u64* ctx) {
  return count_target_run();
}
