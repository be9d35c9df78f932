// capture_feed: turns capture records (fetchcost_abi.h) into pipeline calls. TLS plaintext
// records form their own stream (the plaintext positions are not the ciphertext's), keyed by
// the connection id with kTlsStreamBit set, and inherit the connection's ports.
#pragma once

#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "capture/capture.h"
#include "pipeline/pipeline.h"

namespace fc::pipeline {

class CaptureFeed {
 public:
  explicit CaptureFeed(Pipeline& pipeline) : pipeline_(pipeline) {}
  void on_event(const capture::EventView& event);

 private:
  struct Endpoint {
    std::uint16_t local_port = 0;
    std::uint16_t peer_port = 0;
    std::string peer_ip;
  };
  Pipeline& pipeline_;
  std::unordered_map<std::uint64_t, Endpoint> endpoints_;
  std::unordered_set<std::uint64_t> tls_described_;
  std::vector<Segment> segments_;
};

}  // namespace fc::pipeline
