#include "attribution/attribution.h"

#include "attribution/opaque_match.h"

#include <algorithm>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>
#include <vector>

namespace fc::attribution {
namespace {

struct Bucket;

struct PendingPartition {
  std::string topic;
  std::string topic_id;  // base64, for matching keys when the name was not resolved
  std::int32_t partition = -1;
  // The by_partition buckets that list the fetch for this partition (by name, by topic id):
  // kept, so that answering and finishing a fetch look nothing up. A bucket lives while it
  // lists a fetch.
  Bucket* by_name = nullptr;
  Bucket* by_id = nullptr;
  std::int64_t fetch_offset = -1;
  std::int32_t max_bytes = -1;
  bool first_remote = true;   // the partition the broker reads remotely if it reads only one
  bool tier_unknown = false;  // kept because no tier knows the partition: it may read remotely
  bool read_done = false;     // the reader thread that read it has moved on to another task
  std::uint64_t reads = 0;
  std::uint64_t bytes = 0;
  std::uint64_t first_start_ns = 0;
  std::uint64_t last_end_ns = 0;
  Method method = Method::kExact;
  // From the response, once seen.
  bool answered = false;        // the partition was in the response
  std::uint64_t delivered = 0;  // record bytes the response carried for it
  bool remote_answer = false;   // records, or a storage error (a failed remote read)
  bool storage_error = false;   // answered KAFKA_STORAGE_ERROR: its remote read failed
  bool failure_taken = false;   // a held failed GET went to this storage error
};

struct PendingFetch {
  std::uint64_t arrival = 0;  // order of arrival (ranking ties go to the oldest)
  std::uint64_t connection = 0;
  std::uint32_t process = 0;  // the broker process that received it; 0: unknown
  std::int32_t correlation_id = 0;
  std::string client_id;
  std::string peer;
  std::uint64_t request_ns = 0;
  std::uint64_t closed_ns = 0;    // the client connection closed at this time (0: open)
  std::uint64_t answered_ns = 0;  // response sent (kept for estimated reads); 0: not yet
  bool response_seen = false;
  std::vector<PendingPartition> parts;
  std::vector<std::uint32_t> reader_threads;  // threads tied to this fetch
  std::uint32_t started_reads = 0;            // GETs matched to it when they started, not done
  std::uint32_t open_leftovers = 0;  // buckets whose `open` still lists it, answered (Bucket)
};

using FetchList = std::list<PendingFetch>;
using FetchIt = FetchList::iterator;

std::uint64_t fetch_key(std::uint64_t connection, std::int32_t correlation_id) {
  // Connection ids are kernel addresses or (tgid, fd, generation) packs: mixing in the
  // correlation id keeps keys unique in practice; collisions are checked on lookup.
  return connection * 1000003ull ^ static_cast<std::uint32_t>(correlation_id);
}

constexpr std::int16_t kKafkaStorageError = 56;

// t + d, or the end of time.
std::uint64_t after(std::uint64_t t, std::uint64_t d) {
  return t > ~std::uint64_t{0} - d ? ~std::uint64_t{0} : t + d;
}

// Pending fetches per (topic or topic id, partition) that may read that partition remotely.
// Answered ones are kept apart, by answer time: they are kept answered_retain_ns for reads known
// late, but only a read that started before the answer can take one, so a read looks at the
// newest few of them instead of walking a busy partition's last seconds of fetches. Deques:
// fetches mostly finish oldest first, and leave from the front.
// An answered fetch leaves `open` lazily: at once from its front, else when it reaches the front
// or when leftovers are half of it (a pass that keeps the rest in order). Fetches are answered in
// another order than they came (remote ones after local ones that came later), and an erase from
// the middle moved a deque's elements for each of a fetch's partitions: a third of attribution's
// instructions with Java clients' sessions of 100 partitions that no tier knows
// (docs/performance.md, "Session 53 ...: an answered fetch leaves its partition's open list
// lazily"). Walks of `open` skip answered fetches.
struct Bucket {
  std::deque<FetchIt> open;        // in arrival order: not answered yet, and leftovers
  std::size_t open_leftovers = 0;  // entries of `open` whose fetch is answered
  std::deque<FetchIt> answered;    // in answered_ns order
};

// (topic or topic id, partition), looked up by a view: a lookup allocates nothing.
struct PartitionKey {
  std::string topic;
  std::int32_t partition;
};
struct PartitionView {
  std::string_view topic;
  std::int32_t partition;
};
struct PartitionKeyHash {
  using is_transparent = void;
  std::size_t operator()(PartitionView k) const {
    return std::hash<std::string_view>{}(k.topic) ^
           (static_cast<std::size_t>(k.partition) * 0x9E3779B97F4A7C15ull);
  }
  std::size_t operator()(const PartitionKey& k) const {
    return (*this)(PartitionView{k.topic, k.partition});
  }
};
struct PartitionKeyEqual {
  using is_transparent = void;
  static PartitionView view(const PartitionKey& k) { return {k.topic, k.partition}; }
  static PartitionView view(PartitionView k) { return k; }
  template <typename A, typename B>
  bool operator()(const A& a, const B& b) const {
    const PartitionView x = view(a), y = view(b);
    return x.partition == y.partition && x.topic == y.topic;
  }
};

}  // namespace

struct Attributor::Impl {
  Sink& sink;
  const LocalTier* tier;
  Options options;
  Counters counters;
  OpaqueMatcher opaque{options};  // reads no readable fetch took, for opaque client connections

  FetchList fetches;  // arrival order (the remote reader pool is FIFO)
  std::unordered_multimap<std::uint64_t, FetchIt> by_request;
  std::unordered_map<PartitionKey, Bucket, PartitionKeyHash, PartitionKeyEqual> by_partition;
  // The remote segments' base offsets GETs have named, per partition (sorted): a fetch at or past
  // one reads that segment or a later one, never an earlier one. Bounded: kSegmentBasesKept per
  // partition (the lowest give way), kSegmentPartitionsKept partitions (all forgotten at once).
  static constexpr std::size_t kSegmentBasesKept = 256;
  static constexpr std::size_t kSegmentPartitionsKept = 16'384;
  std::unordered_map<PartitionKey, std::vector<std::int64_t>, PartitionKeyHash, PartitionKeyEqual>
      segment_bases;
  std::uint64_t arrivals = 0;
  // When the answered and the closed fetches are due to finish (expiry_of, arrival), soonest on
  // top, so that a sweep (every 10 ms) does not walk every fetch kept. An entry whose fetch has
  // finished meanwhile is skipped (by_arrival no longer has it).
  std::unordered_map<std::uint64_t, FetchIt> by_arrival;
  using Due = std::pair<std::uint64_t, std::uint64_t>;
  std::priority_queue<Due, std::vector<Due>, std::greater<Due>> due;
  void due_at(const PendingFetch& f) { due.emplace(expiry_of(f), f.arrival); }

