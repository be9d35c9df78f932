#include "tier/tier.h"

#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

namespace fc::tier {
namespace {

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool is_base64url(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

struct PartitionState {
  std::optional<std::int64_t> local_log_start;
  std::size_t segments = 0;
  std::string topic_id;
  std::string log_dir;
};

using TopicMap = std::unordered_map<std::string, std::map<std::int32_t, PartitionState>, StringHash,
                                    std::equal_to<>>;

// Reads one partition dir; nullopt when it does not exist (any more).
std::optional<PartitionState> scan_partition_dir(const std::string& log_dir,
                                                 const std::string& dir_name) {
  const std::string path = log_dir + "/" + dir_name;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return std::nullopt;
  PartitionState state;
  state.log_dir = log_dir;
  bool has_metadata = false;
  while (dirent* entry = readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (auto base = parse_segment_file_name(name)) {
      ++state.segments;
      if (!state.local_log_start || *base < *state.local_log_start) state.local_log_start = base;
    } else if (name == "partition.metadata") {
      has_metadata = true;
    }
  }
  closedir(dir);
  if (has_metadata) {
    std::ifstream in(path + "/partition.metadata");
    std::ostringstream text;
    text << in.rdbuf();
    if (auto id = parse_partition_metadata(text.str())) state.topic_id = *id;
  }
  return state;
}

// Child dir names of a log dir that look like partition dirs; nullopt when unreadable.
std::optional<std::vector<std::string>> list_partition_dirs(const std::string& log_dir) {
  DIR* dir = opendir(log_dir.c_str());
  if (dir == nullptr) return std::nullopt;
  std::vector<std::string> names;
  while (dirent* entry = readdir(dir)) {
    if (entry->d_type != DT_DIR && entry->d_type != DT_UNKNOWN) continue;
    if (parse_partition_dir_name(entry->d_name)) names.emplace_back(entry->d_name);
  }
  closedir(dir);
  return names;
}

constexpr std::uint32_t kLogDirMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                      IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;
// A partition dir's watch sees names come and go (segments, Kafka's renames of
// partition.metadata.tmp). It wants IN_CLOSE_WRITE only until partition.metadata has given the
// topic id (a writer that fills the file in place): a watch on any event of the dir's files
// makes the kernel look up the parent on every read and sendfile of a segment in it
// (__fsnotify_parent), about 0.5% of a busy broker's CPU.
constexpr std::uint32_t kPartitionDirMask = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO |
                                            IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;
constexpr std::uint32_t kPartitionDirAwaitingIdMask = kPartitionDirMask | IN_CLOSE_WRITE;

}  // namespace

std::optional<std::pair<std::string, std::int32_t>> parse_partition_dir_name(
    std::string_view name) {
  const auto dash = name.rfind('-');
  if (dash == std::string_view::npos || dash == 0) return std::nullopt;
  const std::string_view digits = name.substr(dash + 1);
  // Digits only: "orders-1.<uuid>-delete" ends in "delete", so deleted, future and stray dirs
  // never parse. Partitions fit in int32 (at most 10 digits).
  if (!all_digits(digits) || digits.size() > 10) return std::nullopt;
  std::int64_t partition = 0;
  std::from_chars(digits.data(), digits.data() + digits.size(), partition);
  if (partition > INT32_MAX) return std::nullopt;
  return std::make_pair(std::string(name.substr(0, dash)), static_cast<std::int32_t>(partition));
}

std::optional<std::int64_t> parse_segment_file_name(std::string_view name) {
  if (name.size() != 24 || !name.ends_with(".log")) return std::nullopt;
  const std::string_view digits = name.substr(0, 20);
  if (!all_digits(digits)) return std::nullopt;
  std::int64_t value = 0;
  // from_chars reports out-of-range (> INT64_MAX) instead of throwing.
  auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  return value;
}

std::optional<std::string> parse_partition_metadata(std::string_view text) {
  while (!text.empty()) {
    const auto eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    line = trim(line);
    constexpr std::string_view kKey = "topic_id:";
    if (!line.starts_with(kKey)) continue;
    const std::string_view value = trim(line.substr(kKey.size()));
    if (value.size() == 22 && std::all_of(value.begin(), value.end(), is_base64url)) {
      return std::string(value);
    }
    return std::nullopt;
  }
  return std::nullopt;
}

struct LocalTierMap::Impl {
  Options options;
  mutable std::shared_mutex mutex;
  TopicMap topics;
  std::unordered_map<std::string, std::string, StringHash, std::equal_to<>> topic_by_id;
  Stats stats;  // its partitions kept as `topics` changes: the metrics read it every scrape

