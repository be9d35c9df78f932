// Internal to attribution: matches reads no readable fetch took to the request cycles of opaque
// client connections (see the rules in attribution.h).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "attribution/attribution.h"

namespace fc::attribution {

class OpaqueMatcher {
 public:
  explicit OpaqueMatcher(const Options& options) : options_(options) {}

  // Opaque connections have been seen: unmatched reads wait for them.
  bool active() const { return active_; }
  void open(std::uint64_t connection, std::string_view peer, std::uint64_t request_ns,
            std::uint32_t process);
  void cycle(const OpaqueCycle& cycle);
  void forget(std::uint64_t connection);
  // Keeps a copy of the read (its views need not outlive the call).
  void hold(const ObjectRead& read);
  // Decides the held reads that are ready at `now_ns` (~0: all), in start order. `decide` gets
  // the read and the peer address it went to (nullptr: unattributed).
  using Decide = std::function<void(const ObjectRead& read, const std::string* peer)>;
  void settle(std::uint64_t now_ns, const Decide& decide);
  std::size_t held() const { return held_.size(); }

 private:
  struct Cycle {
    std::uint64_t request_ns = 0;
    std::uint64_t response_start_ns = 0;
    std::uint64_t response_end_ns = 0;
    std::uint64_t capacity = 0;  // the answer's plaintext bytes
    std::uint64_t assigned = 0;  // GET bytes matched to it so far
    std::uint32_t reads = 0;
    bool complete = false;
  };
  struct Conn {
    std::string peer;
    std::uint32_t process = 0;  // the broker process it talks to; 0: unknown
    std::deque<Cycle> cycles;   // request order
  };
  struct Held {
    ObjectRead read;
    std::string key, topic, topic_id;
    std::string partition;  // partition_of(read), made once: settle compares it per held read
  };
  struct Candidate {
    std::uint64_t connection;
    Cycle* cycle;
  };
  // The reader thread's current task: the cycle it went to and where it read last.
  struct Task {
    std::uint64_t connection = 0;
    std::uint64_t request_ns = 0;
    std::string partition;  // partition_key of the read
    std::int64_t segment = -1;
    std::int64_t range_last = -1;
  };

  // The cycle of each connection open across the read; `pending`: one of them not answered yet.
  std::vector<Candidate> candidates(const ObjectRead& read, bool* pending);
  // The bytes of held read `index`'s task: it and the held reads its thread reads next that
  // continue it.
  std::uint64_t task_bytes(std::size_t index) const;
  // The cycle held read `index` goes to: the reader thread's current task, else the best ranked
  // cycle with room for the task; `claimed_only`: only the former or the partition's reader.
  // `task_bytes`: its task's bytes, worked out on first need and kept for the next call.
  const Candidate* choose(std::size_t index, const std::vector<Candidate>& cands, bool claimed_only,
                          std::optional<std::uint64_t>& task_bytes);
  static bool continues(const Task& task, const std::string& partition, const ObjectRead& read);
  void expire(std::uint64_t now_ns);

  const Options& options_;
  bool active_ = false;
  std::unordered_map<std::uint64_t, Conn> conns_;
  std::vector<Held> held_;
  std::unordered_map<std::uint32_t, Task> by_thread_;
  std::unordered_map<std::string, std::uint64_t> partition_reader_;  // partition → connection
};

}  // namespace fc::attribution
