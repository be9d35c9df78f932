// Reads no readable fetch took → the opaque client connection whose request cycle was open
// across them (rules in attribution.h).
#include "attribution/opaque_match.h"

#include <algorithm>
#include <cmath>
#include <tuple>

namespace fc::attribution {
namespace {

std::string partition_of(const ObjectRead& read) {
  std::string_view name = read.topic.empty() ? read.topic_id : read.topic;
  if (name.empty()) return {};
  std::string key(name);
  key.push_back('\0');
  key.append(std::to_string(read.partition));
  return key;
}

}  // namespace

void OpaqueMatcher::open(std::uint64_t connection, std::string_view peer, std::uint64_t request_ns,
                         std::uint32_t process) {
  if (peer.empty()) return;  // no identity to give its reads
  active_ = true;
  Conn& conn = conns_[connection];
  conn.peer = std::string(peer);
  conn.process = process;
  Cycle c;
  c.request_ns = request_ns;
  conn.cycles.push_back(c);
}

void OpaqueMatcher::cycle(const OpaqueCycle& oc) {
  auto it = conns_.find(oc.connection);
  if (it == conns_.end()) return;  // never opened (no peer address)
  auto& cycles = it->second.cycles;
  auto c = std::find_if(cycles.rbegin(), cycles.rend(), [&](const Cycle& c) {
    return !c.complete && c.request_ns == oc.request_ns;
  });
  if (c == cycles.rend()) return;
  c->complete = true;
  c->response_start_ns = oc.response_start_ns;
  c->response_end_ns = oc.response_end_ns;
  c->capacity = oc.response_bytes;
}

void OpaqueMatcher::forget(std::uint64_t connection) {
  conns_.erase(connection);
}

void OpaqueMatcher::hold(const ObjectRead& read) {
  Held h{read, std::string(read.object_key), std::string(read.topic), std::string(read.topic_id),
         partition_of(read)};
  held_.push_back(std::move(h));
}

std::vector<OpaqueMatcher::Candidate> OpaqueMatcher::candidates(const ObjectRead& read,
                                                                bool* pending) {
  std::vector<Candidate> out;
  for (auto& [id, conn] : conns_) {
    if (conn.process != 0 && read.process != 0 && conn.process != read.process) continue;
    // The connection's last cycle that started before the read: cycles of one connection do not
    // overlap, so it is the only one that can be open across it.
    auto c = std::find_if(conn.cycles.rbegin(), conn.cycles.rend(),
                          [&](const Cycle& c) { return c.request_ns <= read.start_ns; });
    if (c == conn.cycles.rend()) continue;
    if (!c->complete) {
      *pending = true;
      continue;
    }
    if (c->response_start_ns == 0 || c->response_start_ns < read.end_ns) continue;
    out.push_back({id, &*c});
  }
  return out;
}

bool OpaqueMatcher::continues(const Task& task, const std::string& partition,
                              const ObjectRead& read) {
  if (task.partition != partition) return false;
  if (read.segment_base_offset < 0 || task.segment < 0) return true;
  return task.segment == read.segment_base_offset &&
         (task.range_last < 0 || read.range_first < 0 || read.range_first == task.range_last + 1);
}

void OpaqueMatcher::expire(std::uint64_t now_ns) {
  for (auto it = conns_.begin(); it != conns_.end();) {
    auto& cycles = it->second.cycles;
    while (!cycles.empty()) {
      const Cycle& c = cycles.front();
      const std::uint64_t last = c.complete ? std::max(c.request_ns, c.response_end_ns)
                                            : c.request_ns + options_.max_pending_ns;
      if (last + options_.opaque_retain_ns >= now_ns) break;
      cycles.pop_front();
    }
    it = cycles.empty() ? conns_.erase(it) : std::next(it);
  }
  if (by_thread_.size() > 100'000) by_thread_.clear();  // thread ids churned
  if (partition_reader_.size() > 100'000) partition_reader_.clear();
}

std::uint64_t OpaqueMatcher::task_bytes(std::size_t index) const {
  const ObjectRead& read = held_[index].read;
  std::uint64_t bytes = read.succeeded() ? read.body_bytes : 0;
  Task chain{0, 0, held_[index].partition, read.segment_base_offset, read.range_last};
  for (std::size_t j = index + 1; j < held_.size(); ++j) {
    const ObjectRead& next = held_[j].read;
    if (next.thread_id != read.thread_id) continue;
    if (!continues(chain, held_[j].partition, next)) break;
    if (next.succeeded()) bytes += next.body_bytes;
    chain.segment = next.segment_base_offset;
    chain.range_last = next.range_last;
  }
  return bytes;
}

const OpaqueMatcher::Candidate* OpaqueMatcher::choose(std::size_t index,
                                                      const std::vector<Candidate>& cands,
                                                      bool claimed_only,
                                                      std::optional<std::uint64_t>& task) {
  const ObjectRead& read = held_[index].read;
  const std::string& partition = held_[index].partition;
  if (auto t = by_thread_.find(read.thread_id);
      t != by_thread_.end() && continues(t->second, partition, read)) {
    for (const Candidate& c : cands)
      if (c.connection == t->second.connection && c.cycle->request_ns == t->second.request_ns)
        return &c;
  }
  const auto reader =
      partition.empty() ? partition_reader_.end() : partition_reader_.find(partition);
  if (claimed_only && reader == partition_reader_.end()) return nullptr;
  if (!task) task = task_bytes(index);
  const std::uint64_t bytes = *task;
  const Candidate* pick = nullptr;
  // Answers within this factor of the task's bytes are alike: their sizes are estimated from TLS
  // records, and among alike answers the broker's reader pool took the fetch that came first.
  constexpr double kAlikeFit = 2.0;
  std::tuple<bool, bool, bool, std::int64_t, double> best{};
  for (const Candidate& c : cands) {
    const std::uint64_t room =
        c.cycle->capacity > c.cycle->assigned ? c.cycle->capacity - c.cycle->assigned : 0;
    const double fit = bytes == 0 ? (room > 0 ? 1.0 : 0.0) : static_cast<double>(room) / bytes;
    if (fit < options_.opaque_min_fit) continue;  // its answer did not carry these bytes
    const double misfit = std::abs(std::log(fit));
    std::tuple<bool, bool, bool, std::int64_t, double> rank{
        reader != partition_reader_.end() && reader->second == c.connection, c.cycle->reads == 0,
        misfit <= std::log(kAlikeFit), -static_cast<std::int64_t>(c.cycle->request_ns), -misfit};
    if (!pick || rank > best) {
      pick = &c;
      best = rank;
    }
  }
  if (claimed_only && !(pick && std::get<0>(best))) return nullptr;
  return pick;
}

void OpaqueMatcher::settle(std::uint64_t now_ns, const Decide& decide) {
  if (held_.empty()) {
    if (now_ns != ~0ull) expire(now_ns);
    return;
  }
  std::stable_sort(held_.begin(), held_.end(),
                   [](const Held& a, const Held& b) { return a.read.start_ns < b.read.start_ns; });
  for (Held& h : held_) {  // views into the held copies (moved since they were held)
    h.read.object_key = h.key;
    h.read.topic = h.topic;
    h.read.topic_id = h.topic_id;
  }
  // The reads ready to decide: a prefix in start order. Nothing adds or drops cycles until the
  // end of settle, so the candidates' pointers into the connections' deques stay valid.
  const bool all = now_ns == ~0ull;
  std::vector<std::vector<Candidate>> cands;
  for (std::size_t i = 0; i < held_.size(); ++i) {
    const ObjectRead& read = held_[i].read;
    if (!all && read.end_ns + options_.estimate_settle_ns > now_ns) break;
    bool pending = false;
    std::vector<Candidate> open = candidates(read, &pending);
    if (pending && !all && read.end_ns + options_.opaque_hold_ns > now_ns) break;
    cands.push_back(std::move(open));
  }
  const std::size_t ready = cands.size();
  std::vector<const Candidate*> picks(ready, nullptr);
  std::vector<bool> decided(ready, false);
  std::vector<std::optional<std::uint64_t>> task(ready);  // each read's task bytes, once
  auto assign = [&](std::size_t i, const Candidate* pick) {
    const ObjectRead& read = held_[i].read;
    decided[i] = true;
    picks[i] = pick;
    if (!pick) {
      by_thread_.erase(read.thread_id);
      return;
    }
    Cycle& cycle = *pick->cycle;
    if (read.succeeded()) cycle.assigned += read.body_bytes;
    ++cycle.reads;
    const std::string& partition = held_[i].partition;
    by_thread_[read.thread_id] = Task{pick->connection, cycle.request_ns, partition,
                                      read.segment_base_offset, read.range_last};
    if (!partition.empty()) partition_reader_[partition] = pick->connection;
  };
  // First the reads their evidence claims (the reader thread's task goes on, the partition's
  // reader has a cycle open across them): their bytes fill those answers before a read of a
  // partition no one has read yet weighs the answers' room. A thread's reads stay in order.
  std::unordered_set<std::uint32_t> deferred_threads;
  for (std::size_t i = 0; i < ready; ++i) {
    const std::uint32_t thread = held_[i].read.thread_id;
    if (deferred_threads.count(thread)) continue;
    if (const Candidate* pick = choose(i, cands[i], /*claimed_only=*/true, task[i]))
      assign(i, pick);
    else
      deferred_threads.insert(thread);
  }
  // Then the rest in start order, by rank. One waits while a read not ready yet started before
  // its cycles were answered: that read may be claimed, and take room this one would weigh.
  for (std::size_t i = 0; i < ready; ++i) {
    if (decided[i]) continue;
    std::uint64_t answered = 0;
    for (const Candidate& c : cands[i]) answered = std::max(answered, c.cycle->response_start_ns);
    if (!all && ready < held_.size() && held_[ready].read.start_ns < answered) break;
    assign(i, choose(i, cands[i], /*claimed_only=*/false, task[i]));
  }
  std::size_t kept = 0;
  for (std::size_t i = 0; i < held_.size(); ++i) {
    if (i < ready && decided[i]) {
      decide(held_[i].read, picks[i] ? &conns_.at(picks[i]->connection).peer : nullptr);
      continue;
    }
    if (kept != i) held_[kept] = std::move(held_[i]);
    ++kept;
  }
  held_.resize(kept);
  if (!all) expire(now_ns);
}

}  // namespace fc::attribution