  // When expire() finishes the fetch: its client left, it was answered, or it went stale.
  std::uint64_t stale_at(const PendingFetch& f) const {
    return after(f.request_ns, options.max_pending_ns);
  }
  std::uint64_t expiry_of(const PendingFetch& f) const {
    std::uint64_t at = stale_at(f);
    if (f.closed_ns != 0) at = std::min(at, after(f.closed_ns, options.closed_grace_ns));
    if (f.answered_ns != 0) at = std::min(at, after(f.answered_ns, options.answered_retain_ns));
    return at;
  }
  struct Affinity {
    FetchIt fetch;
    std::size_t part;
    // The segment and byte range of the thread's last read: a remote read task reads one
    // segment (its manifest and indexes, then consecutive chunks); a read elsewhere, or one
    // that does not continue the last range, starts the thread's next task.
    std::int64_t segment = -1;
    std::int64_t range_last = -1;
  };
  std::unordered_map<std::uint32_t, Affinity> by_thread;
  // Exact GETs matched when their request was written, by (start time, connection): the fetch
  // (by arrival, which outlives no finished fetch) and partition, until the GET completes; and
  // what makes a later request on the same thread a retry of it.
  struct Started {
    std::uint64_t arrival;
    std::size_t part;
    std::uint32_t thread_id;
    std::int64_t segment, range_first, range_last;
  };
  std::map<std::pair<std::uint64_t, std::uint64_t>, Started> started;
  std::unordered_map<std::uint64_t, std::string> peers;
  std::unordered_map<std::uint64_t, std::uint32_t> processes;  // client connection → broker
  std::uint64_t latest_ns = 0;                                 // the newest time seen in any input
  std::vector<ObjectRead> estimates;  // estimated reads not settled yet (no views inside)
  // Failed exact GETs not decided yet, with their own copies of what the read's views named.
  struct HeldFailure {
    ObjectRead read;
    std::string key, topic, topic_id;
  };
  std::vector<HeldFailure> failures;

  // track()'s names of a request's topics, kept so that a fetch allocates none.
  struct TopicNames {
    bool resolved = false;
    std::string topic, topic_id;
  };
  std::vector<TopicNames> track_names;
  std::size_t pending_partitions = 0;  // over all fetches (options.max_pending_partitions)

  Impl(Sink& s, const LocalTier* t, Options o) : sink(s), tier(t), options(o) {}

  // Where a fetch of a partition at an offset reads: locally, from the remote tier (the offset
  // is below the partition's local log start), or maybe remotely (the tier does not know it).
  enum class Reads : std::uint8_t { kLocal, kRemote, kMaybeRemote };
  Reads reads_from(std::string_view topic, std::int32_t partition,
                   std::int64_t fetch_offset) const {
    if (fetch_offset < 0) return Reads::kLocal;
    if (tier) {
      if (auto start = tier->local_log_start(topic, partition))
        return fetch_offset < *start ? Reads::kRemote : Reads::kLocal;
    }
    return options.unknown_partitions_possibly_remote ? Reads::kMaybeRemote : Reads::kLocal;
  }

  FetchIt find(std::uint64_t connection, std::int32_t correlation_id) {
    auto [lo, hi] = by_request.equal_range(fetch_key(connection, correlation_id));
    for (auto it = lo; it != hi; ++it) {
      if (it->second->connection == connection && it->second->correlation_id == correlation_id)
        return it->second;
    }
    return fetches.end();
  }

  void unindex_request(FetchIt fetch) {
    auto [lo, hi] = by_request.equal_range(fetch_key(fetch->connection, fetch->correlation_id));
    for (auto it = lo; it != hi; ++it) {
      if (it->second == fetch) {
        by_request.erase(it);
        break;
      }
    }
  }

  // Takes one entry of the fetch out of a partition's list: track and index_answered add one
  // per partition and name, unindex takes one per partition and name. Finished fetches are near
  // the front (they finish about in the order they came or were answered), so the search stops
  // early; erasing every match walked the whole list each time, 10,000 fetches on a partition
  // that answers 5,000 remote fetches/s (answered ones are kept 2 s). False if none was there.
  static bool remove(std::deque<FetchIt>& fetches_of, FetchIt fetch) {
    auto it = std::find(fetches_of.begin(), fetches_of.end(), fetch);
    if (it == fetches_of.end()) return false;
    if (it == fetches_of.begin())
      fetches_of.pop_front();  // the common case, without erase's general path
    else
      fetches_of.erase(it);
    return true;
  }

  // Takes the answered fetches at the front of the bucket's open list off it, and every one of
  // them once they are half of it.
  static void trim_open(Bucket& bucket) {
    auto& open = bucket.open;
    for (; !open.empty() && open.front()->answered_ns != 0; --bucket.open_leftovers) {
      --open.front()->open_leftovers;
      open.pop_front();
    }
    if (bucket.open_leftovers * 2 <= open.size()) return;
    std::erase_if(open, [](FetchIt f) {
      if (f->answered_ns == 0) return false;
      --f->open_leftovers;
      return true;
    });
    bucket.open_leftovers = 0;
  }

  // The fetch was answered (answered_ns set): from its partitions' open lists (lazily: Bucket)
  // to their answered ones, kept in answered_ns order (answers come nearly in order: the place
  // is found from the back).
  void index_answered(FetchIt fetch) {
    for_each_bucket(*fetch, [&](Bucket& bucket, const std::string&, std::int32_t) {
      ++fetch->open_leftovers;
      ++bucket.open_leftovers;
      trim_open(bucket);
      auto& answered = bucket.answered;
      auto at = answered.end();
      while (at != answered.begin() && (*std::prev(at))->answered_ns > fetch->answered_ns) --at;
      answered.insert(at, fetch);
    });
  }

  // Calls f(bucket, name the bucket is keyed by, partition) for each bucket that lists the
  // fetch (by topic name and by topic id).
  template <typename F>
  static void for_each_bucket(const PendingFetch& fetch, F f) {
    for (const auto& part : fetch.parts) {
      if (part.by_name) f(*part.by_name, part.topic, part.partition);
      if (part.by_id) f(*part.by_id, part.topic_id, part.partition);
    }
  }

  void unindex(FetchIt fetch) {
    unindex_request(fetch);
    for_each_bucket(*fetch, [&](Bucket& bucket, const std::string& name, std::int32_t partition) {
      if (fetch->answered_ns == 0) {
        remove(bucket.open, fetch);
      } else {
        remove(bucket.answered, fetch);
        // Still behind an older fetch waiting for its answer: its entry must not outlive it.
        if (fetch->open_leftovers != 0 && remove(bucket.open, fetch)) {
          --bucket.open_leftovers;
          --fetch->open_leftovers;
        }
      }
      if (!bucket.open.empty() || !bucket.answered.empty()) return;
      if (auto it = by_partition.find(PartitionView{name, partition}); it != by_partition.end())
        by_partition.erase(it);
    });
    for (std::uint32_t tid : fetch->reader_threads) {
      auto it = by_thread.find(tid);
      if (it != by_thread.end() && it->second.fetch == fetch) by_thread.erase(it);
    }
  }

