/* The few kernel types fetchcost's BPF programs read, declared for CO-RE.
 *
 * Only the fields used are declared; `preserve_access_index` makes every access a CO-RE
 * relocation, so the real offsets come from the running kernel's BTF at load time. This lets
 * the build work on a machine without /sys/kernel/btf/vmlinux (running still needs BTF).
 * Add a field here when a program needs it; never hard-code an offset. */
#ifndef FC_KERNEL_TYPES_H
#define FC_KERNEL_TYPES_H

#include <linux/types.h>
/* After linux/types.h, which it needs (kept apart so include sorting leaves the order). */
#include <linux/bpf.h>

#pragma clang attribute push(__attribute__((preserve_access_index)), apply_to = record)

#if defined(__TARGET_ARCH_x86)
struct pt_regs {
  unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
  unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
#elif defined(__TARGET_ARCH_arm64)
struct user_pt_regs {
  __u64 regs[31];
  __u64 sp;
  __u64 pc;
  __u64 pstate;
};
struct pt_regs {
  union {
    struct user_pt_regs user_regs;
    struct {
      __u64 regs[31];
      __u64 sp;
      __u64 pc;
      __u64 pstate;
    };
  };
  __u64 orig_x0;
  __s32 syscallno;
};
#endif

struct in6_addr {
  union {
    __u8 u6_addr8[16];
    __be32 u6_addr32[4];
  } in6_u;
};

struct sock_common {
  __be32 skc_daddr;
  __be32 skc_rcv_saddr;
  __be16 skc_dport;
  __u16 skc_num;
  unsigned short skc_family;
  volatile unsigned char skc_state;
  struct in6_addr skc_v6_daddr;
  struct in6_addr skc_v6_rcv_saddr;
};

struct sock {
  struct sock_common __sk_common;
  __u16 sk_type;
  __u16 sk_protocol;
};

/* What a read left in a TCP socket's receive queue: rcv_nxt - copied_seq; write_seq moves when a
 * request is written (body hints). */
struct tcp_sock {
  __u32 rcv_nxt;
  __u32 copied_seq;
  __u32 write_seq;
};

struct socket {
  struct sock* sk;
};

struct inode {
  unsigned short i_mode;
};

struct file {
  struct inode* f_inode;
  void* private_data;
};

struct fdtable {
  unsigned int max_fds;
  struct file** fd;
};

struct files_struct {
  struct fdtable* fdt;
};

struct task_struct {
  unsigned int flags;
  int pid;
  int tgid;
  char comm[16];
  struct task_struct* group_leader;
  struct files_struct* files;
};

struct trace_event_raw_sys_enter {
  long id;
  unsigned long args[6];
};

struct trace_event_raw_sys_exit {
  long id;
  long ret;
};

#pragma clang attribute pop

/* User-space ABI structs (stable layouts, read with bpf_probe_read_user, not CO-RE). */
struct fc_user_iovec {
  __u64 iov_base;
  __u64 iov_len;
};
struct fc_user_msghdr {
  __u64 msg_name;
  __s32 msg_namelen;
  __s32 pad0;
  __u64 msg_iov;
  __u64 msg_iovlen;
  __u64 msg_control;
  __u64 msg_controllen;
  __s32 msg_flags;
  __s32 pad1;
};
struct fc_user_mmsghdr {
  struct fc_user_msghdr msg_hdr;
  __u32 msg_len;
  __u32 pad;
};

#endif
