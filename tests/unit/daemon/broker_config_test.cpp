#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>

#include "daemon/broker_config.h"
#include "daemon/targets.h"
#include "testing.h"

using fc::daemon::java_property;
using fc::daemon::kafka_listener_ports;
using fc::daemon::log_dirs_setting;
using fc::daemon::parse_broker_command_line;

TEST_CASE("the broker's properties file and overrides come from its command line") {
  // kafka-server-start.sh's java command: the log4j option names a .properties file too.
  auto cl = parse_broker_command_line(
      {"java", "-Xmx1G", "-Dlog4j.configuration=file:/opt/kafka/bin/../config/log4j.properties",
       "-cp", "/opt/kafka/libs/*", "kafka.Kafka", "/etc/kafka/kraft.conf", "--override",
       "log.dirs=/data/a", "--override=log.dir = /data/b", "--override", "broken", "--override",
       " \n=blank key", "--override", "=no key"});
  REQUIRE(cl);
  CHECK(cl->properties_file == "/etc/kafka/kraft.conf");  // after kafka.Kafka, whatever its name
  REQUIRE(cl->overrides.size() == 2);
  CHECK(cl->overrides[0] == std::pair<std::string, std::string>{"log.dirs", "/data/a"});
  CHECK(cl->overrides[1] == std::pair<std::string, std::string>{"log.dir", " /data/b"});

  // Another launcher: the last argument naming a .properties file that is not an option.
  cl = parse_broker_command_line({"/usr/bin/broker", "--x", "a.properties",
                                  "-Dlog4j.configuration=log4j.properties", "config/b.properties"});
  REQUIRE(cl);
  CHECK(cl->properties_file == "config/b.properties");
  CHECK(cl->overrides.empty());

  CHECK_FALSE(parse_broker_command_line({"java", "-Dx=log4j.properties", "org.example.Main"}));
  CHECK_FALSE(parse_broker_command_line({"java", "kafka.Kafka"}));
  CHECK_FALSE(parse_broker_command_line({}));
}

TEST_CASE("properties are read as java.util.Properties reads them") {
  const std::string text =
      "# log.dirs=/commented\n"
      "   \n"
      "! log.dirs=/commented/too\\\n"  // a comment line does not continue
      "num.partitions : 3\r\n"
      "log.segment.bytes   1073741824\n"
      "listeners=PLAINTEXT://:9092,\\\n"
      "    CONTROLLER://:9093\n"
      "odd\\:key=colon\n"
      "path=C:\\\\kafka\\\\\n"  // two escaped backslashes: no continuation
      "next=\\u0041\\u00e9\\t|\n"
      "empty=\n"
      "twice=first\n"
      "twice=second";
  CHECK(java_property(text, "num.partitions") == "3");
  CHECK(java_property(text, "log.segment.bytes") == "1073741824");
  CHECK(java_property(text, "listeners") == "PLAINTEXT://:9092,CONTROLLER://:9093");
  CHECK(java_property(text, "odd:key") == "colon");
  CHECK(java_property(text, "path") == "C:\\kafka\\");
  CHECK(java_property(text, "next") == "A\xC3\xA9\t|");
  CHECK(java_property(text, "empty") == "");
  CHECK(java_property(text, "twice") == "second");
  CHECK_FALSE(java_property(text, "log.dirs"));
  CHECK_FALSE(java_property(text, "CONTROLLER://"));
}

TEST_CASE("log.dirs, else log.dir, else Kafka's default; an override wins") {
  CHECK(log_dirs_setting("log.dir=/one\nlog.dirs= /a, ,/b ,\n", {}) ==
        std::vector<std::string>{"/a", "/b"});
  CHECK(log_dirs_setting("log.dir=/one\n", {}) == std::vector<std::string>{"/one"});
  CHECK(log_dirs_setting("broker.id=1\n", {}) == std::vector<std::string>{"/tmp/kafka-logs"});
  CHECK(log_dirs_setting("log.dirs=/a\n", {{"log.dirs", "/x"}, {"log.dirs", "/y,/z"}}) ==
        std::vector<std::string>{"/y", "/z"});
  // An overridden log.dir does not beat the file's log.dirs: Kafka reads log.dirs first.
  CHECK(log_dirs_setting("log.dirs=/a\n", {{"log.dir", "/x"}}) == std::vector<std::string>{"/a"});
}

TEST_CASE("the client listeners' ports: listeners less the controller's; Kafka's default") {
  using Ports = std::vector<std::uint16_t>;
  CHECK(kafka_listener_ports("listeners=PLAINTEXT://:9092,CONTROLLER://:9093,SSL://[::1]:9094, "
                             "EXTERNAL://broker-0.example:19092\n"
                             "controller.listener.names=CONTROLLER\n",
                             {}) == Ports{9092, 9094, 19092});
  CHECK(kafka_listener_ports("broker.id=1\n", {}) == Ports{9092});
  // Malformed entries are skipped; an override wins.
  CHECK(kafka_listener_ports("listeners=PLAINTEXT://:9092\n",
                             {{"listeners", "A://:70000,B://:x,C:9000,D://:9095,E://h:9095"}}) ==
        Ports{9095});
}