  // What the response says about each tracked partition. A response lists its partitions in
  // request order, so each search starts after the last match: a fetch of many tracked
  // partitions is answered in one pass, not one pass over the response per partition.
  static void record_response(PendingFetch& fetch, const kafka::Exchange& response) {
    fetch.response_seen = true;
    const auto& fx = response.fetch;
    auto& parts = fetch.parts;
    std::vector<std::string> ids;  // the response's topic ids in base64, each made once
    std::size_t next = 0;
    for (const auto& rp : fx.partitions) {
      if (!rp.in_response || rp.topic_index >= fx.topics.size()) continue;
      const auto& t = fx.topics[rp.topic_index];
      const std::string* id = nullptr;
      if (!t.id.is_zero()) {
        ids.resize(fx.topics.size());
        if (ids[rp.topic_index].empty()) ids[rp.topic_index] = t.id.to_base64();
        id = &ids[rp.topic_index];
      }
      for (std::size_t n = 0, i = next; n < parts.size();
           ++n, i = i + 1 == parts.size() ? 0 : i + 1) {
        PendingPartition& part = parts[i];
        if (part.answered || part.partition != rp.partition) continue;
        if (!(!t.name.empty() && t.name == part.topic) && !(id && *id == part.topic_id)) continue;
        part.answered = true;
        part.delivered = rp.records_size > 0 ? static_cast<std::uint64_t>(rp.records_size) : 0;
        part.storage_error = rp.error_code == kKafkaStorageError;
        part.remote_answer = part.delivered > 0 || part.storage_error;
        next = i + 1 == parts.size() ? 0 : i + 1;
        break;
      }
    }
  }

  void finish(FetchIt fetch) {
    for (const auto& part : fetch->parts) {
      if (part.reads == 0) continue;
      FetchDone done;
      done.client_id = fetch->client_id;
      done.peer = fetch->peer;
      done.topic = part.topic.empty() ? std::string_view(part.topic_id) : part.topic;
      done.partition = part.partition;
      done.method = part.method;
      done.object_reads = part.reads;
      done.object_bytes = part.bytes;
      done.remote_latency_seconds =
          part.last_end_ns > part.first_start_ns
              ? static_cast<double>(part.last_end_ns - part.first_start_ns) / 1e9
              : 0.0;
      if (fetch->response_seen) {
        done.response_seen = true;
        done.bytes_delivered = part.delivered;
      }
      sink.on_fetch_done(done);
    }
    unindex(fetch);
    by_arrival.erase(fetch->arrival);
    pending_partitions -= fetch->parts.size();
    fetches.erase(fetch);
  }

  void track(const kafka::Exchange& request) {
    const auto& fx = request.fetch;
    if (fx.replica_id >= 0) return;  // follower replication never reads the remote tier
    PendingFetch fetch;
    fetch.connection = request.connection;
    fetch.correlation_id = request.correlation_id;
    fetch.request_ns = request.request_time_ns;
    bool seen_known_remote = false;
    // Each topic named once: an incremental request carries its whole session, mostly
    // partitions read locally, which need no copy of their names.
    std::vector<TopicNames>& names = track_names;
    names.assign(fx.topics.size(), TopicNames{});
    for (const auto& p : fx.partitions) {
      if (!p.in_request && !p.from_session) continue;
      if (p.topic_index >= fx.topics.size()) continue;
      TopicNames& n = names[p.topic_index];
      if (!n.resolved) {
        n.resolved = true;
        n.topic = fx.topics[p.topic_index].name;
        if (!fx.topics[p.topic_index].id.is_zero())
          n.topic_id = fx.topics[p.topic_index].id.to_base64();
        if (n.topic.empty() && !n.topic_id.empty() && tier) {
          if (auto name = tier->topic_name(n.topic_id)) n.topic = std::move(*name);
        }
      }
      const Reads reads = reads_from(n.topic, p.partition, p.fetch_offset);
      if (reads == Reads::kLocal) continue;
      // A request of more partitions than the bound keeps its first ones: in request order, the
      // broker's remote read is among them.
      if (fetch.parts.size() == options.max_pending_partitions) break;
      PendingPartition part;
      part.topic = n.topic;
      part.topic_id = n.topic_id;
      part.partition = p.partition;
      part.fetch_offset = p.fetch_offset;
      part.max_bytes = p.partition_max_bytes;
      // Kafka <= 4.1 reads one partition remotely: the first remote one with data (its high
      // watermark is only known from the response). Later ones stay candidates, ranked lower.
      part.first_remote = !options.one_remote_partition_per_fetch || !seen_known_remote;
      if (reads == Reads::kRemote) seen_known_remote = true;
      part.tier_unknown = reads == Reads::kMaybeRemote;
      fetch.parts.push_back(std::move(part));
    }
    if (fetch.parts.empty()) return;
    fetch.client_id = request.client_id;
    if (auto peer = peers.find(request.connection); peer != peers.end()) fetch.peer = peer->second;
    if (auto p = processes.find(request.connection); p != processes.end())
      fetch.process = p->second;

    // The oldest fetches make room.
    while (!fetches.empty() &&
           (fetches.size() >= options.max_pending ||
            pending_partitions + fetch.parts.size() > options.max_pending_partitions)) {
      ++counters.pending_evicted;
      finish(fetches.begin());
    }
    pending_partitions += fetch.parts.size();
    fetch.arrival = ++arrivals;
    fetches.push_back(std::move(fetch));
    FetchIt it = std::prev(fetches.end());
    by_arrival.emplace(it->arrival, it);
    by_request.emplace(fetch_key(it->connection, it->correlation_id), it);
    auto bucket_of = [&](const std::string& name, std::int32_t partition) {
      auto found = by_partition.find(PartitionView{name, partition});
      if (found == by_partition.end())
        found = by_partition.emplace(PartitionKey{name, partition}, Bucket{}).first;
      found->second.open.push_back(it);
      return &found->second;
    };
    for (auto& part : it->parts) {
      if (!part.topic.empty()) part.by_name = bucket_of(part.topic, part.partition);
      if (!part.topic_id.empty()) part.by_id = bucket_of(part.topic_id, part.partition);
    }
    ++counters.fetches_tracked;
  }

  // DESIGN: response not yet sent. A GET that succeeded is decided before the answer that carries
  // its data, so an answered fetch takes none (a reader thread starts the next fetch's GET before
  // the network thread sends the last answer: by time alone, concurrent replays were misread). A
  // failed GET may only be known later (its connection's close, a retry, its thread moving on):
  // it goes to the fetch answered after it started. A fetch answered without its remote data
  // (remote.fetch.max.wait.ms passed) did not stop the read: the GETs that started before that
  // answer, and the rest of that task on the same thread, are still its.
  static bool before_answer(const PendingFetch& fetch, const PendingPartition& part,
                            const ObjectRead& read, bool continues_task) {
    if (fetch.answered_ns == 0) return true;
    const bool timed_out = part.answered && !part.remote_answer;
    if (read.start_ns < fetch.answered_ns && (!read.succeeded() || timed_out)) return true;
    return continues_task && timed_out;
  }

