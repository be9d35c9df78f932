/* The one header for everything that crosses the BPF/userspace boundary: event layouts,
 * map key/value layouts and constants. Included by the bpf/ programs (C, -target bpf) and by
 * userspace/capture (C++). Sizes are pinned with static asserts on both sides so a change
 * that would silently misparse the ring buffer fails the build instead.
 *
 * Ring buffer records (one per CPU ring, drained together by userspace):
 *   FC_EVENT_DATA / FC_EVENT_TLS_DATA  struct fc_data_event, then `captured` payload bytes: the
 *        concatenation of segs[0..nsegs). Segment i covers call bytes
 *        [segs[i].offset, segs[i].offset + segs[i].length), i.e. stream bytes
 *        [stream_pos + offset, ...). Every other byte of [stream_pos, stream_pos + length) is a
 *        hole (not captured) — exact, never guessed. A DATA record that carries no payload
 *        (captured = 0, nsegs = 0: sendfile, ciphertext, zero caps) may end before `segs`
 *        (FC_DATA_EVENT_SHORT bytes): userspace reads the missing segments as zeros. Most of a
 *        broker's send events are such; 96 instead of 160 bytes of ring each. A one-range call
 *        (read, write, sendto, recvfrom, or a vectored call of one iovec) has at most one
 *        segment: its record sets
 *        FC_FLAG_ONE_SEGMENT and its payload follows segs[0] (FC_DATA_EVENT_ONE_SEGMENT bytes
 *        of header instead of 216: two cache lines less of ring per record).
 *        Folded sendfiles: on a Kafka client connection, a sendfile that ends inside a response
 *        has no record of its own; the connection's next send record covers it (hole_before),
 *        or an empty send record (length 0) that carries it if a receive or the close comes
 *        first. Userspace hands such a hole on as the sendfile record it stands for, so
 *        consumers see every call's bytes.
 *        Folded object-body reads (object-store connections without hooked TLS): a read of a
 * response's body that leaves bytes in the socket's receive queue has no record of its own; the
 * connection's next receive record covers it (hole_before), or an empty receive record (length 0,
 * the reads' source) if a send or the close comes first. The read that empties the queue keeps its
 * record. Userspace hands the hole on as one read of that source. On the sock variant, once two
 * body reads in a row were folded, a CPU's further reads of that socket are folded by its body
 * hint (map `body_hints`) without the connection's state: their bytes are taken from the socket's
 * copied_seq by the connection's next other event, so records are the same. Gathered sends (sock
 * variant only): on a Kafka client connection, the sends of a response (its header, partition
 * headers between sendfiles) are gathered into one record (FC_SRC_GATHERED) that covers them and
 * the sendfiles between them, up to the call that ends the response: its segments are the headers'
 * bytes, every other byte of its range is a sendfile's or an uncaptured body's. It comes when the
 * response ends, or earlier if its buffer is full, a send cannot be gathered, a receive comes or
 *        the connection closes; its timestamp is when it left, not when the response began.
 *        A gathered record of one call only (a response sent whole by its first send) has
 *        that call's source. A response's first send too large for the gather (more than
 *        512 bytes captured: many partitions' headers in one write) has a record of its own,
 *        and so does every send of a response that finds no free gather slot (a slot holds
 *        a response's sends while it is in flight; FC_COUNTER_GATHER_NO_SLOT).
 *        Quiet fetches (sock variant, Kafka client connections, cfg_skip_quiet_fetches): a
 *        Fetch request without a session (session id 0 and epoch -1, or a version before
 *        sessions), or an incremental one that lists no topic and forgets none (a session id,
 *        epoch > 0, empty topics and forgotten topics: its session stays as it was), of
 *        at most 4 KiB that arrives whole in one receive (or its 4-byte size prefix, then
 *        the rest, as a JVM broker reads it) is held in a request slot instead of a record
 *        (one over 512 bytes is copied into the slot only if its API key says Fetch). A
 *        send of a target on any connection that is not a Kafka client's (an object-store GET,
 *        whatever the store) first hands on the records of every request held, with the time
 *        each arrived. A request still held when the response with its correlation id starts
 *        had no such send in its window, so no remote read can belong to it: it and its whole
 *        response are left out, and the next record in each direction says how many bytes of
 *        whole messages were left out right before it (skipped_before). Anything else on the
 *        connection (another receive, a response to another request, the close) hands on the
 *        held request's record first. A connection whose held requests are reported by store
 *        sends FC_PAUSE_AFTER_REPORTS times in a row (a consumer reading from the remote tier)
 *        has its next FC_PAUSED_REQUESTS requests recorded as they arrive, a size prefix
 *        read alone in one record with its rest, all but every FC_PAUSE_PROBE_EVERY-th, which
 *        is held; a request left out starts the count again and ends a pause.
 *   FC_EVENT_CONNECT / FC_EVENT_CLOSE  struct fc_conn_event (no payload).
 * Both start with struct fc_event_common; dispatch on common.kind. */
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
/* Upper bound for the per-CPU ring buffer array; userspace sizes it to the possible CPUs. */
#define FC_MAX_CPUS 1024
/* Process ids stay below this (PID_MAX_LIMIT on 64-bit): the size of the target bitmap. */
#define FC_MAX_TGID (1U << 22)
/* Largest payload one event carries; also the mask that bounds copies for the verifier. */
#define FC_MAX_CAPTURE 16384
#define FC_CAPTURE_MASK (FC_MAX_CAPTURE - 1)
/* At most this many captured ranges per call: iovecs beyond it become holes. */
#define FC_MAX_SEGMENTS 16
/* Synthetic connection ids (syscall-tracepoint variant) have this bit set; socket cookies
 * (sock-tracepoint variant) never reach it. */