  std::thread watcher;
  std::atomic<bool> stopping{false};
  // Log dirs set while the watcher runs, for it to take up (under `mutex`): it scans them on its
  // own thread, so that the caller (the daemon's capture loop) never waits for a broker's
  // thousands of partition dirs.
  std::optional<std::vector<std::string>> next_log_dirs;
  int inotify_fd = -1;
  int wake_fd = -1;
  struct Watch {
    std::string path;
    std::size_t log_dir_index;
    std::string partition_dir;  // empty for a log dir watch
    bool awaiting_id = false;   // partition dir watched for IN_CLOSE_WRITE of partition.metadata
  };
  std::unordered_map<int, Watch> watches;  // watcher thread only
  // Partition dirs watched, by path (watcher thread only): the periodic rescan adds watches for
  // the dirs it finds without one, and leaves the others be (20,000 inotify_add_watch calls took
  // more than the rescan itself).
  std::unordered_map<std::string, int> watched_dirs;

  // Partition dirs as the last full scan found them, by log dir and name. A rescan of 20,000
  // partition dirs read every one (ten calls each: its entries, its partition.metadata) in
  // 562-755 ms of CPU, every log_dirs_rescan_seconds: a dir whose inode and modification time are
  // as they were keeps its entry in the map, one stat each. Only a time over a second older than
  // that scan's start tells: a change in the same clock tick as the read would leave it as it
  // was. A dir whose topic id is not known yet is read again (partition.metadata written in place
  // changes the file, not the dir). The map's entry, not a copy: it is as new (an inotify event
  // reads the dir again), and copies doubled the tier's memory (9 MiB more for 20,000).
  struct ScannedDir {
    ino_t inode = 0;
    timespec modified{};
  };
  std::mutex scan_mutex;  // one full scan at a time (rescan() may run beside the watcher's)
  std::unordered_map<std::string, std::unordered_map<std::string, ScannedDir>>
      scanned;                                                           // under scan_mutex
  std::optional<std::chrono::system_clock::time_point> last_scan_start;  // under scan_mutex

  explicit Impl(Options o) : options(std::move(o)) {}

  // A dir the last full scan found, unchanged since (ScannedDir): its entry in the map; else
  // nullopt.
  std::optional<PartitionState> unchanged(const std::string& log_dir, const std::string& name,
                                          const std::pair<std::string, std::int32_t>& partition,
                                          const struct stat& now) const {
    if (!last_scan_start) return std::nullopt;
    const auto in_dir = scanned.find(log_dir);
    if (in_dir == scanned.end()) return std::nullopt;
    const auto old = in_dir->second.find(name);
    if (old == in_dir->second.end() || old->second.inode != now.st_ino ||
        old->second.modified.tv_sec != now.st_mtim.tv_sec ||
        old->second.modified.tv_nsec != now.st_mtim.tv_nsec)
      return std::nullopt;
    const auto modified = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::seconds(now.st_mtim.tv_sec) +
            std::chrono::nanoseconds(now.st_mtim.tv_nsec)));
    if (modified + std::chrono::seconds(1) >= *last_scan_start) return std::nullopt;
    std::shared_lock lock(mutex);
    const PartitionState* state = find(partition.first, partition.second);
    if (state == nullptr || state->log_dir != log_dir || state->topic_id.empty())
      return std::nullopt;
    return *state;
  }

  void full_scan() {
    std::lock_guard scan_lock(scan_mutex);
    const auto scan_start = std::chrono::system_clock::now();
    decltype(scanned) found_now;
    std::uint64_t read = 0, kept = 0;
    TopicMap fresh;
    std::size_t missing = 0;
    std::vector<std::string> log_dirs;  // a copy: rescan() may run beside the watcher's switch
    {
      std::shared_lock lock(mutex);
      log_dirs = options.log_dirs;
    }
    for (const std::string& log_dir : log_dirs) {
      auto names = list_partition_dirs(log_dir);
      if (!names) {
        ++missing;
        continue;
      }
      for (const std::string& name : *names) {
        struct stat now {};
        if (stat((log_dir + "/" + name).c_str(), &now) != 0) continue;  // vanished meanwhile
        auto parsed = parse_partition_dir_name(name);
        auto state = unchanged(log_dir, name, *parsed, now);
        if (state) {
          ++kept;
        } else {
          state = scan_partition_dir(log_dir, name);
          if (!state) continue;
          ++read;
        }
        found_now[log_dir][name] = ScannedDir{now.st_ino, now.st_mtim};
        fresh[parsed->first][parsed->second] = std::move(*state);
      }
    }
    std::size_t partitions = 0;
    for (const auto& [topic, by_partition] : fresh) partitions += by_partition.size();
    std::unique_lock lock(mutex);
    topics = std::move(fresh);
    stats.partitions = partitions;
    rebuild_topic_ids();
    ++stats.full_scans;
    stats.dirs_read += read;
    stats.dirs_unchanged += kept;
    stats.log_dirs_missing = missing;
    scanned = std::move(found_now);
    last_scan_start = scan_start;
  }

