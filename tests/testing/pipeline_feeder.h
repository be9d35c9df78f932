// Feeds hand-built socket calls of one connection to a pipeline::Pipeline, keeping each
// direction's stream position (for unit tests of the pipeline and of bad input through it).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "pipeline/pipeline.h"

namespace fc::testing {

struct PipelineFeeder {
  pipeline::Pipeline& pipe;
  std::uint64_t connection;
  std::uint64_t sent = 0, received = 0;

  // One call of `length` bytes whose first bytes are `head` (the rest not captured).
  void call(bool to_broker, std::uint64_t length, std::span<const std::uint8_t> head,
            std::uint64_t t, std::uint32_t tid, std::string_view thread_name) {
    std::uint64_t& position = to_broker ? received : sent;
    const pipeline::Segment segment{position, head};
    pipeline::Piece p;
    p.connection = connection;
    p.to_target = to_broker;
    p.time_ns = t;
    p.thread_id = tid;
    p.thread_name = thread_name;
    p.position = position;
    p.length = length;
    p.captured = std::span<const pipeline::Segment>(&segment, 1);
    pipe.piece(p);
    position += length;
  }
  // One call whose bytes are all captured.
  void call(bool to_broker, std::span<const std::uint8_t> bytes, std::uint64_t t, std::uint32_t tid,
            std::string_view thread_name) {
    call(to_broker, bytes.size(), bytes, t, tid, thread_name);
  }
};

}  // namespace fc::testing
