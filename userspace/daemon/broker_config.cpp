#include "daemon/broker_config.h"

#include "daemon/targets.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace fc::daemon {
namespace {

bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\f';
}

// Appends code point `cp` as UTF-8 (\uXXXX escapes).
void append_utf8(std::string& out, unsigned cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// The character an escape stands for; `i` is at the backslash and moves past the escape.
void unescape_at(std::string_view s, std::size_t& i, std::string& out) {
  if (++i >= s.size()) return;  // a lone trailing backslash stands for nothing
  const char c = s[i++];
  if (const auto at = std::string_view("tnrf").find(c); at != std::string_view::npos) {
    out.push_back("\t\n\r\f"[at]);
  } else if (c == 'u') {  // Properties.load refuses a malformed one; it is dropped here
    unsigned cp = 0;
    const char* digits = s.data() + i;
    if (i + 4 <= s.size() && std::from_chars(digits, digits + 4, cp, 16).ptr == digits + 4) {
      append_utf8(out, cp);
      i += 4;
    }
  } else {
    out.push_back(c);
  }
}

// Splits one logical line (continuations joined) into its key and value.
std::pair<std::string, std::string> key_and_value(std::string_view line) {
  std::string key, value;
  std::size_t i = 0;
  bool separator_seen = false;
  while (i < line.size()) {
    const char c = line[i];
    if (c == '\\') {
      unescape_at(line, i, key);
      continue;
    }
    if (c == '=' || c == ':') {
      separator_seen = true;
      ++i;
      break;
    }
    if (is_blank(c)) break;
    key.push_back(c);
    ++i;
  }
  while (i < line.size() && is_blank(line[i])) ++i;
  if (!separator_seen && i < line.size() && (line[i] == '=' || line[i] == ':')) {
    ++i;
    while (i < line.size() && is_blank(line[i])) ++i;
  }
  while (i < line.size()) {
    if (line[i] == '\\') {
      unescape_at(line, i, value);
    } else {
      value.push_back(line[i++]);
    }
  }
  return {std::move(key), std::move(value)};
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (is_blank(s.front()) || s.front() == '\n' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (is_blank(s.back()) || s.back() == '\n' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::string proc_path(pid_t pid, const char* what) {
  return "/proc/" + std::to_string(pid) + "/" + what;
}

// Whether the process sees the same root as fetchcostd (no container): its paths are then ours.
bool same_root(pid_t pid) {
  struct stat theirs {};
  struct stat ours {};
  return stat(proc_path(pid, "root").c_str(), &theirs) == 0 && stat("/", &ours) == 0 &&
         theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino;
}

// A path as the broker names it, as fetchcostd reaches it: the same when both see one root
// (kept readable and stable across broker restarts), else through the broker's /proc links.
std::string reach(pid_t pid, const std::string& path, bool shared_root) {
  std::filesystem::path out;
  if (path.starts_with('/')) {
    out = shared_root ? path : proc_path(pid, "root") + path;
  } else {
    std::error_code ec;
    std::filesystem::path cwd = std::filesystem::read_symlink(proc_path(pid, "cwd"), ec);
    out = (shared_root && !ec ? cwd : std::filesystem::path(proc_path(pid, "cwd"))) / path;
  }
  std::string s = out.lexically_normal().string();
  while (s.size() > 1 && s.ends_with('/')) s.pop_back();
  return s;
}

// A setting's value: the last --override of it, else the properties file's.
std::optional<std::string> setting(
    std::string_view properties_text,
    const std::vector<std::pair<std::string, std::string>>& overrides, std::string_view key) {
  std::optional<std::string> value;
  for (const auto& [k, v] : overrides)
    if (k == key) value = v;  // the last --override wins, as in Kafka
  return value ? value : java_property(properties_text, key);
}

// The non-blank entries of a comma-separated value, trimmed.
std::vector<std::string> comma_list(std::string_view value) {
  std::vector<std::string> out;
  while (!value.empty()) {
    const auto comma = value.find(',');
    const std::string_view entry = trim(value.substr(0, comma));
    if (!entry.empty()) out.emplace_back(entry);
    value = comma == std::string_view::npos ? std::string_view() : value.substr(comma + 1);
  }
  return out;
}

}  // namespace

std::optional<BrokerCommandLine> parse_broker_command_line(const std::vector<std::string>& args) {
  BrokerCommandLine out;
  std::size_t first_after_main = 0;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "kafka.Kafka" && i + 1 < args.size() && !args[i + 1].starts_with('-')) {
      out.properties_file = args[i + 1];
      first_after_main = i + 2;
      break;
    }
  }
  if (out.properties_file.empty()) {
    for (std::size_t i = args.size(); i-- > 0;) {
      if (!args[i].starts_with('-') && args[i].ends_with(".properties")) {
        out.properties_file = args[i];
        break;
      }
    }
  }
  if (out.properties_file.empty()) return std::nullopt;
  auto add_override = [&](std::string_view assignment) {  // key=value
    const auto eq = assignment.find('=');
    if (eq == std::string_view::npos) return;
    const std::string_view key = trim(assignment.substr(0, eq));
    if (!key.empty()) out.overrides.emplace_back(key, assignment.substr(eq + 1));
  };
  constexpr std::string_view kOverride = "--override";
  for (std::size_t i = first_after_main; i < args.size(); ++i) {
    if (args[i] == kOverride && i + 1 < args.size())
      add_override(args[++i]);
    else if (args[i].starts_with("--override="))
      add_override(std::string_view(args[i]).substr(kOverride.size() + 1));
  }
  return out;
}

std::optional<std::string> java_property(std::string_view text, std::string_view key) {
  std::optional<std::string> found;
  std::size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_blank(text[i])) ++i;
    if (i >= text.size()) break;
    if (text[i] == '\n' || text[i] == '\r') {
      ++i;
      continue;
    }
    const bool comment = text[i] == '#' || text[i] == '!';
    // The logical line: natural lines joined where one ends in an odd number of backslashes,
    // the next one's leading blanks dropped.
    std::string line;
    while (i < text.size()) {
      const std::size_t end = text.find_first_of("\r\n", i);
      const std::string_view natural =
          text.substr(i, end == std::string_view::npos ? std::string_view::npos : end - i);
      i = end == std::string_view::npos ? text.size() : end;
      if (i < text.size() && text[i] == '\r') ++i;
      if (i < text.size() && text[i] == '\n') ++i;
      std::size_t backslashes = 0;
      while (backslashes < natural.size() && natural[natural.size() - 1 - backslashes] == '\\')
        ++backslashes;
      if (comment || backslashes % 2 == 0) {
        line.append(natural);
        break;
      }
      line.append(natural.substr(0, natural.size() - 1));
      while (i < text.size() && is_blank(text[i])) ++i;
    }
    if (comment) continue;
    auto [k, v] = key_and_value(line);
    if (k == key) found = std::move(v);
  }
  return found;
}

