// attribution: joins the broker's object-store reads to the client fetches that caused them.
//
// Fed with decoded Kafka fetches (kafka::Exchange: on_request when a request is decoded,
// on_exchange when its response is seen or it expires) and with object reads (one per GET, exact
// when the object key names topic/partition/segment, estimated when the connection is opaque),
// it emits one Attributed record per object read — to a client, or to "__unattributed__" — and
// one FetchDone per fetch that had remote reads (bytes delivered, remote latency).
//
// Rules (../shared/DESIGN.md): a GET is matched to a pending fetch for its partition (request
// arrived before the GET started, response not yet sent when the GET started, fetch offset in
// that segment or later). Answered fetches are kept Options::answered_retain_ns for reads known
// only later (a failed GET seen at its connection's close, opaque cycles), matched by those times.
// A remote reader thread serves one fetch at a time, so once a thread is tied to a fetch its
// following GETs for that partition go to the same fetch until the response is sent (or, when
// the fetch was answered without its remote data because remote.fetch.max.wait.ms passed, until
// the thread's task ends). A failed GET ends its task, and the broker answers that partition
// with KAFKA_STORAGE_ERROR: failed GETs are held like estimated reads and matched as a whole to
// those answers (each had one failed GET inside its fetch's window), then to fetches answered
// without their remote data, before the ranking below. Among
// several candidates: fetches no other thread is reading first, then oldest first (the remote
// reader pool is a FIFO queue). An exact GET is matched when its request is written
// (on_object_request), in the order GETs start, and keeps that match when it completes while
// its fetch is still open to it: matched as they complete, a fast GET took the fetch a slower one
// started for first. A fetch answered with remote data meanwhile is open to it only if no GET was
// counted for it and another fetch waits with a GET counted and none running: the handlers
// queued the two in the other order than they arrived, and each keeps one GET. An exact GET no
// fetch can take goes to the oldest fetch of its partition answered with remote data while it ran
// with no GET counted or running (their GETs crossed); without one, while a fetch of its segment
// with a GET counted and its task ended still waits for its answer, to the oldest fetch of the
// segment answered with remote data with none counted or running (three or more crossed: the
// GET counted for the waiting one was the answered one's data); else it is unattributed. A read is
// only ever matched to fetches the same broker process received (when both processes are known: a
// restarted broker, or two brokers on one host with the same topics, must not take each other's
// reads). A partition is remote-eligible when its fetch offset is below the local log start
// (LocalTier) or when an exact GET proves it. A fetch reads the segment its offset is in, or a
// later one: once a GET has named a later segment of the partition than the read's, a fetch at or
// past that segment's base takes none of its GETs. Where no LocalTier knows the partition, every
// fetch of it is a candidate, consumers waiting at its end too: among candidates ranked alike, the
// fetch offset nearest the GET's segment base offset goes first, then the oldest.
//
// Estimated reads (opaque connections: no key, no status) are held until settled, then decided in
// start order against the fetches whose window holds them (request arrived ≤ read start, read end ≤
// response sent) and whose response carried remote data for an eligible partition (or a storage
// error): the reader thread's current fetch first (unless that fetch's client left and a fetch
// answered with remote data after the read has none yet), then the oldest fetch no read went to
// yet. The
// read goes to the partition the broker read remotely (the eligible one the response filled;
// Kafka ≤ 4.1 reads one per fetch).
//
// Opaque client connections (TLS whose plaintext is not seen: the client-id and the fetches
// cannot be read) report request cycles (on_opaque_open / on_opaque_cycle, from
// opaque::CycleRecognizer). Once opaque connections exist, a read no readable fetch takes
// (readable fetches always come first) is held until the cycles around it were answered, then
// goes to the opaque connection whose cycle was open across it (request ≤ read start, answer ≥
// read end) and whose answer carried at least Options::opaque_min_fit of the task's bytes: the
// reader thread's current task first, then the connection that read that partition last (a
// consumer reads a partition in order), then a cycle no read went to yet (one remote read per
// fetch), then an answer alike in size (within 2x) to the fetch that came first (the broker's
// reader pool is FIFO; sizes are estimates), then the closest in size. Reads the first two claim
// are decided first, so their bytes fill their answers before a read of a partition no one has
// read yet weighs the room left; such a read waits for the reads that started before its cycles
// were answered. It is exported as client_id "peer:<ip>", method estimated; no such cycle:
// unattributed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kafka/kafka.h"

