#include "pipeline_flows.h"

#include <algorithm>

namespace fc::tools {

void PipelineFlows::open(std::uint64_t connection, std::uint64_t ns, const FlowEnds& ends,
                         bool from_start) {
  const bool kafka =
      std::find(kafka_ports_.begin(), kafka_ports_.end(), ends.server_port) != kafka_ports_.end();
  broker_is_server_[connection] = kafka;
  const std::uint16_t local = kafka ? ends.server_port : ends.client_port;
  const std::uint16_t peer = kafka ? ends.client_port : ends.server_port;
  const std::string& peer_ip = kafka ? ends.client_ip : ends.server_ip;
  if (from_start)
    pipeline_.open(connection, ns, local, peer, peer_ip);
  else
    pipeline_.describe(connection, local, peer, peer_ip);
}

void PipelineFlows::data(std::uint64_t connection, bool from_client, std::uint64_t ns,
                         std::uint64_t position, std::uint64_t length,
                         std::span<const std::uint8_t> captured) {
  if (ns >= last_tick_ + 100'000'000) {  // what fetchcostd's drain loop does every 100 ms
    pipeline_.tick(ns);
    last_tick_ = ns;
  }
  const pipeline::Segment segment{position, captured};
  pipeline::Piece piece;
  piece.connection = connection;
  piece.to_target = broker_is_server_[connection] ? from_client : !from_client;
  piece.time_ns = ns;
  // A pcap has no threads; one object-store connection serves one reader at a time.
  piece.thread_id = static_cast<std::uint32_t>(connection);
  piece.position = position;
  piece.length = length;
  if (!captured.empty()) piece.captured = std::span<const pipeline::Segment>(&segment, 1);
  pipeline_.piece(piece);
}

void PipelineFlows::close(std::uint64_t connection, std::uint64_t ns) {
  pipeline_.close(connection, ns);
  broker_is_server_.erase(connection);
}

void PipelineFlows::end(std::uint64_t ns) {
  pipeline_.finish(ns);
}

}  // namespace fc::tools