std::vector<std::string> log_dirs_setting(
    std::string_view properties_text,
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  std::optional<std::string> value = setting(properties_text, overrides, "log.dirs");
  if (!value) value = setting(properties_text, overrides, "log.dir");
  return comma_list(value.value_or("/tmp/kafka-logs"));  // Kafka's default for log.dir
}

std::vector<std::uint16_t> kafka_listener_ports(
    std::string_view properties_text,
    const std::vector<std::pair<std::string, std::string>>& overrides) {
  const auto listeners =
      comma_list(setting(properties_text, overrides, "listeners").value_or("PLAINTEXT://:9092"));
  const auto controllers =
      comma_list(setting(properties_text, overrides, "controller.listener.names").value_or(""));
  std::vector<std::uint16_t> ports;
  for (const std::string& listener : listeners) {  // NAME://host:port, host maybe [v6]
    const auto scheme = listener.find("://");
    const auto colon = listener.rfind(':');
    if (scheme == std::string::npos || colon <= scheme + 2) continue;
    if (std::find(controllers.begin(), controllers.end(), listener.substr(0, scheme)) !=
        controllers.end())
      continue;
    unsigned port = 0;
    const char* digits = listener.data() + colon + 1;
    const char* end = listener.data() + listener.size();
    if (std::from_chars(digits, end, port).ptr != end || port == 0 || port > 65535) continue;
    ports.push_back(static_cast<std::uint16_t>(port));
  }
  std::sort(ports.begin(), ports.end());
  ports.erase(std::unique(ports.begin(), ports.end()), ports.end());
  return ports;
}

Result<BrokerSettings> broker_settings(pid_t pid) {
  const std::string what = "the settings of pid " + std::to_string(pid);
  const std::string instead =
      "; set log_dirs (the broker's log.dirs) and kafka_ports (its listeners' ports) in the "
      "config";
  const std::vector<std::string> args = command_line(pid);
  if (args.empty())
    return make_error(what +
                      ": its command line could not be read (the process exited, or "
                      "fetchcostd lacks CAP_SYS_PTRACE)" +
                      instead);
  auto parsed = parse_broker_command_line(args);
  if (!parsed)
    return make_error(what +
                      ": its command line names no server properties file (a Kafka "
                      "broker runs kafka.Kafka <server.properties>)" +
                      instead);
  const bool shared_root = same_root(pid);
  const std::string file = reach(pid, parsed->properties_file, shared_root);
  std::ifstream in(file, std::ios::binary);
  if (!in)
    return make_error(what + ": cannot read its properties file " + parsed->properties_file +
                      " (as " + file + "): " + std::strerror(errno) + instead);
  // A server.properties is a few KiB: a file (or a device) past the bound is not one. Read in
  // pieces, so that a read (one per broker, again every retry) does not fill 4 MiB first.
  constexpr std::size_t kMaxPropertiesBytes = 4 << 20;
  std::string text;
  char piece[16 * 1024];
  while (text.size() <= kMaxPropertiesBytes && (in.read(piece, sizeof piece) || in.gcount() > 0))
    text.append(piece, static_cast<std::size_t>(in.gcount()));
  if (text.size() > kMaxPropertiesBytes)
    return make_error(what + ": its properties file " + parsed->properties_file +
                      " is over 4 MiB, not a properties file" + instead);
  BrokerSettings out;
  out.properties_file = parsed->properties_file;
  for (const std::string& dir : log_dirs_setting(text, parsed->overrides))
    out.log_dirs.push_back(reach(pid, dir, shared_root));
  out.kafka_ports = kafka_listener_ports(text, parsed->overrides);
  return out;
}

}  // namespace fc::daemon
