#include "sensors/sensors.h"

#include <algorithm>
#include <deque>
#include <map>
#include <mutex>
#include <unordered_map>

namespace fc::sensors {

std::string_view method_name(Method method) {
  return method == Method::kEstimated ? "estimated" : "exact";
}

void Counters::add(const Counters& other) {
  remote_bytes += other.remote_bytes;
  requests += other.requests;
  errors += other.errors;
  object_bytes_read += other.object_bytes_read;
  bytes_delivered += other.bytes_delivered;
  latency_count += other.latency_count;
  latency_sum_seconds += other.latency_sum_seconds;
  for (std::size_t i = 0; i < latency_buckets.size(); ++i) {
    latency_buckets[i] += other.latency_buckets[i];
  }
  cost_api += other.cost_api;
  cost_egress += other.cost_egress;
}

double Counters::read_amplification() const {
  if (bytes_delivered == 0) return 0;
  return static_cast<double>(object_bytes_read) / static_cast<double>(bytes_delivered);
}

namespace {

constexpr std::uint32_t kNone = std::numeric_limits<std::uint32_t>::max();

struct Key {
  std::string_view client_id;
  std::string_view peer_ip;
  std::string_view topic;
  std::int32_t partition;
  Method method;
  bool operator==(const Key&) const = default;
};

struct KeyHash {
  std::size_t operator()(const Key& key) const {
    std::size_t h = std::hash<std::string_view>{}(key.client_id);
    h ^= std::hash<std::string_view>{}(key.peer_ip) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= std::hash<std::string_view>{}(key.topic) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= (static_cast<std::size_t>(static_cast<std::uint32_t>(key.partition)) << 1) ^
         static_cast<std::size_t>(key.method);
    return h;
  }
};

// One live sensor. Slots live in a deque (stable addresses), so the index's string_views into
// `labels` stay valid until the slot is reused.
struct Slot {
  std::string labels;  // client_id, peer_ip, then topic
  std::uint16_t client_length = 0;
  std::uint8_t peer_length = 0;
  Method method = Method::kExact;
  bool in_use = false;
  std::int32_t partition = kNoPartition;
  std::uint32_t lru_prev = kNone;  // towards most recently used
  std::uint32_t lru_next = kNone;  // towards least recently used
  std::uint64_t last_update_ns = 0;
  Counters counters;

  std::string_view client_id() const { return std::string_view(labels).substr(0, client_length); }
  std::string_view peer_ip() const {
    return std::string_view(labels).substr(client_length, peer_length);
  }
  std::string_view topic() const {
    return std::string_view(labels).substr(client_length + peer_length);
  }
  Key key() const { return Key{client_id(), peer_ip(), topic(), partition, method}; }
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct OtherSensor {
  Counters counters;
  std::uint64_t last_update_ns = 0;
};

std::size_t heap_bytes_of(const std::string& s) {
  // libstdc++ keeps up to 15 chars inline.
  return s.capacity() > 15 ? s.capacity() + 1 : 0;
}

}  // namespace

struct SensorTable::Impl {
  Config config;
  mutable std::mutex mutex;
  std::deque<Slot> slots;
  std::vector<std::uint32_t> free_slots;
  std::unordered_map<Key, std::uint32_t, KeyHash> index;
  std::uint32_t lru_head = kNone;  // most recently used
  std::uint32_t lru_tail = kNone;  // least recently used
  // "__other__" per topic, one map per method.
  std::array<std::unordered_map<std::string, OtherSensor, StringHash, std::equal_to<>>, 2> other;
  std::unordered_map<std::string, std::string, StringHash, std::equal_to<>> groups;
  std::deque<std::string> group_order;  // insertion order, to bound `groups`
  Stats stats;
  std::size_t label_heap_bytes = 0;
  std::string client_scratch;
  std::string topic_scratch;