  // Only the broker process that received a fetch reads for it (unknown on either side: any).
  static bool same_process(const PendingFetch& fetch, const ObjectRead& read) {
    return fetch.process == 0 || read.process == 0 || fetch.process == read.process;
  }

  static bool names_partition(const PendingPartition& part, const ObjectRead& read) {
    return part.partition == read.partition &&
           (part.topic == read.topic || (!read.topic_id.empty() && part.topic_id == read.topic_id));
  }

  // The fetch the read's thread is serving, when the read continues its task (same segment, the
  // next range). A read that does not continue it ends that task.
  std::optional<Affinity> match_thread(const ObjectRead& read) {
    auto it = by_thread.find(read.thread_id);
    if (it == by_thread.end()) return std::nullopt;
    const Affinity& a = it->second;
    const bool same_task =
        read.segment_base_offset < 0 || a.segment < 0 ||
        (a.segment == read.segment_base_offset &&
         (a.range_last < 0 || read.range_first < 0 || read.range_first == a.range_last + 1));
    if (same_task && same_process(*a.fetch, read) &&
        names_partition(a.fetch->parts[a.part], read) && a.fetch->request_ns <= read.start_ns &&
        before_answer(*a.fetch, a.fetch->parts[a.part], read, /*continues_task=*/true))
      return a;
    if (!same_task) a.fetch->parts[a.part].read_done = true;  // its task ended
    return std::nullopt;
  }

  const Bucket* partition_bucket(const ObjectRead& read) const {
    for (std::string_view name : {read.topic, read.topic_id}) {
      if (name.empty()) continue;
      auto b = by_partition.find(PartitionView{name, read.partition});
      if (b != by_partition.end()) return &b->second;
    }
    return nullptr;
  }

  // By topic id where the key names it: a topic deleted and made again under its name starts
  // its segments anew.
  static std::string_view segment_key(const ObjectRead& read) {
    return read.topic_id.empty() ? read.topic : read.topic_id;
  }

  void learn_segment(const ObjectRead& read) {
    if (read.segment_base_offset < 0 || segment_key(read).empty()) return;
    auto found = segment_bases.find(PartitionView{segment_key(read), read.partition});
    if (found == segment_bases.end()) {
      if (segment_bases.size() >= kSegmentPartitionsKept) segment_bases.clear();
      found = segment_bases
                  .emplace(PartitionKey{std::string(segment_key(read)), read.partition},
                           std::vector<std::int64_t>{})
                  .first;
    }
    auto& bases = found->second;
    const auto at = std::lower_bound(bases.begin(), bases.end(), read.segment_base_offset);
    if (at != bases.end() && *at == read.segment_base_offset) return;
    auto index = at - bases.begin();
    if (bases.size() >= kSegmentBasesKept) {  // the lowest gives way, if this one is not lower
      if (index == 0) return;
      bases.erase(bases.begin());
      --index;
    }
    bases.insert(bases.begin() + index, read.segment_base_offset);
  }

  // The base offset of the segment after the read's, where a GET has named one; else -1.
  std::int64_t next_segment_base(const ObjectRead& read) const {
    if (read.segment_base_offset < 0 || segment_key(read).empty()) return -1;
    auto found = segment_bases.find(PartitionView{segment_key(read), read.partition});
    if (found == segment_bases.end()) return -1;
    auto next =
        std::upper_bound(found->second.begin(), found->second.end(), read.segment_base_offset);
    return next == found->second.end() ? -1 : *next;
  }

  // Finds the fetch and partition an exact read belongs to.
  std::optional<Affinity> match_exact(const ObjectRead& read) {
    if (auto a = match_thread(read)) return a;
    return match_ranked(read);
  }

  // Whether `part` was answered with remote data while `read`, a GET that succeeded, ran (it
  // started before the answer), with no GET counted for it: the mark of GETs that crossed.
  static bool answered_unread(const PendingFetch& fetch, const PendingPartition& part,
                              const ObjectRead& read) {
    return read.succeeded() && part.remote_answer && !part.storage_error && part.reads == 0 &&
           !part.failure_taken && read.start_ns < fetch.answered_ns;
  }

  // A GET no fetch can take, while a fetch of its partition was answered with remote data during
  // it and has no GET counted or running: their GETs crossed (the broker queued fetches of one
  // partition in another order than they came), and that answer carried this GET's data. The
  // oldest such fetch; without one the GET stays unattributed.
  std::optional<Affinity> match_unread_answer(const ObjectRead& read) {
    const Bucket* bucket = partition_bucket(read);
    if (!bucket) return std::nullopt;
    std::optional<Affinity> best;
    for (auto it = bucket->answered.rbegin();
         it != bucket->answered.rend() && (*it)->answered_ns > read.start_ns; ++it) {
      const FetchIt fetch = *it;
      if (fetch->request_ns > read.start_ns || fetch->started_reads != 0 ||
          !same_process(*fetch, read) || (best && best->fetch->arrival < fetch->arrival))
        continue;
      for (std::size_t i = 0; i < fetch->parts.size(); ++i) {
        const auto& part = fetch->parts[i];
        if (names_partition(part, read) && answered_unread(*fetch, part, read) &&
            (read.segment_base_offset < 0 || part.fetch_offset >= read.segment_base_offset))
          best = Affinity{fetch, i};
      }
    }
    return best;
  }

  // A GET no fetch can take, and no answer carried while it ran: the broker's threads took a
  // segment's tasks in another order than their GETs were matched, more than two at once, so a
  // fetch of its segment was answered with remote data and no GET counted (its GET went to
  // another fetch), and a fetch with a GET counted still waits, its task ended: this GET is the
  // waiting one's data. It goes to the unread answer, the oldest, so that each fetch of the
  // segment has one GET, as each got one answer. Without a waiting fetch it stays unattributed
  // (an answer with no GET may come from a cache in the broker's storage plugin).
  std::optional<Affinity> match_crossed_answer(const ObjectRead& read) {
    if (!read.succeeded() || read.segment_base_offset < 0) return std::nullopt;
    const Bucket* bucket = partition_bucket(read);
    if (!bucket) return std::nullopt;
    const std::int64_t next_base = next_segment_base(read);
    // Came before it, no GET running, the same broker, reading its segment.
    auto eligible = [&](const PendingFetch& fetch, const PendingPartition& part) {
      return fetch.request_ns <= read.start_ns && fetch.started_reads == 0 &&
             same_process(fetch, read) && names_partition(part, read) &&
             part.fetch_offset >= read.segment_base_offset &&
             (next_base < 0 || part.fetch_offset < next_base) && !part.failure_taken;
    };
    bool waiting = false;
    for (auto it = bucket->open.begin(); it != bucket->open.end() && !waiting; ++it)
      if ((*it)->answered_ns == 0)
        for (const auto& part : (*it)->parts)
          waiting |= eligible(**it, part) && part.reads > 0 && part.read_done;
    if (!waiting) return std::nullopt;
    std::optional<Affinity> best;
    for (FetchIt fetch : bucket->answered) {
      if (best && best->fetch->arrival < fetch->arrival) continue;
      for (std::size_t i = 0; i < fetch->parts.size(); ++i) {
        const auto& part = fetch->parts[i];
        if (eligible(*fetch, part) && part.remote_answer && !part.storage_error && part.reads == 0)
          best = Affinity{fetch, i};
      }
    }
    return best;
  }

