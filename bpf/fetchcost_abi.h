/* The one header for everything that crosses the BPF/userspace boundary: event layouts,
 * map value layouts and constants. Included by the bpf/ programs (C, -target bpf) and by
 * userspace/capture (C++). Sizes are pinned with static asserts on both sides so a change
 * that would silently misparse the ring buffer fails the build instead. */
#ifndef FETCHCOST_ABI_H
#define FETCHCOST_ABI_H

#ifdef __cplusplus
#include <cstdint>
typedef std::uint8_t fc_u8;
typedef std::uint16_t fc_u16;
typedef std::uint32_t fc_u32;
typedef std::uint64_t fc_u64;
typedef std::int32_t fc_s32;
#define FC_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
typedef __u8 fc_u8;
typedef __u16 fc_u16;
typedef __u32 fc_u32;
typedef __u64 fc_u64;
typedef __s32 fc_s32;
#define FC_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#define FC_COMM_LEN 16
/* Upper bound for the per-CPU ring buffer array; userspace sizes it to the online CPUs. */
#define FC_MAX_CPUS 1024
/* Largest payload one event carries; also the mask that bounds copies for the verifier. */
#define FC_MAX_CAPTURE 16384
#define FC_CAPTURE_MASK (FC_MAX_CAPTURE - 1)

enum fc_event_kind {
  FC_EVENT_DATA = 1,      /* bytes moved on a socket (payload prefix follows the header) */
  FC_EVENT_CONNECT = 2,   /* a connection seen for the first time (addresses filled in) */
  FC_EVENT_CLOSE = 3,     /* a connection closed */
  FC_EVENT_TLS_DATA = 4,  /* plaintext from a TLS library uprobe */
};

enum fc_direction {
  FC_DIR_RECV = 0, /* into the target process (requests from clients, responses from stores) */
  FC_DIR_SEND = 1, /* out of the target process */
};

enum fc_source {
  FC_SRC_UNKNOWN = 0,
  FC_SRC_READ = 1,
  FC_SRC_READV = 2,
  FC_SRC_RECVFROM = 3,
  FC_SRC_RECVMSG = 4,
  FC_SRC_WRITE = 5,
  FC_SRC_WRITEV = 6,
  FC_SRC_SENDTO = 7,
  FC_SRC_SENDMSG = 8,
  FC_SRC_SENDFILE = 9, /* length only: the payload comes from a file and is never copied */
  FC_SRC_IO_URING = 10, /* no syscall registers: length only */
  FC_SRC_TLS = 11,
};

/* Every ring buffer record starts with this header; `captured` payload bytes follow it.
 * `length - captured` bytes at stream position `stream_pos + captured` are a hole. */
struct fc_event {
  fc_u64 timestamp_ns; /* bpf_ktime_get_ns() */
  fc_u64 conn_id;      /* kernel socket identity (struct sock address) */
  fc_u64 stream_pos;   /* offset of the first byte of this call in its direction's stream */
  fc_u32 tgid;
  fc_u32 tid;
  fc_u32 length;   /* bytes the call moved */
  fc_u32 captured; /* payload bytes that follow this header */
  fc_u32 generation; /* bumps when a socket address is reused for a new connection */
  fc_s32 fd;         /* -1 when unknown (io_uring, kernel context) */
  fc_u16 kind;       /* enum fc_event_kind */
  fc_u8 direction;   /* enum fc_direction */
  fc_u8 source;      /* enum fc_source */
  fc_u16 family;     /* AF_INET / AF_INET6 (FC_EVENT_CONNECT) */
  fc_u16 local_port;
  fc_u16 peer_port;
  fc_u16 reserved;
  fc_u8 local_addr[16]; /* IPv4 in the first 4 bytes, network order */
  fc_u8 peer_addr[16];
  char comm[FC_COMM_LEN];
};
FC_STATIC_ASSERT(sizeof(struct fc_event) == 112, "fc_event layout changed: update both sides");

/* What userspace tells the kernel about one target process. */
struct fc_target {
  fc_u32 capture_bytes; /* bytes to copy from each call (and each iovec), <= FC_MAX_CAPTURE */
  fc_u32 flags;
};
FC_STATIC_ASSERT(sizeof(struct fc_target) == 8, "fc_target layout changed");

/* Per-CPU self counters, indexed by enum fc_counter in a per-CPU array. */
enum fc_counter {
  FC_COUNTER_EVENTS = 0,
  FC_COUNTER_DROPS = 1, /* ring buffer full: the event is lost, its bytes become a hole */
  FC_COUNTER_COPY_FAULTS = 2,
  FC_COUNTER_MAX = 8,
};

#endif
