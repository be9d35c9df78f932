// Reads a pcap file, reassembles TCP by sequence number and feeds a kafka::Decoder exactly like
// the capture layer does: one piece per segment at its stream position (retransmissions and
// out-of-order segments are sorted out by the byte streams), open on SYN, close on FIN/RST.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "kafka/kafka.h"

namespace fc::tools {

struct PcapStats {
  std::uint64_t packets = 0;
  std::uint64_t tcp_segments = 0;  // on the broker port(s)
  std::uint64_t payload_bytes = 0;
  std::uint64_t truncated_segments = 0;  // captured shorter than on the wire (snaplen)
  std::uint64_t skipped_packets = 0;     // not IPv4/IPv6 TCP, or another port
};

struct PcapOptions {
  std::string path;
  // Broker port; 0 = every TCP port, each connection's server side taken from its SYN, else from
  // `server_ports`, else the lower port.
  std::uint16_t broker_port = 9092;
  // Ports known to be servers (the broker's listeners, the object store's): a flow already open
  // when the capture started has no SYN to say which side listens.
  std::vector<std::uint16_t> server_ports;
};

// One TCP flow's two ends; the server is the side that answered the SYN (or the broker port).
struct FlowEnds {
  std::string client_ip;
  std::uint16_t client_port = 0;
  std::string server_ip;
  std::uint16_t server_port = 0;
};

// What the reassembled flows are fed to: the Kafka decoder (decode), or the whole pipeline
// (replay) which also sees the broker's object-store connections.
class FlowSink {
 public:
  virtual ~FlowSink() = default;
  // `from_start`: the SYN was seen, so both byte streams start at position 0.
  virtual void open(std::uint64_t connection, std::uint64_t time_ns, const FlowEnds& ends,
                    bool from_start) = 0;
  virtual void data(std::uint64_t connection, bool from_client, std::uint64_t time_ns,
                    std::uint64_t position, std::uint64_t length,
                    std::span<const std::uint8_t> captured) = 0;
  virtual void close(std::uint64_t connection, std::uint64_t time_ns) = 0;
  virtual void end(std::uint64_t time_ns) = 0;
};

// Connection ids handed to the decoder are 1, 2, … in order of first sight; describe() names them.
class PcapSource {
 public:
  explicit PcapSource(PcapOptions options);
  ~PcapSource();
  Result<PcapStats> run(kafka::Decoder& decoder);
  Result<PcapStats> run(FlowSink& sink);
  // "client_ip:port->broker_ip:port" of a connection id the decoder reported.
  std::string describe(std::uint64_t connection) const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace fc::tools