  // Re-reads one partition dir of one log dir and updates (or removes) its entry.
  void partition_scan(std::size_t log_dir_index, const std::string& dir_name) {
    auto parsed = parse_partition_dir_name(dir_name);
    if (!parsed) return;
    const std::string& log_dir = options.log_dirs[log_dir_index];
    auto state = scan_partition_dir(log_dir, dir_name);
    std::unique_lock lock(mutex);
    ++stats.partition_scans;
    auto topic = topics.find(parsed->first);
    if (state) {
      if (topic == topics.end())
        topic = topics.emplace(parsed->first, decltype(topic->second){}).first;
      const bool new_id = !state->topic_id.empty() && !topic_by_id.contains(state->topic_id);
      stats.partitions += topic->second.insert_or_assign(parsed->second, std::move(*state)).second;
      if (new_id) rebuild_topic_ids();
      return;
    }
    if (topic == topics.end()) return;
    auto partition = topic->second.find(parsed->second);
    // Only forget it if it lived in this log dir (it may have moved to another one).
    if (partition != topic->second.end() && partition->second.log_dir == log_dir) {
      topic->second.erase(partition);
      --stats.partitions;
      if (topic->second.empty()) {
        topics.erase(topic);
        rebuild_topic_ids();
      }
    }
  }

  // Topic id → name, for Fetch v13+ (topic ids only); caller holds the lock exclusively.
  void rebuild_topic_ids() {
    topic_by_id.clear();
    for (const auto& [topic, partitions] : topics) {
      for (const auto& [partition, state] : partitions) {
        if (!state.topic_id.empty()) topic_by_id.emplace(state.topic_id, topic);
      }
    }
  }

  void add_watches() {
    for (std::size_t i = 0; i < options.log_dirs.size(); ++i) {
      const std::string& log_dir = options.log_dirs[i];
      int wd = inotify_add_watch(inotify_fd, log_dir.c_str(), kLogDirMask);
      if (wd < 0) continue;  // missing: the periodic rescan retries
      watches[wd] = Watch{log_dir, i, ""};
      if (auto names = list_partition_dirs(log_dir)) {
        for (const std::string& name : *names)
          if (!watched_dirs.contains(log_dir + "/" + name)) add_partition_watch(i, name);
      }
    }
  }

  // Whether this log dir's copy of the partition has given its topic id.
  bool topic_id_known(std::size_t log_dir_index, const std::string& name) const {
    auto parsed = parse_partition_dir_name(name);
    if (!parsed) return false;
    std::shared_lock lock(mutex);
    const PartitionState* p = find(parsed->first, parsed->second);
    return p != nullptr && p->log_dir == options.log_dirs[log_dir_index] && !p->topic_id.empty();
  }

  // Adds the watch, or sets its mask again (same wd) once the topic id is known.
  void add_partition_watch(std::size_t log_dir_index, const std::string& name) {
    const std::string path = options.log_dirs[log_dir_index] + "/" + name;
    const bool awaiting = !topic_id_known(log_dir_index, name);
    int wd = inotify_add_watch(inotify_fd, path.c_str(),
                               awaiting ? kPartitionDirAwaitingIdMask : kPartitionDirMask);
    if (wd < 0) return;
    watched_dirs[path] = wd;
    watches[wd] = Watch{path, log_dir_index, name, awaiting};
  }

  // Partition watches still asking for IN_CLOSE_WRITE whose topic id a scan has since found:
  // their mask drops it (same wd).
  void settle_watch_masks() {
    std::vector<Watch> settled;
    for (const auto& [wd, w] : watches)
      if (w.awaiting_id && topic_id_known(w.log_dir_index, w.partition_dir)) settled.push_back(w);
    for (const Watch& w : settled) add_partition_watch(w.log_dir_index, w.partition_dir);
  }