  explicit Impl(Config c) : config(std::move(c)) {
    if (config.max_sensors == 0) config.max_sensors = 1;
    if (config.latency_buckets_seconds.size() > kMaxLatencyBuckets) {
      config.latency_buckets_seconds.resize(kMaxLatencyBuckets);
    }
    std::sort(config.latency_buckets_seconds.begin(), config.latency_buckets_seconds.end());
    index.reserve(std::min<std::size_t>(config.max_sensors, 1 << 16));
  }

  void lru_unlink(std::uint32_t i) {
    Slot& s = slots[i];
    if (s.lru_prev != kNone)
      slots[s.lru_prev].lru_next = s.lru_next;
    else
      lru_head = s.lru_next;
    if (s.lru_next != kNone)
      slots[s.lru_next].lru_prev = s.lru_prev;
    else
      lru_tail = s.lru_prev;
    s.lru_prev = s.lru_next = kNone;
  }

  void lru_push_front(std::uint32_t i) {
    Slot& s = slots[i];
    s.lru_prev = kNone;
    s.lru_next = lru_head;
    if (lru_head != kNone) slots[lru_head].lru_prev = i;
    lru_head = i;
    if (lru_tail == kNone) lru_tail = i;
  }

  OtherSensor& other_for(std::string_view topic, Method method) {
    auto& map = other[static_cast<std::size_t>(method)];
    auto it = map.find(topic);
    if (it != map.end()) return it->second;
    if (map.size() >= config.max_other_topics) {
      auto overflow = map.find(kOtherTopic);
      if (overflow != map.end()) return overflow->second;
      topic = kOtherTopic;
    }
    return map.emplace(std::string(topic), OtherSensor{}).first->second;
  }

  // Folds a live sensor into "__other__" (same topic) and frees its slot.
  void fold_and_free(std::uint32_t i) {
    Slot& s = slots[i];
    OtherSensor& target = other_for(s.topic(), s.method);
    target.counters.add(s.counters);
    target.last_update_ns = std::max(target.last_update_ns, s.last_update_ns);
    index.erase(s.key());
    lru_unlink(i);
    s.in_use = false;
    s.counters = Counters{};
    free_slots.push_back(i);
  }

  std::uint32_t allocate_slot() {
    if (!free_slots.empty()) {
      std::uint32_t i = free_slots.back();
      free_slots.pop_back();
      return i;
    }
    slots.emplace_back();
    return static_cast<std::uint32_t>(slots.size() - 1);
  }

  void add_observation(Counters& c, const Observation& o) {
    c.remote_bytes += o.remote_bytes;
    c.requests += o.requests;
    c.errors += o.errors;
    c.object_bytes_read += o.object_bytes_read;
    c.bytes_delivered += o.bytes_delivered;
    c.cost_api += o.cost_api;
    c.cost_egress += o.cost_egress;
    if (o.latency_seconds >= 0) {
      const auto& bounds = config.latency_buckets_seconds;
      std::size_t bucket = 0;
      while (bucket < bounds.size() && o.latency_seconds > bounds[bucket]) ++bucket;
      c.latency_buckets[bucket] += 1;
      c.latency_count += 1;
      c.latency_sum_seconds += o.latency_seconds;
    }
  }

  std::uint32_t create(const Key& key, std::uint64_t now_ns) {
    if (index.size() >= config.max_sensors && lru_tail != kNone) {
      fold_and_free(lru_tail);
      ++stats.evictions;
    }
    const std::uint32_t i = allocate_slot();
    Slot& s = slots[i];
    label_heap_bytes -= heap_bytes_of(s.labels);
    s.labels.assign(key.client_id);
    s.labels.append(key.peer_ip);
    s.labels.append(key.topic);
    label_heap_bytes += heap_bytes_of(s.labels);
    s.client_length = static_cast<std::uint16_t>(key.client_id.size());
    s.peer_length = static_cast<std::uint8_t>(key.peer_ip.size());
    s.partition = key.partition;
    s.method = key.method;
    s.in_use = true;
    s.last_update_ns = now_ns;
    index.emplace(s.key(), i);
    lru_push_front(i);
    ++stats.sensors_created;
    return i;
  }