#define FC_CONN_ID_SYNTHETIC (1ULL << 63)
/* Quiet fetches: after this many of a connection's held requests in a row are reported by
 * store sends, its next FC_PAUSED_REQUESTS requests are recorded as they arrive, not held, but
 * for every FC_PAUSE_PROBE_EVERY-th: that one is held as before, and if it is left out (quiet)
 * the pause ends, so a local consumer paused by chance is held again within 16 requests. */
#define FC_PAUSE_AFTER_REPORTS 8
#define FC_PAUSED_REQUESTS 128
#define FC_PAUSE_PROBE_EVERY 16

enum fc_event_kind {
  FC_EVENT_DATA = 1,     /* bytes moved on a socket (segments + payload follow) */
  FC_EVENT_CONNECT = 2,  /* a connection seen for the first time (addresses filled in) */
  FC_EVENT_CLOSE = 3,    /* a connection closed (or was found dead) */
  FC_EVENT_TLS_DATA = 4, /* plaintext from a TLS library uprobe; stands in for the ciphertext */
};

enum fc_direction {
  FC_DIR_RECV = 0, /* into the target process (requests from clients, responses from stores) */
  FC_DIR_SEND = 1, /* out of the target process */
};

enum fc_source {
  FC_SRC_UNKNOWN = 0, /* a socket call through a path without usable registers: length only */
  FC_SRC_READ = 1,
  FC_SRC_READV = 2,
  FC_SRC_RECVFROM = 3,
  FC_SRC_RECVMSG = 4,
  FC_SRC_WRITE = 5,
  FC_SRC_WRITEV = 6,
  FC_SRC_SENDTO = 7,
  FC_SRC_SENDMSG = 8,
  FC_SRC_SENDFILE = 9,  /* length only: the payload comes from a file and is never copied */
  FC_SRC_IO_URING = 10, /* no syscall registers: length only */
  FC_SRC_TLS = 11,      /* FC_EVENT_TLS_DATA; tls_lib says which library */
  FC_SRC_RECVMMSG = 12, /* length only (one event per message) */
  FC_SRC_SENDMMSG = 13, /* length only (one event per message) */
  FC_SRC_SPLICE = 14,   /* length only */
  FC_SRC_GATHERED = 15, /* several sends of one Kafka response (see "Gathered sends" above) */
  FC_SRC_SKIPPED = 16,  /* never written by the BPF side: userspace's stand-in for a record's
                           skipped_before (whole messages left out, length only) */
};

