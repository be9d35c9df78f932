// pipeline: the data path inside fetchcostd, from socket pieces to priced sensors.
//
//   pieces of each connection ─► role (Kafka client / opaque Kafka client / object store HTTP /
//                                       opaque TLS object store / other)
//     Kafka client ─► kafka::Decoder ─► attribution (fetches, groups)
//     opaque Kafka client (TLS records on a Kafka port, plaintext never seen)
//                  ─► opaque::CycleRecognizer ─► attribution (request cycles, identity peer:<ip>)
//     object store ─► objstore::HttpConnection | TlsCycleEstimator ─► attribution (reads)
//   attribution ─► cost::CostMeter ─► sensors::SensorTable, export::Ledger, export::AuditLog
//
// The pipeline is fed the same way by the live capture (fetchcostd) and by a pcap
// (`fetchcost replay`), so both are tested by the same code. Not thread-safe: one feeding thread;
// the sensor table and ledger it writes are themselves safe to read from the HTTP thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "attribution/attribution.h"
#include "cost/cost.h"
#include "export/export.h"
#include "objstore/objstore.h"
#include "pipeline/endpoints.h"
#include "sensors/sensors.h"

namespace fc::pipeline {

struct PipelineConfig {
  std::vector<std::uint16_t> kafka_ports;         // broker listener ports (local side)
  std::vector<std::uint16_t> object_store_ports;  // object-store endpoint ports (peer side)
  std::vector<Cidr> object_store_cidrs;           // object-store endpoint addresses
  // Object-store host names matched against the TLS server name the broker asks for: exact, or a
  // suffix starting with '.' (".amazonaws.com").
  std::vector<std::string> object_store_hosts;
  std::string key_layout = "aiven";  // "aiven" or "regex:<pattern>"
  std::vector<std::string> virtual_host_suffixes;
  // On opaque object-store connections only cycles written by threads whose name starts with one
  // of these count as reads: uploads (PUT of segments, indexes, manifests) run on other threads
  // and look like GETs from the outside. Kernel thread names are cut at 15 bytes. Empty: all.
  std::vector<std::string> opaque_reader_threads = {"remote-log-read", "ForkJoinPool"};
  // Times are unix nanoseconds (a pcap) rather than CLOCK_MONOTONIC (the live capture).
  bool unix_timestamps = false;
};

// A connection id with this bit set is the TLS plaintext stream of the connection without it
// (capture_feed.h): its plaintext shows the connection is readable, not opaque.
inline constexpr std::uint64_t kTlsStreamBit = 1ull << 62;

enum class Role : std::uint8_t {
  kUnknown,
  kKafka,
  kKafkaOpaque,  // a Kafka client's TLS connection whose plaintext is not seen
  kObjectStoreHttp,
  kObjectStoreOpaque,
  kOther
};
const char* role_name(Role role);

// One contiguous captured range of a call, in stream coordinates.
struct Segment {
  std::uint64_t position;
  std::span<const std::uint8_t> bytes;
};

// One socket call (or one TLS library call) as the capture layer saw it.
struct Piece {
  std::uint64_t connection = 0;
  std::uint32_t process = 0;  // the process (tgid) that made the call; 0: unknown (a pcap)
  bool to_target = true;  // received by the broker (requests from clients, responses from stores)
  std::uint64_t time_ns = 0;
  std::uint32_t thread_id = 0;
  std::string_view thread_name;
  std::uint64_t position = 0;         // stream position of the call's first byte
  std::uint64_t length = 0;           // bytes moved
  std::span<const Segment> captured;  // ascending, inside [position, position + length)
  // Whole Kafka messages the capture left out (quiet fetches; nothing captured): a message
  // starts right after them.
  bool whole_messages = false;
};

struct PipelineStats {
  std::uint64_t pieces = 0;
  std::uint64_t connections = 0;
  std::uint64_t kafka_connections = 0;
  std::uint64_t object_store_connections = 0;
  std::uint64_t opaque_connections = 0;
  std::uint64_t opaque_kafka_connections = 0;  // Kafka client connections seen only as TLS
  std::uint64_t opaque_kafka_cycles = 0;       // their request/response cycles
  std::uint64_t object_reads = 0;
  std::uint64_t opaque_cycles_not_reads = 0;  // estimated cycles written by non-reader threads
  std::uint64_t kafka_parse_errors = 0;
  std::uint64_t kafka_frames_truncated = 0;    // decoded with part of the frame in a capture hole
  std::uint64_t kafka_requests_truncated = 0;  // ... of them requests
  std::uint64_t kafka_resyncs = 0;             // framing lost and found again
  std::uint64_t kafka_session_misses = 0;      // incremental fetches of a session never seen
  std::uint64_t kafka_session_partitions_capped = 0;  // kafka::Counters
  // Object-store HTTP exchanges, summed over every connection (closed ones included).
  objstore::HttpStats http;
};

class Pipeline {
 public:
  // `tier`, `ledger` and `audit` may be null.
  static Result<std::unique_ptr<Pipeline>> create(
      const PipelineConfig& config, cost::PriceTable prices, sensors::SensorTable& sensors,
      const attribution::LocalTier* tier, exporter::Ledger* ledger, exporter::AuditLog* audit);
  ~Pipeline();

  // A connection seen from its start (accept/connect/TCP SYN); ports decide its role when set.
  void open(std::uint64_t connection, std::uint64_t time_ns, std::uint16_t local_port,
            std::uint16_t peer_port, std::string_view peer_ip);
  // A connection first seen mid-stream (or found running): its ports, for its role and peer.
  void describe(std::uint64_t connection, std::uint16_t local_port, std::uint16_t peer_port,
                std::string_view peer_ip);
  void piece(const Piece& piece);
  void close(std::uint64_t connection, std::uint64_t time_ns);
  // Periodic: expire stale requests, flush idle opaque cycles, expire idle sensors.
  void tick(std::uint64_t now_ns);
  // End of input: every pending request and read is settled.
  void finish(std::uint64_t time_ns);

  // A new price table from a config reload; the billing period's egress so far carries over
  // so tiers keep applying to the running total.
  void set_price_table(cost::PriceTable prices);
  // More broker listener ports (a broker's own listeners, found once it is watched).
  void add_kafka_ports(const std::vector<std::uint16_t>& ports);

  const attribution::Counters& attribution_counters() const;
  PipelineStats stats() const;

 private:
  struct Impl;
  explicit Pipeline(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fc::pipeline