  std::size_t expire_tail(std::uint64_t now_ns, std::size_t limit) {
    const auto idle = static_cast<std::uint64_t>(config.idle_expiry.count());
    std::size_t expired = 0;
    while (expired < limit && lru_tail != kNone && now_ns > idle &&
           slots[lru_tail].last_update_ns < now_ns - idle) {
      fold_and_free(lru_tail);
      ++expired;
    }
    stats.expirations += expired;
    return expired;
  }
};

SensorTable::SensorTable(Config config) : impl_(std::make_unique<Impl>(std::move(config))) {}
SensorTable::~SensorTable() = default;

const Config& SensorTable::config() const {
  return impl_->config;
}

void SensorTable::record(const Observation& o) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  std::string_view client = sanitize_label_into(o.client_id, m.client_scratch);
  std::string_view topic = sanitize_label_into(o.topic, m.topic_scratch);
  if (client.data() != o.client_id.data() && client != o.client_id) ++m.stats.sanitized_labels;
  if (topic.data() != o.topic.data() && topic != o.topic) ++m.stats.sanitized_labels;
  // An address is at most 45 characters (IPv6 with an IPv4 tail); anything longer is not one.
  const std::string_view peer = o.peer_ip.size() <= 45 ? o.peer_ip : std::string_view();
  const Key key{client, peer, topic, m.config.partition_label ? o.partition : kNoPartition,
                o.method};
  std::uint32_t i;
  auto it = m.index.find(key);
  if (it != m.index.end()) {
    i = it->second;
    if (m.lru_head != i) {  // a busy client hits its sensor repeatedly: skip the relink
      m.lru_unlink(i);
      m.lru_push_front(i);
    }
  } else {
    i = m.create(key, o.now_ns);
  }
  Slot& s = m.slots[i];
  s.last_update_ns = std::max(s.last_update_ns, o.now_ns);
  m.add_observation(s.counters, o);
  // Amortized idle expiry: the LRU tail is the only candidate worth checking.
  m.expire_tail(o.now_ns, 2);
}

std::size_t SensorTable::expire_idle(std::uint64_t now_ns) {
  std::lock_guard lock(impl_->mutex);
  return impl_->expire_tail(now_ns, std::numeric_limits<std::size_t>::max());
}

void SensorTable::set_group(std::string_view client_id, std::string_view group_id) {
  Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  std::string client = sanitize_label(client_id);
  std::string group = sanitize_label(group_id);
  auto it = m.groups.find(client);
  if (it != m.groups.end()) {
    it->second = std::move(group);
    return;
  }
  while (m.groups.size() >= std::max<std::size_t>(m.config.max_groups, 1) &&
         !m.group_order.empty()) {
    m.groups.erase(m.group_order.front());
    m.group_order.pop_front();
  }
  m.group_order.push_back(client);
  m.groups.emplace(std::move(client), std::move(group));
}

void SensorTable::for_each(const std::function<void(const SensorView&)>& visit) const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  for (std::uint32_t i = m.lru_head; i != kNone; i = m.slots[i].lru_next) {
    const Slot& s = m.slots[i];
    visit(SensorView{s.client_id(), s.peer_ip(), s.topic(), s.partition, s.method, s.counters,
                     s.last_update_ns, false});
  }
  for (std::size_t method = 0; method < m.other.size(); ++method) {
    for (const auto& [topic, sensor] : m.other[method]) {
      visit(SensorView{kOtherClient,
                       {},
                       topic,
                       kNoPartition,
                       static_cast<Method>(method),
                       sensor.counters,
                       sensor.last_update_ns,
                       true});
    }
  }
}

