// libFuzzer: bytes → a broker's server.properties and command line as fetchcostd reads them
// (daemon/broker_config.h). Input: the properties text, then after the first NUL the command
// line's arguments, NUL-separated. Must not crash or hang, and what it returns must hold: log
// dirs non-empty and trimmed, listener ports non-zero, sorted and unique, an override's key
// non-empty.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/broker_config.h"

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

bool blank(char c) {
  return c == ' ' || c == '\t' || c == '\f' || c == '\r' || c == '\n';
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nul = input.find('\0');
  const std::string_view text = input.substr(0, nul);
  std::vector<std::string> args;
  if (nul != std::string_view::npos) {
    std::string_view rest = input.substr(nul + 1);
    while (!rest.empty()) {
      const auto end = rest.find('\0');
      args.emplace_back(rest.substr(0, end));
      rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    }
  }
  std::vector<std::pair<std::string, std::string>> overrides;
  if (auto cl = fc::daemon::parse_broker_command_line(args)) {
    require(!cl->properties_file.empty());
    for (const auto& [key, value] : cl->overrides) require(!key.empty());
    overrides = cl->overrides;
  }
  for (const std::string_view key : {"log.dirs", "listeners", "a"})
    (void)fc::daemon::java_property(text, key);
  for (const std::string& dir : fc::daemon::log_dirs_setting(text, overrides))
    require(!dir.empty() && !blank(dir.front()) && !blank(dir.back()));
  const auto ports = fc::daemon::kafka_listener_ports(text, overrides);
  require(std::adjacent_find(ports.begin(), ports.end(), [](auto a, auto b) { return a >= b; }) ==
          ports.end());
  require(std::find(ports.begin(), ports.end(), 0) == ports.end());
  return 0;
}