namespace fc::attribution {

inline constexpr std::string_view kUnattributed = "__unattributed__";

enum class Method : std::uint8_t { kExact, kEstimated };

// The broker's local log start offsets (from its log dirs).
class LocalTier {
 public:
  virtual ~LocalTier() = default;
  // nullopt: unknown partition (no log dir seen for it).
  virtual std::optional<std::int64_t> local_log_start(std::string_view topic,
                                                      std::int32_t partition) const = 0;
  // The name of a topic id (partition.metadata), for fetches that name topics by id (v13+)
  // when the Metadata response that maps them was not seen.
  virtual std::optional<std::string> topic_name(std::string_view /*topic_id_base64*/) const {
    return std::nullopt;
  }
};

// One GET (or one estimated request/response cycle) on an object-store connection.
struct ObjectRead {
  std::uint64_t connection = 0;
  std::uint32_t process = 0;     // the broker process (tgid) that made the GET; 0: unknown
  std::uint32_t thread_id = 0;   // the broker thread that wrote the request
  std::uint64_t start_ns = 0;    // request written
  std::uint64_t end_ns = 0;      // response complete
  int status = 0;                // HTTP status; 0 = connection failed or unknown
  std::uint64_t body_bytes = 0;  // response body bytes received
  Method method = Method::kExact;
  // Parsed from the object key (exact reads only); topic empty when the key did not parse.
  std::string_view object_key;
  std::string_view topic;
  std::string_view topic_id;
  std::int32_t partition = -1;
  std::int64_t segment_base_offset = -1;
  std::int64_t range_first = -1;  // the byte range asked for (Range header), -1 when none
  std::int64_t range_last = -1;

  bool succeeded() const { return status >= 200 && status < 300; }
};

struct Attributed {
  std::string_view client_id;  // or kUnattributed
  std::string_view peer;       // the client connection's peer address, when known
  std::string_view topic;      // may be empty for an unattributed opaque read
  std::int32_t partition = -1;
  std::int64_t fetch_offset = -1;
  std::int32_t partition_max_bytes = -1;
  Method method = Method::kExact;
  const ObjectRead* read = nullptr;
  std::uint64_t body_bytes = 0;  // 0 for failed reads: they count as requests and errors only
  bool error = false;
};

struct FetchDone {
  std::string_view client_id;
  std::string_view peer;
  std::string_view topic;
  std::int32_t partition = -1;
  Method method = Method::kExact;
  std::uint64_t object_reads = 0;
  std::uint64_t object_bytes = 0;     // body bytes of the reads attributed to this fetch
  std::uint64_t bytes_delivered = 0;  // records bytes the response carried for the partition
  double remote_latency_seconds = 0;  // first read start → last read end
  bool response_seen = false;
};

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void on_attributed(const Attributed& record) = 0;
  virtual void on_fetch_done(const FetchDone&) {}
};

struct Counters {
  std::uint64_t fetches_tracked = 0;  // consumer fetches with a possibly-remote partition
  std::uint64_t reads_exact = 0;
  std::uint64_t reads_estimated = 0;
  std::uint64_t reads_unattributed = 0;
  std::uint64_t reads_opaque_peer = 0;  // reads matched to an opaque client connection's cycle
  // Pending fetches finished early by the max_pending or max_pending_partitions bound (their
  // later reads may go unattributed).
  std::uint64_t pending_evicted = 0;
};