void SensorTable::for_each_group(
    const std::function<void(std::string_view, std::string_view)>& visit) const {
  std::lock_guard lock(impl_->mutex);
  for (const auto& [client, group] : impl_->groups) visit(client, group);
}

SensorView Snapshot::view(const Row& r) const {
  const std::string_view all(labels);
  return SensorView{all.substr(r.labels_at, r.client_length),
                    all.substr(r.labels_at + r.client_length, r.peer_length),
                    all.substr(r.labels_at + r.client_length + r.peer_length, r.topic_length),
                    r.partition,
                    r.method,
                    r.counters,
                    r.last_update_ns,
                    r.folded};
}

void SensorTable::snapshot(Snapshot& into) const {
  into.labels.clear();
  into.rows.clear();
  into.groups.clear();
  into.latency_buckets_seconds = impl_->config.latency_buckets_seconds;
  into.stats = stats();  // its own short lock; the counts may differ from the rows by a record
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  into.rows.reserve(m.index.size() + m.other[0].size() + m.other[1].size());
  auto add = [&](std::string_view client, std::string_view peer, std::string_view topic,
                 std::int32_t partition, Method method, bool folded, std::uint64_t last_update_ns,
                 const Counters& counters) {
    Snapshot::Row& r = into.rows.emplace_back();
    r.labels_at = into.labels.size();
    // Labels are sanitized and capped at kMaxLabelBytes, addresses at 45 bytes: they fit.
    r.client_length = static_cast<std::uint16_t>(client.size());
    r.peer_length = static_cast<std::uint16_t>(peer.size());
    r.topic_length = static_cast<std::uint16_t>(topic.size());
    into.labels.append(client).append(peer).append(topic);
    r.partition = partition;
    r.method = method;
    r.folded = folded;
    r.last_update_ns = last_update_ns;
    r.counters = counters;
  };
  for (std::uint32_t i = m.lru_head; i != kNone; i = m.slots[i].lru_next) {
    const Slot& s = m.slots[i];
    add(s.client_id(), s.peer_ip(), s.topic(), s.partition, s.method, false, s.last_update_ns,
        s.counters);
  }
  for (std::size_t method = 0; method < m.other.size(); ++method)
    for (const auto& [topic, sensor] : m.other[method])
      add(kOtherClient, {}, topic, kNoPartition, static_cast<Method>(method), true,
          sensor.last_update_ns, sensor.counters);
  into.groups.reserve(m.groups.size());
  for (const auto& [client, group] : m.groups) {
    Snapshot::Group& g = into.groups.emplace_back();
    g.labels_at = into.labels.size();
    g.client_length = static_cast<std::uint16_t>(client.size());
    g.group_length = static_cast<std::uint16_t>(group.size());
    into.labels.append(client).append(group);
  }
}

Counters SensorTable::totals() const {
  Counters sum;
  for_each([&](const SensorView& view) { sum.add(view.counters); });
  return sum;
}

Stats SensorTable::stats() const {
  const Impl& m = *impl_;
  std::lock_guard lock(m.mutex);
  Stats stats = m.stats;
  stats.live_sensors = m.index.size();
  stats.other_sensors = m.other[0].size() + m.other[1].size();
  stats.groups = m.groups.size();
  // Slots + label strings + hash index nodes and buckets (libstdc++ node: next pointer, value,
  // cached hash) + the "__other__" maps (approximate).
  constexpr std::size_t kIndexNodeBytes = sizeof(void*) + sizeof(Key) + 8 + sizeof(std::size_t);
  constexpr std::size_t kOtherNodeBytes =
      sizeof(void*) + sizeof(std::string) + sizeof(OtherSensor) + sizeof(std::size_t);
  stats.approx_memory_bytes =
      m.slots.size() * sizeof(Slot) + m.label_heap_bytes + m.index.size() * kIndexNodeBytes +
      m.index.bucket_count() * sizeof(void*) + stats.other_sensors * kOtherNodeBytes;
  return stats;
}

}  // namespace fc::sensors
