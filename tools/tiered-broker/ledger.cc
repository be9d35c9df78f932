#include "ledger.h"

namespace tb {

constexpr size_t kMaxGetLog = 200000;

void Ledger::set_group(const std::string& client_id, const std::string& group_id) {
  std::lock_guard lock(mu_);
  groups_[client_id] = group_id;
}

std::string Ledger::group_of(const std::string& client_id) {
  std::lock_guard lock(mu_);
  auto it = groups_.find(client_id);
  return it == groups_.end() ? "" : it->second;
}

void Ledger::record(const std::string& client_id, const std::string& topic, int partition,
                    const std::vector<RemoteGet>& gets, bool timed_out) {
  std::lock_guard lock(mu_);
  auto git = groups_.find(client_id);
  std::string group = git == groups_.end() ? "" : git->second;
  Entry& e = entries_[{client_id, group, topic}];
  e.remote_reads++;
  if (timed_out) e.remote_read_timeouts++;
  for (const auto& g : gets) {
    e.gets++;
    bool ok = g.status >= 200 && g.status < 300;
    if (ok)
      e.bytes += g.bytes;
    else
      e.errors++;
    if (g.kind == "chunk") e.chunk_gets++;
    if (g.kind == "indexes") e.index_gets++;
    if (g.kind == "manifest") e.manifest_gets++;
    e.latency_sum += g.seconds;
    if (g.seconds > e.latency_max) e.latency_max = g.seconds;
    if (get_log_.size() < kMaxGetLog)
      get_log_.push_back({{"client_id", client_id},
                          {"topic", topic},
                          {"partition", partition},
                          {"kind", g.kind},
                          {"key", g.key},
                          {"status", g.status},
                          {"bytes", g.bytes},
                          {"seconds", g.seconds}});
  }
}

nlohmann::json Ledger::to_json(bool with_gets) {
  std::lock_guard lock(mu_);
  nlohmann::json entries = nlohmann::json::array();
  uint64_t gets = 0, bytes = 0, errors = 0;
  for (const auto& [key, e] : entries_) {
    const auto& [client, group, topic] = key;
    entries.push_back(
        {{"client_id", client},
         {"group_id", group.empty() ? nlohmann::json(nullptr) : nlohmann::json(group)},
         {"topic", topic},
         {"gets", e.gets},
         {"bytes", e.bytes},
         {"errors", e.errors},
         {"chunk_gets", e.chunk_gets},
         {"index_gets", e.index_gets},
         {"manifest_gets", e.manifest_gets},
         {"remote_reads", e.remote_reads},
         {"remote_read_timeouts", e.remote_read_timeouts},
         {"latency_seconds_sum", e.latency_sum},
         {"latency_seconds_max", e.latency_max}});
    gets += e.gets;
    bytes += e.bytes;
    errors += e.errors;
  }
  nlohmann::json groups = nlohmann::json::object();
  for (const auto& [c, g] : groups_) groups[c] = g;
  nlohmann::json out = {{"version", 1},
                        {"totals", {{"gets", gets}, {"bytes", bytes}, {"errors", errors}}},
                        {"entries", entries},
                        {"client_groups", groups}};
  if (with_gets) out["gets"] = get_log_;
  return out;
}

}  // namespace tb