/* Connection roles: userspace decides (by port or per connection) and sets the caps. */
enum fc_role {
  FC_ROLE_OTHER = 0,
  FC_ROLE_KAFKA_CLIENT = 1, /* a Kafka client's connection to the broker */
  FC_ROLE_OBJECT_STORE = 2, /* the broker's connection to S3/GCS/Azure */
  FC_ROLE_IGNORE = 3,       /* counted, never captured */
};

/* fc_event_common.flags */
enum fc_event_flags {
  FC_FLAG_TLS_CIPHERTEXT = 1 << 0, /* raw bytes of a connection whose TLS plaintext is seen:
                                      length only; consumers use the TLS_DATA events instead.
                                      Written only when userspace asks (cfg_record_ciphertext);
                                      otherwise such calls are counted, not recorded */
  FC_FLAG_TRUNCATED_SEGS = 1 << 1, /* more iovecs than FC_MAX_SEGMENTS: the rest are holes */
  FC_FLAG_COPY_FAULT = 1 << 2,     /* a user buffer could not be read: that range is a hole */
  FC_FLAG_TLS_UNBOUND = 1 << 3,    /* TLS_DATA whose socket is not known yet (conn_id = 0) */
  FC_FLAG_ONE_SEGMENT = 1 << 4,    /* a one-range call's record: the header ends after segs[0]
                                      (FC_DATA_EVENT_ONE_SEGMENT bytes), the payload follows */
};

/* fc_conn_event.origin: how the connection was found. */
enum fc_conn_origin {
  FC_ORIGIN_FIRST_DATA = 0, /* first send/receive seen (sock tracepoints, or an fd the fallback
                               did not see accepted/connected): stream positions start here */
  FC_ORIGIN_ACCEPT = 1,     /* accept/accept4 returned it (fallback): positions start at 0 */
  FC_ORIGIN_CONNECT = 2,    /* connect on it (fallback): positions start at 0 */
  FC_ORIGIN_PROC_SCAN = 3,  /* userspace found it in /proc at attach time (conn_id = 0) */
};

enum fc_tls_lib {
  FC_TLS_NONE = 0,
  FC_TLS_OPENSSL = 1, /* OpenSSL 1.1 / 3 and BoringSSL share the SSL_* entry points */
  FC_TLS_GNUTLS = 2,
};

struct fc_event_common {
  fc_u64 timestamp_ns; /* bpf_ktime_get_ns() (CLOCK_MONOTONIC) */
  fc_u64 conn_id;      /* socket cookie, or FC_CONN_ID_SYNTHETIC|n on the fallback; 0 = unknown */
  fc_u32 tgid;
  fc_u32 tid;
  fc_u32 generation; /* 1 for the first connection seen on (tgid, fd); +1 on each reuse */
  fc_s32 fd;         /* -1 when unknown (io_uring, kernel context, TLS before binding) */
  fc_u16 kind;       /* enum fc_event_kind */
  fc_u8 role;        /* enum fc_role in effect */
  fc_u8 flags;       /* enum fc_event_flags */
  /* DATA records: bytes of whole Kafka messages left out right before this record's range (and
   * before its hole_before): quiet fetches, see "Quiet fetches" above. 0 elsewhere. */
  fc_u32 skipped_before;
  char comm[FC_COMM_LEN]; /* thread name */
};
FC_STATIC_ASSERT(sizeof(struct fc_event_common) == 56, "fc_event_common layout changed");

struct fc_segment {
  fc_u32 offset; /* from the first byte of the call */
  fc_u32 length; /* captured bytes of this range (payload holds them in order) */
};