  // Returns true when a full rescan is needed.
  bool handle_events() {
    alignas(inotify_event) char buffer[16 * 1024];
    bool full_rescan = false;
    for (;;) {
      const ssize_t n = read(inotify_fd, buffer, sizeof buffer);
      if (n <= 0) break;
      for (char* p = buffer; p < buffer + n;) {
        const auto* event = reinterpret_cast<const inotify_event*>(p);
        p += sizeof(inotify_event) + event->len;
        {
          std::unique_lock lock(mutex);
          ++stats.inotify_events;
          if (event->mask & IN_Q_OVERFLOW) ++stats.inotify_overflows;
        }
        if (event->mask & IN_Q_OVERFLOW) {
          full_rescan = true;
          continue;
        }
        auto watch = watches.find(event->wd);
        if (watch == watches.end()) continue;
        if (event->mask & IN_IGNORED) {
          // A dir made again under its path (a topic deleted and made anew) has a watch of its own.
          if (auto by_path = watched_dirs.find(watch->second.path);
              by_path != watched_dirs.end() && by_path->second == event->wd)
            watched_dirs.erase(by_path);
          watches.erase(watch);
          continue;
        }
        const Watch w = watch->second;
        if (event->mask & (IN_DELETE_SELF | IN_MOVE_SELF)) {
          if (w.partition_dir.empty())
            full_rescan = true;  // a whole log dir went away
          else
            partition_scan(w.log_dir_index, w.partition_dir);
          continue;
        }
        if (w.partition_dir.empty()) {
          // Something changed in a log dir: a partition dir created, deleted or renamed.
          const std::string name = event->len > 0 ? std::string(event->name) : std::string();
          if (!parse_partition_dir_name(name)) continue;
          if (event->mask & (IN_CREATE | IN_MOVED_TO)) add_partition_watch(w.log_dir_index, name);
          // Gone from its path (a rename to -delete keeps the watch on the dir): a dir made
          // there again is new to the periodic rescan's watches.
          if (event->mask & (IN_DELETE | IN_MOVED_FROM)) watched_dirs.erase(w.path + "/" + name);
          partition_scan(w.log_dir_index, name);
        } else {
          partition_scan(w.log_dir_index, w.partition_dir);
          if (w.awaiting_id && topic_id_known(w.log_dir_index, w.partition_dir))
            add_partition_watch(w.log_dir_index, w.partition_dir);
        }
      }
    }
    return full_rescan;
  }

  void run() {
    auto next_rescan = std::chrono::steady_clock::now() + options.rescan_interval;
    while (!stopping.load()) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= next_rescan) {
        full_scan();
        if (inotify_fd >= 0) {  // log dirs that appeared, partitions missed
          add_watches();
          settle_watch_masks();  // topic ids the scan found
        }
        next_rescan = now + options.rescan_interval;
      }
      const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next_rescan - now);
      pollfd fds[2] = {{wake_fd, POLLIN, 0}, {inotify_fd, POLLIN, 0}};
      const int ready = poll(fds, inotify_fd >= 0 ? 2 : 1,
                             static_cast<int>(std::max<std::int64_t>(wait.count(), 1)));
      if (ready <= 0) continue;
      if (fds[0].revents & POLLIN) {
        std::uint64_t count = 0;
        if (read(wake_fd, &count, sizeof count) < 0) { /* non-blocking: raced, nothing to read */
        }
        if (stopping.load()) break;
        if (take_next_log_dirs())
          next_rescan = std::chrono::steady_clock::now() + options.rescan_interval;
        continue;
      }
      if (inotify_fd >= 0 && (fds[1].revents & POLLIN) && handle_events()) {
        next_rescan = std::chrono::steady_clock::now();
      }
    }
  }

  // Watcher thread: switches to the log dirs set_log_dirs left, if any, and scans them whole.
  // The old dirs' watches go (their queued events find no watch), the new dirs' come before the
  // scan, as at start. Returns whether it switched.
  bool take_next_log_dirs() {
    {
      std::unique_lock lock(mutex);
      if (!next_log_dirs) return false;
      options.log_dirs = std::move(*next_log_dirs);
      next_log_dirs.reset();
    }
    if (inotify_fd >= 0) {
      for (const auto& [wd, watch] : watches) inotify_rm_watch(inotify_fd, wd);
      watches.clear();
      watched_dirs.clear();
      add_watches();
    }
    full_scan();
    settle_watch_masks();
    return true;
  }

  const PartitionState* find(std::string_view topic, std::int32_t partition) const {
    auto t = topics.find(topic);
    if (t == topics.end()) return nullptr;
    auto p = t->second.find(partition);
    return p == t->second.end() ? nullptr : &p->second;
  }
};

LocalTierMap::LocalTierMap(Options options) : impl_(std::make_unique<Impl>(std::move(options))) {}

LocalTierMap::~LocalTierMap() {
  stop();
}

void LocalTierMap::rescan() {
  impl_->full_scan();
}