  // Pending fetches of the read's partition, ranked.
  std::optional<Affinity> match_ranked(const ObjectRead& read) {
    const Bucket* bucket = partition_bucket(read);
    if (!bucket) return std::nullopt;
    // Oldest first among the best ranked: a fetch no other thread is reading, and whose first
    // remote partition this is, before the others. Where no tier knows the partition, the fetch
    // offset nearest the GET's segment base first: a consumer at the log's end is a candidate
    // there too, and its fetch, waiting for new records, is often the oldest.
    const bool by_offset = read.segment_base_offset >= 0;
    // A fetch at or past a later segment's base reads that segment (or one after it): it takes
    // none of this GET's, though its offset, which a tier knows only to be remote, would make it
    // a candidate, often the oldest.
    const std::int64_t next_base = next_segment_base(read);
    std::optional<Affinity> best;
    int best_rank = -1;
    auto consider = [&](FetchIt fetch) {
      if (fetch->request_ns > read.start_ns || !same_process(*fetch, read)) return;
      for (std::size_t i = 0; i < fetch->parts.size(); ++i) {
        const auto& part = fetch->parts[i];
        if (!names_partition(part, read) || !before_answer(*fetch, part, read, false)) continue;
        if (by_offset && part.fetch_offset < read.segment_base_offset) continue;
        // A partition whose remote read already ended (in Kafka <= 4.1, one task per fetch), or
        // failed (a failed GET ends its task), takes no new task.
        const bool ended = part.read_done || part.failure_taken;
        if (ended && options.one_remote_partition_per_fetch) continue;
        if (next_base >= 0 && part.fetch_offset >= next_base) continue;
        const int rank = (fetch->reader_threads.empty() && fetch->started_reads == 0 ? 2 : 0) +
                         (part.first_remote ? 1 : 0);
        bool better = rank > best_rank;
        if (best && rank == best_rank) {
          const auto& best_part = best->fetch->parts[best->part];
          if (by_offset && part.tier_unknown && best_part.tier_unknown &&
              part.fetch_offset != best_part.fetch_offset)
            better = part.fetch_offset < best_part.fetch_offset;
          else
            better = fetch->arrival < best->fetch->arrival;
        }
        if (better) {
          best = Affinity{fetch, i};
          best_rank = rank;
        }
      }
    };
    // Answered ones: only those answered after the read started can take it (before_answer).
    for (auto it = bucket->answered.rbegin();
         it != bucket->answered.rend() && (*it)->answered_ns > read.start_ns; ++it)
      consider(*it);
    for (FetchIt fetch : bucket->open) {      // in arrival order: none after a best one is older
      if (fetch->answered_ns != 0) continue;  // a leftover: the answered list has it
      if (best_rank == 3 && fetch->arrival > best->fetch->arrival &&
          !(by_offset && best->fetch->parts[best->part].tier_unknown))
        break;
      consider(fetch);
    }
    return best;
  }

  // Whether an estimated read can be `fetch`'s: inside its window, and (once answered) the
  // response shows the broker read remotely for it. A fetch answered from the local log only, or
  // with nothing, made no GET (it would otherwise soak up FIFO matches).
  static bool estimate_window(const PendingFetch& fetch, const ObjectRead& read) {
    if (fetch.request_ns > read.start_ns || !same_process(fetch, read)) return false;
    if (fetch.answered_ns != 0 && read.end_ns > fetch.answered_ns) return false;
    if (!fetch.response_seen) return true;
    for (const auto& part : fetch.parts)
      if (part.remote_answer) return true;
    return false;
  }

  // The partition a read of `fetch` went to: the one the response filled from the remote tier
  // (Kafka ≤ 4.1 reads only the first eligible one), else the first eligible in request order.
  // With several remote partitions (Kafka 4.2), a second reader thread takes the next unread one.
  static std::size_t estimate_part(const PendingFetch& fetch) {
    const bool shared = !fetch.reader_threads.empty();
    std::optional<std::size_t> first;
    for (std::size_t i = 0; i < fetch.parts.size(); ++i) {
      const auto& part = fetch.parts[i];
      if (fetch.response_seen && !part.remote_answer) continue;
      if (!first) first = i;
      if (!shared || part.reads == 0) return i;
    }
    return first.value_or(0);
  }

  // The oldest fetch answered with remote data after `read` ended, in its window, that no read
  // went to yet.
  std::optional<Affinity> oldest_answered_unread(const ObjectRead& read) {
    for (FetchIt fetch = fetches.begin(); fetch != fetches.end(); ++fetch) {
      if (fetch->request_ns > read.start_ns) break;
      if (fetch->answered_ns == 0 || !estimate_window(*fetch, read)) continue;
      bool read_before = false;
      for (const auto& part : fetch->parts) read_before |= part.reads > 0;
      if (!read_before) return Affinity{fetch, estimate_part(*fetch)};
    }
    return std::nullopt;
  }

  // Estimated reads name no partition: the fetch the reader thread is serving, else the oldest
  // fetch in whose window the read lies and that no read went to yet (the reader pool is FIFO).
  std::optional<Affinity> match_estimated(const ObjectRead& read) {
    if (auto it = by_thread.find(read.thread_id); it != by_thread.end()) {
      const PendingFetch& tied = *it->second.fetch;
      if (estimate_window(tied, read)) {
        // The last fetch of a client that left is never answered, so its window never closes:
        // the broker still runs the task it queued, but after that the thread serves others. A
        // fetch that was answered with remote data after this cycle and has no cycle yet is
        // that evidence (without it, a scanner's last fetch took every later cycle of its thread).
        if (tied.answered_ns == 0 && tied.closed_ns != 0 && read.start_ns > tied.closed_ns) {
          if (auto starving = oldest_answered_unread(read)) return starving;
        }
        return it->second;
      }
    }
    std::optional<Affinity> unread_elsewhere, busy;
    for (FetchIt fetch = fetches.begin(); fetch != fetches.end(); ++fetch) {
      if (fetch->request_ns > read.start_ns) break;  // arrival order: the rest came later
      if (!estimate_window(*fetch, read)) continue;
      bool read_before = false;
      for (const auto& part : fetch->parts) read_before |= part.reads > 0;
      const Affinity a{fetch, estimate_part(*fetch)};
      if (!read_before) return a;
      if (fetch->reader_threads.empty()) {
        if (!unread_elsewhere) unread_elsewhere = a;
      } else if (!busy) {
        busy = a;
      }
    }
    return unread_elsewhere ? unread_elsewhere : busy;
  }

  // Decides held estimated reads that ended at least estimate_settle_ns before `now_ns`, in start
  // order (cycles of different connections complete out of order).
  void settle(std::uint64_t now_ns) {
    settle_failures(now_ns);
    settle_estimates(now_ns);
    settle_opaque(now_ns);
  }