namespace {

// A process whose command line is a broker's, started in `dir` (its relative paths are there).
pid_t start_fake_broker(const std::filesystem::path& dir, const std::vector<std::string>& args) {
  const pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    if (chdir(dir.c_str()) != 0) _exit(127);
    std::vector<const char*> argv = {"sh", "-c", "sleep 30"};
    for (const auto& a : args) argv.push_back(a.c_str());
    argv.push_back(nullptr);
    execv("/bin/sh", const_cast<char* const*>(argv.data()));
    _exit(127);
  }
  // Until the exec shows in its command line.
  for (int i = 0; i < 200; ++i) {
    const auto args = fc::daemon::command_line(child);
    if (!args.empty() && args[0] == "sh") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return child;
}

void stop(pid_t child) {
  kill(-child, SIGKILL);
  waitpid(child, nullptr, 0);
}

}  // namespace

TEST_CASE("a running broker's log dirs are read through its own working directory") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("fc-broker-config-" + std::to_string(getpid()));
  fs::create_directories(dir / "config");
  std::ofstream(dir / "config" / "server.properties")
      << "process.roles=broker,controller\nlog.dirs=data, /var/lib/kafka/other\n"
         "listeners=PLAINTEXT://:9092,CONTROLLER://:9093\ncontroller.listener.names=CONTROLLER\n";
  const pid_t broker = start_fake_broker(
      dir, {"java", "-Dlog4j.configuration=file:config/log4j.properties", "kafka.Kafka",
            "config/server.properties", "--override", "broker.id=1", "--override",
            "listeners=PLAINTEXT://:9092,CONTROLLER://:9093,INTERNAL://:9192"});
  auto found = fc::daemon::broker_settings(broker);
  stop(broker);
  REQUIRE_MESSAGE(found, found.error().message);
  CHECK(found->properties_file == "config/server.properties");
  // Relative to the broker's working directory; the same root as ours: paths kept as named.
  CHECK(found->log_dirs ==
        std::vector<std::string>{(dir / "data").string(), "/var/lib/kafka/other"});
  CHECK(found->kafka_ports == std::vector<std::uint16_t>{9092, 9192});

  SUBCASE("a properties file it cannot read is an error that says what to set") {
    const pid_t other =
        start_fake_broker(dir, {"java", "kafka.Kafka", "config/missing.properties"});
    auto missing = fc::daemon::broker_settings(other);
    stop(other);
    REQUIRE_FALSE(missing);
    CHECK(missing.error().message.find("config/missing.properties") != std::string::npos);
    CHECK(missing.error().message.find("set log_dirs") != std::string::npos);
  }
  SUBCASE("so is a file too large to be one (a device, say), read no further than the bound") {
    const pid_t other = start_fake_broker(dir, {"java", "kafka.Kafka", "/dev/zero"});
    auto huge = fc::daemon::broker_settings(other);
    stop(other);
    REQUIRE_FALSE(huge);
    CHECK(huge.error().message.find("over 4 MiB") != std::string::npos);
  }
  SUBCASE("so is a process that names no properties file") {
    auto none = fc::daemon::broker_settings(getpid());
    REQUIRE_FALSE(none);
    CHECK(none.error().message.find("names no server properties file") != std::string::npos);
  }
  fs::remove_all(dir);
}

namespace {

// Replaces this process's command line in place (as setproctitle does): /proc/PID/cmdline reads
// the memory its arguments were passed in. False when `args` do not fit.
bool set_command_line(const std::vector<std::string>& args) {
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));  // after "pid (comm) "
  std::string field;
  unsigned long long arg_start = 0, arg_end = 0;
  for (int i = 3; fields >> field; ++i) {  // fields 48 and 49: arg_start, arg_end
    if (i == 48) arg_start = std::stoull(field);
    if (i == 49) arg_end = std::stoull(field);
  }
  std::string joined;
  for (const auto& a : args) joined.append(a).push_back('\0');
  if (arg_start == 0 || joined.size() > arg_end - arg_start) return false;
  joined.resize(arg_end - arg_start, '\0');
  std::memcpy(reinterpret_cast<void*>(arg_start), joined.data(), joined.size());
  return true;
}

}  // namespace

TEST_CASE("a broker in a container (its own root) is read through /proc/PID/root") {
  fc::testing::require_root("chroot() makes the fake broker's own root");
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("fc-broker-root-" + std::to_string(getpid()));
  fs::create_directories(root / "opt/kafka/config");
  fs::create_directories(root / "var/lib/kafka/data");
  std::ofstream(root / "opt/kafka/config/server.properties") << "log.dirs=/var/lib/kafka/data\n";
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t broker = fork();
  if (broker == 0) {
    const bool ok = set_command_line({"java", "kafka.Kafka", "config/server.properties"}) &&
                    chroot(root.c_str()) == 0 && chdir("/opt/kafka") == 0;
    if (write(ready[1], ok ? "1" : "0", 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  char ok = '0';
  REQUIRE(read(ready[0], &ok, 1) == 1);
  auto found = fc::daemon::broker_settings(broker);
  // Its paths are not ours: they are reached through its /proc links.
  const bool reachable =
      found && found->log_dirs.size() == 1 && fs::is_directory(found->log_dirs[0]);
  kill(broker, SIGKILL);
  waitpid(broker, nullptr, 0);
  close(ready[0]);
  close(ready[1]);
  REQUIRE(ok == '1');
  REQUIRE_MESSAGE(found, found.error().message);
  CHECK(found->log_dirs ==
        std::vector<std::string>{"/proc/" + std::to_string(broker) + "/root/var/lib/kafka/data"});
  CHECK(reachable);
  fs::remove_all(root);
}