Result<void> LocalTierMap::start() {
  Impl& m = *impl_;
  if (m.watcher.joinable()) return {};
  {
    std::unique_lock lock(m.mutex);  // a switch the watcher stopped before taking up
    if (m.next_log_dirs) m.options.log_dirs = std::move(*m.next_log_dirs);
    m.next_log_dirs.reset();
  }
  m.wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (m.wake_fd < 0) return make_error(std::string("tier: eventfd failed: ") + strerror(errno));
  if (m.options.use_inotify) {
    m.inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (m.inotify_fd < 0) {
      return make_error(std::string("tier: inotify_init1 failed (") + strerror(errno) +
                        "); raise fs.inotify.max_user_instances or disable inotify to rely on "
                        "periodic rescans");
    }
    m.add_watches();  // before the scan, so nothing changes unseen in between
  }
  m.full_scan();
  m.settle_watch_masks();
  m.stopping = false;
  m.watcher = std::thread([&m] { m.run(); });
  return {};
}

void LocalTierMap::stop() {
  Impl& m = *impl_;
  if (m.watcher.joinable()) {
    m.stopping = true;
    const std::uint64_t one = 1;
    if (write(m.wake_fd, &one, sizeof one) < 0) { /* the flag alone ends it at the next poll */
    }
    m.watcher.join();
  }
  if (m.inotify_fd >= 0) close(m.inotify_fd);
  if (m.wake_fd >= 0) close(m.wake_fd);
  m.inotify_fd = m.wake_fd = -1;
  m.watches.clear();
  m.watched_dirs.clear();
}

Result<void> LocalTierMap::set_log_dirs(std::vector<std::string> log_dirs) {
  Impl& m = *impl_;
  if (!m.watcher.joinable()) {
    {
      std::unique_lock lock(m.mutex);
      m.options.log_dirs = std::move(log_dirs);
      m.next_log_dirs.reset();
    }
    rescan();
    return {};
  }
  {
    std::unique_lock lock(m.mutex);
    m.next_log_dirs = std::move(log_dirs);
  }
  const std::uint64_t one = 1;
  if (write(m.wake_fd, &one, sizeof one) < 0)
    return make_error(std::string("tier: cannot wake the log dir watcher: ") + strerror(errno));
  return {};
}

std::vector<std::string> LocalTierMap::log_dirs() const {
  std::shared_lock lock(impl_->mutex);
  return impl_->next_log_dirs ? *impl_->next_log_dirs : impl_->options.log_dirs;
}

std::optional<std::int64_t> LocalTierMap::local_log_start(std::string_view topic,
                                                          std::int32_t partition) const {
  std::shared_lock lock(impl_->mutex);
  const PartitionState* state = impl_->find(topic, partition);
  if (state == nullptr) return std::nullopt;
  return state->local_log_start;
}

std::optional<std::string> LocalTierMap::topic_id(std::string_view topic) const {
  std::shared_lock lock(impl_->mutex);
  auto t = impl_->topics.find(topic);
  if (t == impl_->topics.end()) return std::nullopt;
  for (const auto& [partition, state] : t->second) {
    if (!state.topic_id.empty()) return state.topic_id;
  }
  return std::nullopt;
}

std::optional<std::string> LocalTierMap::topic_name(std::string_view topic_id) const {
  std::shared_lock lock(impl_->mutex);
  auto found = impl_->topic_by_id.find(topic_id);
  if (found == impl_->topic_by_id.end()) return std::nullopt;
  return found->second;
}

Eligibility LocalTierMap::classify(std::string_view topic, std::int32_t partition,
                                   std::int64_t fetch_offset) const {
  std::shared_lock lock(impl_->mutex);
  const PartitionState* state = impl_->find(topic, partition);
  if (state == nullptr || !state->local_log_start) return Eligibility::kUnknown;
  return fetch_offset < *state->local_log_start ? Eligibility::kRemote : Eligibility::kLocal;
}

std::vector<PartitionInfo> LocalTierMap::partitions() const {
  std::shared_lock lock(impl_->mutex);
  std::vector<PartitionInfo> out;
  for (const auto& [topic, partitions] : impl_->topics) {
    for (const auto& [partition, state] : partitions) {
      out.push_back(PartitionInfo{topic, partition, state.local_log_start, state.topic_id,
                                  state.log_dir, state.segments});
    }
  }
  std::sort(out.begin(), out.end(), [](const PartitionInfo& a, const PartitionInfo& b) {
    return std::tie(a.topic, a.partition) < std::tie(b.topic, b.partition);
  });
  return out;
}

Stats LocalTierMap::stats() const {
  std::shared_lock lock(impl_->mutex);
  return impl_->stats;
}

}  // namespace fc::tier
