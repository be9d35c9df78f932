// Ground truth for fetchcost's tests: every remote GET the simulator made, attributed to the
// client fetch that caused it (client-id, topic, and the client's consumer group when known).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "log.h"

namespace tb {

class Ledger {
 public:
  // Remembers the group a client-id joined or committed for (fetches carry no group).
  void set_group(const std::string& client_id, const std::string& group_id);
  std::string group_of(const std::string& client_id);
  // One remote partition read done for a fetch: its GETs, and whether it missed
  // remote.fetch.max.wait (the response went out without it).
  void record(const std::string& client_id, const std::string& topic, int partition,
              const std::vector<RemoteGet>& gets, bool timed_out);
  nlohmann::json to_json(bool with_gets);

 private:
  struct Entry {
    uint64_t gets = 0, bytes = 0, errors = 0;
    uint64_t chunk_gets = 0, index_gets = 0, manifest_gets = 0;
    uint64_t remote_reads = 0, remote_read_timeouts = 0;
    double latency_sum = 0, latency_max = 0;
  };
  std::mutex mu_;
  std::map<std::string, std::string> groups_;
  // (client_id, group_id, topic) → totals
  std::map<std::tuple<std::string, std::string, std::string>, Entry> entries_;
  std::vector<nlohmann::json> get_log_;  // bounded detail, for debugging reconciliation
};

}  // namespace tb
