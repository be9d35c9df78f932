// Reads a pcap file, reassembles TCP by sequence number and feeds a kafka::Decoder exactly like
// the capture layer does: one piece per segment at its stream position (retransmissions and
// out-of-order segments are sorted out by the byte streams), open on SYN, close on FIN/RST.
#pragma once

#include <cstdint>
#include <string>

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
  // Broker port; 0 = every TCP port, each connection's server side taken from its SYN (else the
  // lower port).
  std::uint16_t broker_port = 9092;
};

// Connection ids handed to the decoder are 1, 2, … in order of first sight; describe() names them.
class PcapSource {
 public:
  explicit PcapSource(PcapOptions options);
  ~PcapSource();
  Result<PcapStats> run(kafka::Decoder& decoder);
  // "client_ip:port->broker_ip:port" of a connection id the decoder reported.
  std::string describe(std::uint64_t connection) const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace fc::tools
