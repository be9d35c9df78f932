// broker_config: what fetchcostd needs to know of a running broker, read from the broker itself,
// so that the default config (no log_dirs) still knows which fetches read the remote tier, and
// which ports are its Kafka listeners.
//
// A Kafka broker is started as `... kafka.Kafka <server.properties> [--override key=value]...`
// (kafka-server-start.sh, the Apache, Confluent, Bitnami and Strimzi images alike). Its log dirs
// are `log.dirs`, else `log.dir`, else /tmp/kafka-logs; its listeners `listeners` (else
// PLAINTEXT://:9092), less those named in `controller.listener.names`; an --override wins over
// the file. The file and the dirs are named as the broker sees them: through /proc/PID/root (and
// /proc/PID/cwd for relative paths) they are read from its mount namespace, a container's too.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/result.h"

namespace fc::daemon {

// The broker's properties file and its --override settings, from its arguments.
struct BrokerCommandLine {
  std::string properties_file;
  std::vector<std::pair<std::string, std::string>> overrides;
};
// The argument after `kafka.Kafka`, else the last argument that names a `.properties` file (not
// an option: `-Dlog4j.configuration=...properties` is not it). nullopt: none.
std::optional<BrokerCommandLine> parse_broker_command_line(const std::vector<std::string>& args);

// The value of `key` in java.util.Properties text (comments, `=`/`:`/blank separators, line
// continuations and escapes as Properties.load reads them; the last definition wins).
std::optional<std::string> java_property(std::string_view text, std::string_view key);

// The log dirs the settings name: log.dirs, else log.dir, else Kafka's default; comma-separated,
// blanks dropped.
std::vector<std::string> log_dirs_setting(
    std::string_view properties_text,
    const std::vector<std::pair<std::string, std::string>>& overrides);

// The ports of the listeners the settings name (`listeners`, else Kafka's PLAINTEXT://:9092),
// less the controller's: clients fetch on the others. Sorted, unique; a malformed entry is skipped.
std::vector<std::uint16_t> kafka_listener_ports(
    std::string_view properties_text,
    const std::vector<std::pair<std::string, std::string>>& overrides);

struct BrokerSettings {
  std::vector<std::string> log_dirs;       // as fetchcostd reaches them
  std::vector<std::uint16_t> kafka_ports;  // its client listeners' ports
  std::string properties_file;             // as the broker names it
};
// The settings of broker process `pid`. An error says what was missing and what to set instead.
Result<BrokerSettings> broker_settings(pid_t pid);

}  // namespace fc::daemon