  void settle_estimates(std::uint64_t now_ns) {
    if (estimates.empty()) return;
    std::vector<ObjectRead> ripe;
    std::erase_if(estimates, [&](const ObjectRead& r) {
      const bool done = now_ns == ~0ull || r.end_ns + options.estimate_settle_ns <= now_ns;
      if (done) ripe.push_back(r);
      return done;
    });
    std::stable_sort(ripe.begin(), ripe.end(), [](const ObjectRead& a, const ObjectRead& b) {
      return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns < b.end_ns;
    });
    for (const ObjectRead& r : ripe) on_read(r);
  }

  // Reads held for opaque client connections, decided once the cycles around them are answered.
  void settle_opaque(std::uint64_t now_ns) {
    if (!opaque.active()) return;
    opaque.settle(now_ns, [&](const ObjectRead& read, const std::string* peer) {
      Attributed out;
      out.read = &read;
      out.error = !read.succeeded();
      out.body_bytes = read.succeeded() ? read.body_bytes : 0;
      out.topic = read.topic.empty() ? read.topic_id : read.topic;
      out.partition = read.partition;
      std::string client;
      if (peer) {
        ++counters.reads_opaque_peer;
        client = "peer:" + *peer;
        out.client_id = client;
        out.peer = *peer;
        out.method = Method::kEstimated;
      } else {
        ++counters.reads_unattributed;
        out.client_id = kUnattributed;
        const bool exact = read.method == Method::kExact && !read.topic.empty();
        out.method = exact ? Method::kExact : Method::kEstimated;
      }
      sink.on_attributed(out);
    });
  }

  void on_read(const ObjectRead& read, std::optional<Affinity> at_start = std::nullopt) {
    const bool exact = read.method == Method::kExact && !read.topic.empty();
    if (exact) learn_segment(read);  // a GET whose request was not seen
    std::optional<Affinity> match = at_start;
    if (!match) match = exact ? match_exact(read) : match_estimated(read);
    if (!match && exact) match = match_unread_answer(read);
    if (!match && exact) match = match_crossed_answer(read);
    decide(read, exact, match);
  }

  // Reader threads take queued fetches oldest first, but their GETs complete in any order: a
  // GET matched when it completes could take an older fetch that an earlier, slower GET was
  // reading for, and leave that GET only fetches that arrived after it started (concurrent reads
  // of one partition). Matched when it starts, in start order, each GET takes the fetch its
  // thread took.
  void on_started(const ObjectRead& read) {
    if (read.method != Method::kExact || read.topic.empty()) return;
    learn_segment(read);
    std::optional<Affinity> match = take_retried(read);
    if (!match) match = match_exact(read);
    if (!match) return;
    if (started.size() >= options.max_pending) forget_started(started.begin());  // never completed
    ++match->fetch->started_reads;
    started[{read.start_ns, read.connection}] = {match->fetch->arrival, match->part,
                                                 read.thread_id,        read.segment_base_offset,
                                                 read.range_first,      read.range_last};
  }

  // A client retries a GET on a new connection when the kept-alive one turns out closed: the
  // same thread asks for the same object range again, and the first attempt never completes
  // (objstore counts them as one GET). The retry keeps the first attempt's fetch.
  std::optional<Affinity> take_retried(const ObjectRead& read) {
    for (auto it = started.begin(); it != started.end(); ++it) {
      const Started& s = it->second;
      if (s.thread_id != read.thread_id || s.segment != read.segment_base_offset ||
          s.range_first != read.range_first || s.range_last != read.range_last ||
          it->first.second == read.connection)
        continue;
      const std::size_t part = s.part;
      const std::optional<FetchIt> fetch = forget_started(it);
      if (!fetch || part >= (*fetch)->parts.size()) return std::nullopt;
      return Affinity{*fetch, part};
    }
    return std::nullopt;
  }

  // The match made when `read` started, while its fetch is still open to it, or crossed with it.
  std::optional<Affinity> take_started(const ObjectRead& read) {
    auto it = started.find({read.start_ns, read.connection});
    if (it == started.end()) return std::nullopt;
    const Started s = it->second;
    const std::optional<FetchIt> fetch = forget_started(it);
    if (!fetch || s.part >= (*fetch)->parts.size()) return std::nullopt;
    const PendingPartition& part = (*fetch)->parts[s.part];
    if (!before_answer(**fetch, part, read, /*continues_task=*/true) &&
        !crossed(*fetch, part, read))
      return std::nullopt;
    return Affinity{*fetch, s.part};
  }

  // The broker's request handlers may queue two fetches of a partition in the other order than
  // they arrived: the GET that started first was matched to the older fetch but carried the
  // newer one's data (or the other way round), so one of them is answered with remote data while
  // the GET matched to it still runs and none was counted for it, and the other, still waiting
  // for its data, has the GET that crossed it counted and none running. Keeping the match gives
  // each fetch one GET, as each client got one; matching it again would give it to a fetch that
  // has one, and start a chain of such errors among concurrent fetches of one offset. Without
  // such a partner the answer came from elsewhere (a cache in the broker's storage plugin, say),
  // and the GET is matched again.
  bool crossed(FetchIt fetch, const PendingPartition& part, const ObjectRead& read) const {
    if (!answered_unread(*fetch, part, read)) return false;
    const Bucket* bucket = partition_bucket(read);
    if (!bucket) return false;
    for (FetchIt other : bucket->open) {
      if (other == fetch || other->answered_ns != 0 || other->started_reads != 0 ||
          !same_process(*other, read))
        continue;
      for (const auto& p : other->parts)
        if (names_partition(p, read) && p.reads > 0 && !p.failure_taken &&
            p.last_end_ns <= fetch->answered_ns)
          return true;
    }
    return false;
  }

  std::optional<FetchIt> forget_started(decltype(started)::iterator it) {
    const auto fetch = by_arrival.find(it->second.arrival);
    started.erase(it);
    if (fetch == by_arrival.end()) return std::nullopt;  // finished meanwhile
    if (fetch->second->started_reads > 0) --fetch->second->started_reads;
    return fetch->second;
  }

  // Holds a failed exact GET unless it continues its thread's task (a manifest, then a failing
  // chunk): which fetch it failed for shows in the answers that follow it.
  void on_failed(const ObjectRead& read) {
    if (auto a = match_thread(read)) {
      decide(read, true, a);
      return;
    }
    by_thread.erase(read.thread_id);  // a failed read ends its thread's task
    HeldFailure held{read, std::string(read.object_key), std::string(read.topic),
                     std::string(read.topic_id)};
    failures.push_back(std::move(held));
  }