struct fc_data_event {
  struct fc_event_common c;
  fc_u64 stream_pos;  /* offset of the call's first byte in its direction's stream; TLS events
                         count the plaintext stream of their TLS session separately */
  fc_u64 tls_obj;     /* SSL* / gnutls_session_t for TLS_DATA, else 0 */
  fc_u32 length;      /* bytes the call moved */
  fc_u32 captured;    /* payload bytes that follow this struct (sum of segment lengths) */
  fc_u8 direction;    /* enum fc_direction */
  fc_u8 source;       /* enum fc_source */
  fc_u8 nsegs;        /* valid entries in segs */
  fc_u8 tls_lib;      /* enum fc_tls_lib for TLS_DATA */
  fc_u32 hole_before; /* bytes of calls folded in right before this call, stream
                         [stream_pos - hole_before, stream_pos), length only: sendfiles (send
                         records of Kafka client connections) or object-body reads (receive
                         records of object-store connections); see "Folded" above */
  struct fc_segment segs[FC_MAX_SEGMENTS];
};
FC_STATIC_ASSERT(sizeof(struct fc_data_event) == 216, "fc_data_event layout changed");
#define FC_DATA_EVENT_SHORT 88       /* offsetof(struct fc_data_event, segs) */
#define FC_DATA_EVENT_ONE_SEGMENT 96 /* offsetof(struct fc_data_event, segs[1]) */
FC_STATIC_ASSERT(__builtin_offsetof(struct fc_data_event, segs) == FC_DATA_EVENT_SHORT,
                 "fc_data_event layout changed");
FC_STATIC_ASSERT(__builtin_offsetof(struct fc_data_event, segs) + sizeof(struct fc_segment) ==
                     FC_DATA_EVENT_ONE_SEGMENT,
                 "fc_data_event layout changed");

struct fc_conn_event {
  struct fc_event_common c;
  fc_u64 bytes[2]; /* CLOSE: bytes seen per direction (index enum fc_direction) */
  fc_u16 family;   /* AF_INET / AF_INET6 */
  fc_u16 local_port;
  fc_u16 peer_port;
  fc_u8 origin; /* enum fc_conn_origin */
  fc_u8 reserved;
  fc_u8 local_addr[16]; /* IPv4 in the first 4 bytes, network order */
  fc_u8 peer_addr[16];
  fc_u64 inode; /* socket inode (FC_ORIGIN_PROC_SCAN only) */
};
FC_STATIC_ASSERT(sizeof(struct fc_conn_event) == 120, "fc_conn_event layout changed");

/* How much to copy for one connection. Bulk runs: a socket call that moves at least
 * `bulk_from` bytes (0 = never) is bulk; a call that follows a bulk call in the same direction,
 * with nothing moved the other way in between, is inside a message body (records, an object)
 * and copies at most `bulk_bytes` (of the call, or of each iovec of a vectored call). The first
 * call of a run, where a message header sits, keeps the normal caps. In a vectored send, an
 * iovec of at least `bulk_from` bytes is a body as well and gives at most `bulk_bytes`, and
 * (bulk_from != 0) each iovec after the first copies at most an equal share of the call cap
 * the first one left, so headers between bodies below `bulk_from` still fit. */
struct fc_policy {
  fc_u32 bytes_per_call;  /* total captured bytes per call, <= FC_MAX_CAPTURE */
  fc_u32 bytes_per_iovec; /* captured bytes per iovec (readv/writev/sendmsg/recvmsg) */
  fc_u32 bulk_from;
  fc_u32 bulk_bytes;
  fc_u8 role; /* enum fc_role */
  fc_u8 pad;
  /* FC_ROLE_OBJECT_STORE: a response's first read (its HTTP header, then object body) copies
   * at most this many bytes (0 = the call cap), and its later reads, object body, copy none
   * (length only): an HTTP header is 0.3-1 KiB, and the body's bytes are never decoded. */
  fc_u16 head_bytes;
};
FC_STATIC_ASSERT(sizeof(struct fc_policy) == 20, "fc_policy layout changed");

/* What userspace tells the kernel about one target process (map `targets`, key tgid). */
struct fc_target {
  struct fc_policy default_policy; /* for connections no port/connection rule matches */
  fc_u32 flags;
};
FC_STATIC_ASSERT(sizeof(struct fc_target) == 24, "fc_target layout changed");

/* Map `port_policy`: a rule for every connection with this local or peer port. Local rules
 * win over peer rules; per-connection rules (map `conn_policy`, key conn_id) win over both. */
