// broker_config: where a running broker keeps its logs, read from the broker itself, so that the
// default config (no log_dirs) still knows which fetches read the remote tier.
//
// A Kafka broker is started as `... kafka.Kafka <server.properties> [--override key=value]...`
// (kafka-server-start.sh, the Apache, Confluent, Bitnami and Strimzi images alike). Its log dirs
// are `log.dirs`, else `log.dir`, else /tmp/kafka-logs; an --override wins over the file. The
// file and the dirs are named as the broker sees them: through /proc/PID/root (and /proc/PID/cwd
// for relative paths) they are read from its mount namespace, a container's too.
#pragma once

#include <sys/types.h>

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

struct BrokerLogDirs {
  std::vector<std::string> dirs;  // as fetchcostd reaches them
  std::string properties_file;    // as the broker names it
};
// The log dirs of broker process `pid`. An error says what was missing and what to set instead.
Result<BrokerLogDirs> broker_log_dirs(pid_t pid);

}  // namespace fc::daemon