  // Decides the held failed GETs that ended estimate_settle_ns before `now_ns`. A failed remote
  // read ends its task and the broker answers that partition with KAFKA_STORAGE_ERROR: each such
  // answer had one failed GET, inside its fetch's window (request ≤ GET start, GET end ≤ answer;
  // GET start ≤ answer when the failure was only known late). Which reader thread takes which
  // queued task, and which GET ends or is answered first, does not follow arrival: by arrival
  // order, or by the first answer after each GET, a client retrying a failed read without pause
  // took the GETs of others. So the held GETs and the storage errors not matched yet are matched
  // as a whole (a maximum matching: then every client gets as many failed GETs as it had storage
  // errors), and the ripe GETs keep theirs; a GET no storage error takes is ranked as any read.
  void settle_failures(std::uint64_t now_ns) {
    if (failures.empty()) return;
    bool any_ripe = false;
    for (const HeldFailure& f : failures)
      any_ripe |= now_ns == ~0ull || f.read.end_ns + options.estimate_settle_ns <= now_ns;
    if (!any_ripe) return;
    for (HeldFailure& f : failures) {  // views into the held copies (moved since they were held)
      f.read.object_key = f.key;
      f.read.topic = f.topic;
      f.read.topic_id = f.topic_id;
    }
    std::vector<std::optional<Affinity>> matched = match_failures();
    std::vector<std::pair<HeldFailure, std::optional<Affinity>>> ripe;
    std::vector<HeldFailure> kept;
    for (std::size_t i = 0; i < failures.size(); ++i) {
      HeldFailure& f = failures[i];
      if (now_ns == ~0ull || f.read.end_ns + options.estimate_settle_ns <= now_ns)
        ripe.emplace_back(std::move(f), matched[i]);
      else
        kept.push_back(std::move(f));
    }
    failures = std::move(kept);
    std::stable_sort(ripe.begin(), ripe.end(), [](const auto& a, const auto& b) {
      return a.first.read.end_ns < b.first.read.end_ns;
    });
    for (auto& [f, match] : ripe)  // before any ranked GET sees these tasks as open
      if (match) match->fetch->parts[match->part].failure_taken = true;
    for (auto& [f, match] : ripe) {
      f.read.object_key = f.key;
      f.read.topic = f.topic;
      f.read.topic_id = f.topic_id;
      if (!match) match = match_ranked(f.read);
      decide(f.read, true, match, /*tie_thread=*/false);  // its task ended with it
    }
  }

  // A maximum matching of held failed GETs to the answers not matched yet, per partition: first
  // storage errors (the GET ended before the answer), then the fetches answered without their
  // remote data (remote.fetch.max.wait.ms passed: the read, and its failure, went on after the
  // answer; the GET started before it). Greedy, which is optimal for this order structure:
  // answers by request time, latest first; each takes, of the GETs started after its request,
  // the one due last before its answer (one due earlier fits every answer this one fits).
  std::vector<std::optional<Affinity>> match_failures() {
    std::vector<std::optional<Affinity>> out(failures.size());
    std::unordered_map<PartitionKey, std::vector<std::size_t>, PartitionKeyHash, PartitionKeyEqual>
        by_key;
    for (std::size_t i = 0; i < failures.size(); ++i) {
      const ObjectRead& r = failures[i].read;
      by_key[PartitionKey{std::string(r.topic.empty() ? r.topic_id : r.topic), r.partition}]
          .push_back(i);
    }
    for (auto& [key, reads] : by_key) {
      const ObjectRead& first = failures[reads.front()].read;
      const Bucket* bucket = partition_bucket(first);
      if (!bucket) continue;
      std::vector<Affinity> errors, timeouts;
      for (FetchIt fetch : bucket->answered) {
        for (std::size_t i = 0; i < fetch->parts.size(); ++i) {
          const auto& part = fetch->parts[i];
          if (part.failure_taken || !part.answered || !names_partition(part, first)) continue;
          if (part.storage_error)
            errors.push_back({fetch, i});
          else if (!part.remote_answer && part.first_remote)
            timeouts.push_back({fetch, i});
        }
      }
      std::sort(reads.begin(), reads.end(), [&](std::size_t a, std::size_t b) {
        return failures[a].read.start_ns > failures[b].read.start_ns;
      });
      // A GET failed on its own ends before the storage error; one known late only started.
      greedy_match(errors, reads, out,
                   [](const ObjectRead& r) { return r.status > 0 ? r.end_ns : r.start_ns; });
      greedy_match(timeouts, reads, out, [](const ObjectRead& r) { return r.start_ns; });
    }
    return out;
  }

  template <typename Due>
  void greedy_match(std::vector<Affinity>& answers, const std::vector<std::size_t>& reads,
                    std::vector<std::optional<Affinity>>& out, Due due) {
    std::sort(answers.begin(), answers.end(), [](const Affinity& a, const Affinity& b) {
      return a.fetch->request_ns > b.fetch->request_ns;
    });
    std::multimap<std::uint64_t, std::size_t> open;  // GETs started after the request, by due
    std::size_t next = 0;
    for (const Affinity& answer : answers) {
      const PendingFetch& fetch = *answer.fetch;
      for (; next < reads.size() && failures[reads[next]].read.start_ns >= fetch.request_ns;
           ++next) {
        if (!out[reads[next]]) open.emplace(due(failures[reads[next]].read), reads[next]);
      }
      auto it = open.upper_bound(fetch.answered_ns);
      while (it != open.begin()) {  // of a GET in this fetch's segment or a later one
        --it;
        const ObjectRead& r = failures[it->second].read;
        if (!same_process(fetch, r)) continue;
        if (r.segment_base_offset < 0 ||
            fetch.parts[answer.part].fetch_offset >= r.segment_base_offset) {
          out[it->second] = answer;
          open.erase(it);
          break;
        }
      }
    }
  }