struct fc_port_key {
  fc_u16 port; /* host order */
  fc_u8 side;  /* 0 = local port (e.g. the broker's listener), 1 = peer port (e.g. 443) */
  fc_u8 pad;
};
FC_STATIC_ASSERT(sizeof(struct fc_port_key) == 4, "fc_port_key layout changed");

/* Map `tls_calls` value (key: tid): a TLS library call between its uprobe and its uretprobe.
 * Userspace only reads it, to forget the calls of a target it stops watching. */
/* A connection's identity as its records carry it, and the ports its policy is chosen by. */
struct fc_conn_ident {
  fc_u64 conn_id; /* 0: no connection */
  fc_u32 generation;
  fc_s32 fd;
  fc_u16 local_port;
  fc_u16 peer_port;
  fc_u32 pad;
};
FC_STATIC_ASSERT(sizeof(struct fc_conn_ident) == 24, "fc_conn_ident layout changed");

struct fc_tls_call {
  fc_u64 obj; /* SSL* / gnutls_session_t */
  fc_u64 buf;
  fc_u64 len_ptr; /* size_t* of SSL_read_ex/SSL_write_ex */
  /* The connection the library touched during this call (conn_id 0: none yet). A copy of its
   * identity, so the return probe needs no map of connections: on the sock-tracepoint variant
   * the connection's state is socket-local storage, out of a uprobe's reach. */
  struct fc_conn_ident conn;
  fc_u8 direction;
  fc_u8 ex;
  fc_u8 int_ret;
  fc_u8 lib;
  fc_u32 tgid;
};
FC_STATIC_ASSERT(sizeof(struct fc_tls_call) == 56, "fc_tls_call layout changed");

/* Map `body_hints` (per CPU, one entry; sock variant): the object-store socket whose response
 * body this CPU's reads fold. A read of that socket that leaves more than one byte queued, with
 * no byte sent on it since (write_seq) and no policy changed (policy_epoch), is folded without a
 * look at the connection's state (socket-local storage, about a sixth of the programs' time per
 * such read): the connection's next other event takes its bytes from the socket's copied_seq. */
struct fc_body_hint {
  fc_u64 sk;           /* the socket's address; 0: none */
  fc_u64 policy_epoch; /* the programs' policy_epoch when it was set */
  fc_u32 write_seq;    /* the socket's tcp_sock.write_seq when it was set */
  fc_u32 pad;
  fc_u64 reads; /* reads folded by the hint alone (part of Counters::folded) */
};
FC_STATIC_ASSERT(sizeof(struct fc_body_hint) == 32, "fc_body_hint layout changed");

/* Per-CPU self counters, indexed by enum fc_counter in a per-CPU array. */
enum fc_counter {
  FC_COUNTER_EVENTS = 0, /* records written into a ring buffer */
  FC_COUNTER_DROPS = 1,  /* ring buffer full: the record is lost, its bytes become a hole */
  FC_COUNTER_COPY_FAULTS = 2,
  FC_COUNTER_TLS_EVENTS = 3,
  FC_COUNTER_CONN_EVENTS = 4,
  FC_COUNTER_FOLDED = 5,   /* calls folded into a later record (no record of their own) */
  FC_COUNTER_GATHERED = 6, /* sends gathered into a later record (no record of their own) */
  FC_COUNTER_CIPHERTEXT_SKIPPED = 7, /* socket calls of a connection whose TLS plaintext is seen
                                        (TLS_DATA): no record, unless cfg_record_ciphertext */
  FC_COUNTER_GATHER_NO_SLOT = 8,     /* a response not gathered: both of its gather slots were busy
                                        (its sends keep a record each) */
  FC_COUNTER_WAKEUPS = 9,            /* the reader woken: a ring's unread data reached the mark */
  FC_COUNTER_QUIET_FETCHES = 10, /* fetches left out whole: no object-store call in their window */
  FC_COUNTER_HOLD_PAUSES = 11,   /* a connection's held requests reported FC_PAUSE_AFTER_REPORTS
                                    times in a row: its next FC_PAUSED_REQUESTS not held */
  FC_COUNTER_MAX = 12,
};

#endif