struct Options {
  std::size_t max_pending = 100'000;  // pending fetches kept across all connections
  // Their possibly-remote partitions, all fetches together: where no LocalTier knows the
  // partitions, every partition of every fetch is one, for as long as the fetch is kept.
  std::size_t max_pending_partitions = 250'000;
  // When no LocalTier knows a partition, treat it as possibly remote (an exact GET can prove it).
  bool unknown_partitions_possibly_remote = true;
  std::uint64_t closed_grace_ns = 30'000'000'000ull;
  std::uint64_t max_pending_ns = 300'000'000'000ull;
  // Estimated and failed reads are decided this long after they ended: by then the responses of
  // the fetches around them are known (which fetches really read remotely, and when they answered).
  std::uint64_t estimate_settle_ns = 300'000'000ull;
  // An answered fetch stays matchable this long by reads that started before its answer (estimated
  // ones must also have ended before it): an opaque cycle is only known complete when its
  // connection is reused or goes quiet, and a failed GET when its client gives up on it — both
  // typically after the fetch answered. 0: answered fetches finish at once.
  std::uint64_t answered_retain_ns = 2'000'000'000ull;
  // Kafka 3.6–4.1 read at most one partition of a fetch remotely: the first one (in request
  // order) below its local log start. Kafka 4.2 reads all of them (set false).
  bool one_remote_partition_per_fetch = true;
  // Opaque client connections: a read waits for the cycles open across it to be answered at most
  // this long (a long poll answered later carried no data for it); the answered cycles are kept
  // this long for the reads that settle after them.
  std::uint64_t opaque_hold_ns = 3'000'000'000ull;
  std::uint64_t opaque_retain_ns = 10'000'000'000ull;
  // An answer smaller than this share of the task's GET bytes did not carry them (a long poll's
  // answer with a few local records); chunk reads a fetch uses a part of stay well above it.
  double opaque_min_fit = 0.2;
};

// One request/response cycle of an opaque client connection.
struct OpaqueCycle {
  std::uint64_t connection = 0;
  std::uint64_t request_ns = 0;
  std::uint64_t response_start_ns = 0;  // 0: never answered (the client left)
  std::uint64_t response_end_ns = 0;
  std::uint64_t response_bytes = 0;  // estimated plaintext of the answer
};

class Attributor {
 public:
  Attributor(Sink& sink, const LocalTier* tier, Options options = {});
  ~Attributor();
  Attributor(const Attributor&) = delete;
  Attributor& operator=(const Attributor&) = delete;

  // The peer address of a client connection (used when the client-id cannot be read).
  void set_peer(std::uint64_t connection, std::string_view peer);
  // The broker process (tgid) a client connection belongs to (0 or never set: unknown).
  void set_process(std::uint64_t connection, std::uint32_t process);
  void on_request(const kafka::Exchange& request);
  void on_exchange(const kafka::Exchange& exchange);
  // An exact GET's request was written (status 0, no end yet): matched to its fetch now, in the
  // order the broker's reader threads start their GETs; its on_object_read() keeps that match
  // while the fetch is still open to it.
  void on_object_request(const ObjectRead& read);
  // Successful exact reads are attributed at once; failed and estimated ones once settled
  // (Options::estimate_settle_ns, or expire()). The read's views need not outlive the call.
  void on_object_read(const ObjectRead& read);
  // Opaque client connections: a cycle opened (its answer is still to come), a cycle completed,
  // and a connection found readable after all (its plaintext arrives: its cycles are dropped).
  void on_opaque_open(std::uint64_t connection, std::string_view peer, std::uint64_t request_ns,
                      std::uint32_t process = 0);
  void on_opaque_cycle(const OpaqueCycle& cycle);
  void forget_opaque(std::uint64_t connection);
  // Opaque object-store connections exist (kept for callers: answered fetches are kept anyway).
  void expect_estimates();
  // The client went away. Its pending fetches stay matchable for Options::closed_grace_ns: the
  // broker finishes a remote read it started even when nobody will receive the answer.
  void close_connection(std::uint64_t connection, std::uint64_t now_ns);
  // Settles estimated reads, then finishes fetches whose client closed more than closed_grace_ns
  // ago, answered fetches kept longer than answered_retain_ns, and fetches pending longer than
  // max_pending_ns (their response was lost). expire(~0ull) settles everything.
  void expire(std::uint64_t now_ns);

  const Counters& counters() const;
  std::size_t pending() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fc::attribution