  void decide(const ObjectRead& read, bool exact, std::optional<Affinity> match,
              bool tie_thread = true) {
    // A read proves a remote partition on a fetch already answered: fine for estimated reads that
    // ended before the answer (see estimate_window).

    Attributed out;
    out.read = &read;
    out.method = exact ? Method::kExact : Method::kEstimated;
    out.error = !read.succeeded();
    out.body_bytes = read.succeeded() ? read.body_bytes : 0;
    if (!match && opaque.active()) {  // an opaque client connection's cycle may have caused it
      opaque.hold(read);
      return;
    }
    if (!match) {
      ++counters.reads_unattributed;
      out.client_id = kUnattributed;
      out.topic = read.topic;
      out.partition = read.partition;
      sink.on_attributed(out);
      return;
    }
    PendingFetch& fetch = *match->fetch;
    PendingPartition& part = fetch.parts[match->part];
    if (part.topic.empty() && exact) part.topic = std::string(read.topic);  // the key names it
    if (tie_thread) {
      auto tied = by_thread.find(read.thread_id);
      if (tied == by_thread.end() || tied->second.fetch != match->fetch) {
        if (tied != by_thread.end()) std::erase(tied->second.fetch->reader_threads, read.thread_id);
        tied = by_thread.insert_or_assign(read.thread_id, *match).first;
        fetch.reader_threads.push_back(read.thread_id);
      } else {
        tied->second.part = match->part;
      }
      tied->second.segment = read.segment_base_offset;
      tied->second.range_last = read.range_last;
    }
    if (part.reads == 0 || read.start_ns < part.first_start_ns) part.first_start_ns = read.start_ns;
    part.last_end_ns = std::max(part.last_end_ns, read.end_ns);
    ++part.reads;
    part.bytes += out.body_bytes;
    if (out.error) part.failure_taken = true;
    if (!exact) part.method = Method::kEstimated;
    ++(exact ? counters.reads_exact : counters.reads_estimated);

    out.client_id = fetch.client_id;
    out.peer = fetch.peer;
    out.topic = part.topic.empty() ? std::string_view(part.topic_id) : part.topic;
    out.partition = part.partition;
    out.fetch_offset = part.fetch_offset;
    out.partition_max_bytes = part.max_bytes;
    sink.on_attributed(out);
  }
};

Attributor::Attributor(Sink& sink, const LocalTier* tier, Options options)
    : impl_(std::make_unique<Impl>(sink, tier, options)) {}
Attributor::~Attributor() = default;

void Attributor::set_peer(std::uint64_t connection, std::string_view peer) {
  impl_->peers[connection] = std::string(peer);
}

void Attributor::set_process(std::uint64_t connection, std::uint32_t process) {
  if (process != 0) impl_->processes[connection] = process;
}

void Attributor::on_request(const kafka::Exchange& request) {
  if (request.api_key != kafka::api::kFetch || !request.body_decoded) return;
  impl_->latest_ns = std::max(impl_->latest_ns, request.request_time_ns);
  if (impl_->find(request.connection, request.correlation_id) != impl_->fetches.end()) return;
  impl_->track(request);
}

void Attributor::on_exchange(const kafka::Exchange& exchange) {
  if (exchange.api_key != kafka::api::kFetch) return;
  impl_->latest_ns = std::max(impl_->latest_ns, exchange.request_time_ns);
  FetchIt fetch = impl_->find(exchange.connection, exchange.correlation_id);
  if (fetch == impl_->fetches.end()) return;
  if (exchange.response_seen) {
    impl_->record_response(*fetch, exchange);
    if (impl_->options.answered_retain_ns == 0) {
      impl_->finish(fetch);
      return;
    }
    // Kept for reads known late (estimated cycles, failed GETs), matched by time; no longer found
    // by its correlation id (the client may reuse it).
    fetch->answered_ns = std::max<std::uint64_t>(
        exchange.response_start_ns ? exchange.response_start_ns : impl_->latest_ns, 1);
    impl_->unindex_request(fetch);
    impl_->index_answered(fetch);
    impl_->due_at(*fetch);
    impl_->settle(impl_->latest_ns);
  } else if (fetch->closed_ns == 0) {
    // Unanswered (the client left, or the response was lost): the broker may still be reading
    // for it, so it stays matchable for the grace period.
    fetch->closed_ns = std::max<std::uint64_t>(impl_->latest_ns, 1);
    impl_->due_at(*fetch);
  }
}

void Attributor::on_object_request(const ObjectRead& read) {
  impl_->latest_ns = std::max(impl_->latest_ns, read.start_ns);
  impl_->on_started(read);
}

void Attributor::on_object_read(const ObjectRead& read) {
  impl_->latest_ns = std::max(impl_->latest_ns, read.end_ns);
  const std::optional<Impl::Affinity> at_start = impl_->take_started(read);
  // Exact reads (also a response whose request was not seen, matched at once as before) are
  // decided now; estimated cycles arrive late and out of order, so they wait to be settled.
  // A failed GET ends its task: which fetch it failed for shows in the answers that follow.
  if (read.method == Method::kExact && !read.succeeded() && !read.topic.empty()) {
    impl_->on_failed(read);
  } else if (read.method == Method::kExact) {
    impl_->on_read(read, at_start);
  } else {
    ObjectRead held = read;  // estimated reads carry no key; drop the views, they do not outlive us
    held.object_key = held.topic = held.topic_id = {};
    held.partition = -1;
    held.segment_base_offset = -1;
    impl_->estimates.push_back(held);
  }
  impl_->settle(impl_->latest_ns);
}

void Attributor::expect_estimates() {}

void Attributor::on_opaque_open(std::uint64_t connection, std::string_view peer,
                                std::uint64_t request_ns, std::uint32_t process) {
  impl_->latest_ns = std::max(impl_->latest_ns, request_ns);
  impl_->opaque.open(connection, peer, request_ns, process);
}

void Attributor::on_opaque_cycle(const OpaqueCycle& cycle) {
  impl_->latest_ns = std::max({impl_->latest_ns, cycle.request_ns, cycle.response_end_ns});
  impl_->opaque.cycle(cycle);
  impl_->settle(impl_->latest_ns);
}

void Attributor::forget_opaque(std::uint64_t connection) {
  impl_->opaque.forget(connection);
}

void Attributor::close_connection(std::uint64_t connection, std::uint64_t now_ns) {
  for (auto& fetch : impl_->fetches) {
    if (fetch.connection == connection && fetch.closed_ns == 0) {
      fetch.closed_ns = std::max<std::uint64_t>(now_ns, 1);
      impl_->due_at(fetch);
    }
  }
  impl_->peers.erase(connection);
  impl_->processes.erase(connection);
}

void Attributor::expire(std::uint64_t now_ns) {
  auto& impl = *impl_;
  impl.settle(now_ns == ~0ull ? now_ns : std::max(now_ns, impl.latest_ns));
  if (now_ns == ~0ull) {
    while (!impl.fetches.empty()) impl.finish(impl.fetches.begin());
    impl.due = {};
    impl.started.clear();
    return;
  }
  // Finishes the fetches whose client closed more than closed_grace_ns ago, answered more than
  // answered_retain_ns ago, or pending longer than max_pending_ns (their response was lost), in
  // arrival order.
  std::vector<FetchIt> ripe;
  for (auto it = impl.fetches.begin();  // pending too long: the oldest requests, at the front
       it != impl.fetches.end() && now_ns > impl.stale_at(*it); ++it)
    ripe.push_back(it);
  while (!impl.due.empty() && now_ns > impl.due.top().first) {
    auto found = impl.by_arrival.find(impl.due.top().second);
    impl.due.pop();
    if (found != impl.by_arrival.end() && now_ns > impl.expiry_of(*found->second))
      ripe.push_back(found->second);
  }
  std::sort(ripe.begin(), ripe.end(), [](FetchIt a, FetchIt b) { return a->arrival < b->arrival; });
  ripe.erase(std::unique(ripe.begin(), ripe.end()), ripe.end());
  for (FetchIt it : ripe) impl.finish(it);
  // GETs matched at their start whose fetch finished before they completed (their completion
  // lost, or never coming): nothing is left to keep them for, and retries look through these.
  std::erase_if(impl.started,
                [&](const auto& entry) { return !impl.by_arrival.contains(entry.second.arrival); });
}

const Counters& Attributor::counters() const {
  return impl_->counters;
}
std::size_t Attributor::pending() const {
  return impl_->fetches.size();
}

}  // namespace fc::attribution
