#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include "tier/tier.h"

namespace fs = std::filesystem;
using fc::tier::Eligibility;
using fc::tier::LocalTierMap;

namespace {

constexpr const char* kOrdersId = "gT5bX0YqRkOyQ3uLm9a_Aw";
constexpr const char* kDashedId = "Zm9vYmFyLWJhei1xdXV4LQ";

// A temporary log dir laid out the way a Kafka broker writes it.
struct LogDir {
  fs::path root;
  LogDir() {
    char tmpl[] = "/tmp/fc_tier_test_XXXXXX";
    root = mkdtemp(tmpl);
  }
  ~LogDir() { fs::remove_all(root); }
  fs::path partition(const std::string& dir_name, const std::string& topic_id = "") {
    fs::path dir = root / dir_name;
    fs::create_directories(dir);
    if (!topic_id.empty()) {
      std::ofstream(dir / "partition.metadata") << "version: 0\ntopic_id: " << topic_id << "\n";
    }
    return dir;
  }
  static void segment(const fs::path& dir, std::int64_t base_offset) {
    char name[32];
    std::snprintf(name, sizeof name, "%020lld", static_cast<long long>(base_offset));
    std::ofstream(dir / (std::string(name) + ".log")) << "records";
    std::ofstream(dir / (std::string(name) + ".index")) << "";
    std::ofstream(dir / (std::string(name) + ".timeindex")) << "";
  }
};

bool eventually(const std::function<bool()>& condition) {
  for (int i = 0; i < 300; ++i) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

// The events this process's inotify instances watch `dir` for, as the kernel reports them in
// /proc/self/fdinfo ("inotify wd:N ino:HEX ... mask:HEX"); nullopt when nothing watches it.
std::optional<std::uint32_t> kernel_watch_mask(const fs::path& dir) {
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return std::nullopt;
  for (const auto& fd : fs::directory_iterator("/proc/self/fdinfo")) {
    std::ifstream in(fd.path());
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("inotify ", 0) != 0) continue;
      std::istringstream fields(line.substr(8));
      std::string field;
      unsigned long long ino = 0, mask = 0;
      bool has_ino = false, has_mask = false;
      while (fields >> field) {
        if (field.rfind("ino:", 0) == 0)
          has_ino = std::sscanf(field.c_str() + 4, "%llx", &ino) == 1;
        if (field.rfind("mask:", 0) == 0)
          has_mask = std::sscanf(field.c_str() + 5, "%llx", &mask) == 1;
      }
      if (has_ino && has_mask && ino == st.st_ino) return static_cast<std::uint32_t>(mask);
    }
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("partition dir names: the partition follows the last '-'") {
  auto orders = fc::tier::parse_partition_dir_name("orders-3");
  REQUIRE(orders);
  CHECK(orders->first == "orders");
  CHECK(orders->second == 3);
  auto dashed = fc::tier::parse_partition_dir_name("my-topic-2024-12");
  REQUIRE(dashed);
  CHECK(dashed->first == "my-topic-2024");
  CHECK(dashed->second == 12);
  CHECK_FALSE(
      fc::tier::parse_partition_dir_name("orders-1.5f3a9c7e2b1d4f6a8c0e2b4d6f8a0c2e-delete"));
  CHECK_FALSE(
      fc::tier::parse_partition_dir_name("orders-1.5f3a9c7e2b1d4f6a8c0e2b4d6f8a0c2e-future"));
  CHECK_FALSE(fc::tier::parse_partition_dir_name("meta.properties"));
  CHECK_FALSE(fc::tier::parse_partition_dir_name("-1"));
  CHECK_FALSE(fc::tier::parse_partition_dir_name("orders-"));
  CHECK_FALSE(fc::tier::parse_partition_dir_name("orders-99999999999"));
}

TEST_CASE("segment file names: exactly 20 digits + .log") {
  CHECK(fc::tier::parse_segment_file_name("00000000000000001234.log") == 1234);
  CHECK_FALSE(fc::tier::parse_segment_file_name("00000000000000001234.index"));
  CHECK_FALSE(fc::tier::parse_segment_file_name("00000000000000001234.log.deleted"));
  CHECK_FALSE(fc::tier::parse_segment_file_name("0000000000000001234.log"));
  CHECK_FALSE(fc::tier::parse_segment_file_name("0000000000000000123x.log"));
  CHECK_FALSE(fc::tier::parse_segment_file_name("99999999999999999999.log"));  // > INT64_MAX
}

TEST_CASE("partition.metadata: topic_id is 22 base64url characters") {
  CHECK(fc::tier::parse_partition_metadata("version: 0\ntopic_id: gT5bX0YqRkOyQ3uLm9a_Aw\n") ==
        "gT5bX0YqRkOyQ3uLm9a_Aw");
  CHECK(fc::tier::parse_partition_metadata("topic_id:gT5bX0YqRkOyQ3uLm9a_Aw\r\nversion: 0") ==
        "gT5bX0YqRkOyQ3uLm9a_Aw");
  CHECK_FALSE(fc::tier::parse_partition_metadata("version: 0\n"));
  CHECK_FALSE(fc::tier::parse_partition_metadata("topic_id: short\n"));
  CHECK_FALSE(fc::tier::parse_partition_metadata("topic_id: gT5bX0YqRkOyQ3uLm9a/Aw\n"));
}

TEST_CASE("a scan finds local log starts and topic ids; fetches below it are remote") {
  LogDir dir;
  auto orders0 = dir.partition("orders-0", kOrdersId);
  LogDir::segment(orders0, 250);
  LogDir::segment(orders0, 100);
  LogDir::segment(orders0, 900);
  auto dashed = dir.partition("click-stream-v2-12", kDashedId);
  LogDir::segment(dashed, 0);
  dir.partition("empty-0");  // no segments yet
  LogDir::segment(dir.partition("orders-1.abcdef0123456789abcdef0123456789-delete"), 5);
  std::ofstream(dir.root / "meta.properties") << "broker.id=1\n";

  LocalTierMap map({{dir.root.string(), (dir.root / "missing").string()}});
  map.rescan();
  CHECK(map.local_log_start("orders", 0) == 100);
  CHECK(map.local_log_start("click-stream-v2", 12) == 0);
  CHECK(map.local_log_start("orders", 1) == std::nullopt);
  CHECK(map.topic_id("orders") == kOrdersId);
  CHECK(map.topic_name(kDashedId) == "click-stream-v2");
  CHECK(map.topic_id("empty") == std::nullopt);
  CHECK(map.classify("orders", 0, 99) == Eligibility::kRemote);
  CHECK(map.classify("orders", 0, 100) == Eligibility::kLocal);
  CHECK(map.classify("orders", 0, 5000) == Eligibility::kLocal);
  CHECK(map.classify("empty", 0, 0) == Eligibility::kUnknown);
  CHECK(map.classify("nope", 0, 0) == Eligibility::kUnknown);
  const auto partitions = map.partitions();
  REQUIRE(partitions.size() == 3);
  CHECK(partitions[1].topic == "empty");
  CHECK(partitions[2].segments == 3);
  CHECK(map.stats().log_dirs_missing == 1);
}

TEST_CASE("inotify: segment deletion, new partitions and vanished dirs are seen") {
  LogDir dir;
  auto orders0 = dir.partition("orders-0", kOrdersId);
  LogDir::segment(orders0, 100);
  LogDir::segment(orders0, 200);
  fc::tier::Options options{{dir.root.string()}};
  options.rescan_interval = std::chrono::hours(1);  // inotify alone must keep up
  LocalTierMap map(options);
  REQUIRE(map.start().ok());
  CHECK(map.local_log_start("orders", 0) == 100);
  CHECK(map.stats().partitions == 1);

  // Retention deletes the oldest segment: the local log start moves up.
  fs::remove(orders0 / "00000000000000000100.log");
  CHECK(eventually([&] { return map.local_log_start("orders", 0) == 200; }));
  CHECK(map.classify("orders", 0, 150) == Eligibility::kRemote);

  // A new partition is assigned to this broker.
  auto fresh = dir.partition("new-topic-7", kDashedId);
  LogDir::segment(fresh, 42);
  CHECK(eventually([&] { return map.local_log_start("new-topic", 7) == 42; }));
  CHECK(eventually([&] { return map.topic_id("new-topic") == kDashedId; }));
  CHECK(map.topic_name(kDashedId) == "new-topic");
  CHECK(map.stats().partitions == 2);  // kept as partitions come and go, not counted per read

  // Kafka deletes a partition by renaming it to "-delete" and removing it later.
  fs::rename(orders0, dir.root / "orders-0.0123456789abcdef0123456789abcdef-delete");
  CHECK(eventually([&] { return !map.local_log_start("orders", 0).has_value(); }));
  CHECK(map.topic_name(kOrdersId) == std::nullopt);
  CHECK(map.classify("orders", 0, 0) == Eligibility::kUnknown);
  CHECK(map.stats().partitions == 1);

  // The whole log dir vanishes (disk failure): everything it held is forgotten.
  fs::remove_all(dir.root);
  CHECK(eventually([&] { return map.partitions().empty(); }));
  CHECK(map.stats().partitions == 0);
  CHECK(map.stats().inotify_events > 0);
  map.stop();
}

TEST_CASE(
    "inotify: a partition dir is watched for written files only until its topic id is known") {
  // A watch for IN_CLOSE_WRITE makes the kernel visit the parent dir on every read and sendfile
  // of the broker's segments in it; it is needed only while partition.metadata is unread.
  LogDir dir;
  auto known = dir.partition("orders-0", kOrdersId);
  LogDir::segment(known, 100);
  auto pending = dir.partition("pending-1");  // no partition.metadata yet
  LogDir::segment(pending, 5);
  fc::tier::Options options{{dir.root.string()}};
  options.rescan_interval = std::chrono::hours(1);  // inotify alone must keep up
  LocalTierMap map(options);
  REQUIRE(map.start().ok());

  const auto known_mask = kernel_watch_mask(known);
  REQUIRE(known_mask);
  CHECK((*known_mask & IN_CLOSE_WRITE) == 0);
  CHECK((*known_mask & IN_CREATE) != 0);
  CHECK((*known_mask & IN_DELETE) != 0);
  CHECK((*known_mask & IN_MOVED_TO) != 0);
  const auto pending_mask = kernel_watch_mask(pending);
  REQUIRE(pending_mask);
  CHECK((*pending_mask & IN_CLOSE_WRITE) != 0);
  CHECK(map.topic_id("pending") == std::nullopt);

  // The broker fills partition.metadata in place: its close gives the id, then the watch
  // no longer asks for written files.
  std::ofstream(pending / "partition.metadata") << "version: 0\ntopic_id: " << kDashedId << "\n";
  CHECK(eventually([&] { return map.topic_id("pending") == kDashedId; }));
  CHECK(eventually([&] {
    const auto mask = kernel_watch_mask(pending);
    return mask && (*mask & IN_CLOSE_WRITE) == 0;
  }));

  // Without IN_CLOSE_WRITE the dir's names are still seen: a new segment, and Kafka's rename of
  // partition.metadata.tmp over the file.
  LogDir::segment(pending, 1);
  CHECK(eventually([&] { return map.local_log_start("pending", 1) == 1; }));
  std::ofstream(known / "partition.metadata.tmp") << "version: 0\ntopic_id: " << kDashedId << "\n";
  fs::rename(known / "partition.metadata.tmp", known / "partition.metadata");
  CHECK(eventually([&] { return map.topic_id("orders") == kDashedId; }));
  map.stop();
}

TEST_CASE("a map started with no log dirs takes the broker's once found, and watches them") {
  LogDir first, second;
  LogDir::segment(first.partition("orders-0", kOrdersId), 100);
  LogDir::segment(second.partition("orders-1", kOrdersId), 300);
  fc::tier::Options options;  // no log dirs yet: the broker is not found
  options.rescan_interval = std::chrono::hours(1);
  LocalTierMap map(options);
  REQUIRE(map.start().ok());
  CHECK(map.partitions().empty());

  // The watcher scans them on its thread; log_dirs() names them at once.
  REQUIRE(map.set_log_dirs({first.root.string(), second.root.string()}).ok());
  CHECK(map.log_dirs() == std::vector<std::string>{first.root.string(), second.root.string()});
  CHECK(eventually([&] { return map.local_log_start("orders", 0) == 100; }));
  CHECK(map.local_log_start("orders", 1) == 300);
  // Watched with inotify from then on.
  fs::remove(first.root / "orders-0" / "00000000000000000100.log");
  LogDir::segment(first.root / "orders-0", 150);
  CHECK(eventually([&] { return map.local_log_start("orders", 0) == 150; }));

  // Another broker (another set of dirs): the first dirs are forgotten, and no longer watched.
  REQUIRE(map.set_log_dirs({second.root.string()}).ok());
  CHECK(eventually([&] { return !map.local_log_start("orders", 0); }));
  CHECK(map.local_log_start("orders", 1) == 300);
  const auto events = map.stats().inotify_events;
  LogDir::segment(first.root / "orders-0", 200);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(map.stats().inotify_events == events);
  CHECK_FALSE(map.local_log_start("orders", 0));
  // The second dir's watches were made again: its changes are still seen.
  LogDir::segment(second.root / "orders-1", 250);
  CHECK(eventually([&] { return map.local_log_start("orders", 1) == 250; }));
  map.stop();
}

namespace {

// Sets a dir's modification time to `when` (whole seconds), as a dir untouched since has.
void age(const fs::path& dir, std::chrono::system_clock::time_point when) {
  const time_t seconds = std::chrono::system_clock::to_time_t(when);
  const timespec times[2] = {{seconds, 0}, {seconds, 0}};
  REQUIRE(utimensat(AT_FDCWD, dir.c_str(), times, 0) == 0);
}

}  // namespace

TEST_CASE("a rescan takes the dirs unchanged since the one before as it read them") {
  LogDir dir;
  const auto orders0 = dir.partition("orders-0", kOrdersId);
  const auto orders1 = dir.partition("orders-1", kOrdersId);
  const auto pending = dir.partition("pending-2");  // no topic id yet
  LogDir::segment(orders0, 100);
  LogDir::segment(orders1, 300);
  LogDir::segment(pending, 5);
  const auto long_ago = std::chrono::system_clock::now() - std::chrono::minutes(1);
  for (const auto& d : {orders0, orders1, pending}) age(d, long_ago);
  LocalTierMap map(fc::tier::Options{{dir.root.string()}});
  map.rescan();
  CHECK(map.stats().dirs_read == 3);
  // Unchanged since, with their topic ids: taken as read. The one whose id is unknown is read
  // again (partition.metadata may be written in place, which leaves the dir as it was).
  map.rescan();
  CHECK(map.stats().dirs_read == 4);
  CHECK(map.stats().dirs_unchanged == 2);
  CHECK(map.local_log_start("orders", 0) == 100);

  // A new segment changes its dir: read again. And again at the next rescan, its time being
  // within a second of the scan that read it (a change in the same tick would not show).
  LogDir::segment(orders0, 50);
  map.rescan();
  CHECK(map.local_log_start("orders", 0) == 50);
  CHECK(map.stats().dirs_read == 6);
  map.rescan();
  CHECK(map.stats().dirs_read == 8);
  CHECK(map.stats().dirs_unchanged == 4);

  // The id written in place; a topic made again under its name, as Kafka does it (the old dir
  // renamed to -delete first): a new dir, whose time alone would not tell.
  std::ofstream(pending / "partition.metadata") << "version: 0\ntopic_id: " << kDashedId << "\n";
  age(pending, long_ago);
  fs::rename(orders1, dir.root / "orders-1.0123456789abcdef0123456789abcdef-delete");
  LogDir::segment(dir.partition("orders-1", kDashedId), 400);
  age(orders1, long_ago);
  map.rescan();
  CHECK(map.topic_id("pending") == kDashedId);
  CHECK(map.local_log_start("orders", 1) == 400);
  CHECK(map.partitions()[1].topic_id == kDashedId);
}

TEST_CASE("periodic rescan alone keeps the map current (no inotify)") {
  LogDir dir;
  fc::tier::Options options{{dir.root.string()}};
  options.use_inotify = false;
  options.rescan_interval = std::chrono::milliseconds(20);
  LocalTierMap map(options);
  REQUIRE(map.start().ok());
  CHECK(map.partitions().empty());
  LogDir::segment(dir.partition("late-3"), 77);
  CHECK(eventually([&] { return map.local_log_start("late", 3) == 77; }));
  CHECK(map.stats().full_scans >= 2);
}

TEST_CASE("lookups are safe while the map is being rescanned") {
  LogDir dir;
  for (int p = 0; p < 50; ++p) LogDir::segment(dir.partition("t-" + std::to_string(p)), 10);
  fc::tier::Options options{{dir.root.string()}};
  options.rescan_interval = std::chrono::milliseconds(1);
  LocalTierMap map(options);
  REQUIRE(map.start().ok());
  std::atomic<int> wrong{0};
  std::thread reader([&] {
    for (int i = 0; i < 200'000; ++i) {
      if (map.classify("t", i % 50, 5) != Eligibility::kRemote) ++wrong;
    }
  });
  reader.join();
  CHECK(wrong == 0);
}
