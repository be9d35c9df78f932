// pipeline_flows: reassembled TCP flows of a pcap → the attribution pipeline, with the broker's
// side of each flow worked out (it is the server of Kafka flows and the client of object-store
// flows). Used by `fetchcost replay` and by the pipeline benchmark.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "pcap_source.h"
#include "pipeline/pipeline.h"

namespace fc::tools {

class PipelineFlows : public FlowSink {
 public:
  PipelineFlows(pipeline::Pipeline& pipeline, std::vector<std::uint16_t> kafka_ports)
      : pipeline_(pipeline), kafka_ports_(std::move(kafka_ports)) {}

  void open(std::uint64_t connection, std::uint64_t ns, const FlowEnds& ends,
            bool from_start) override;
  void data(std::uint64_t connection, bool from_client, std::uint64_t ns, std::uint64_t position,
            std::uint64_t length, std::span<const std::uint8_t> captured) override;
  void close(std::uint64_t connection, std::uint64_t ns) override;
  void end(std::uint64_t ns) override;

 private:
  pipeline::Pipeline& pipeline_;
  std::vector<std::uint16_t> kafka_ports_;
  std::unordered_map<std::uint64_t, bool> broker_is_server_;
  std::uint64_t last_tick_ = 0;
};

}  // namespace fc::tools
