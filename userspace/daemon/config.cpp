#include "daemon/config.h"

#include "base/json_count.h"
#include "pipeline/endpoints.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace fc::daemon {
namespace {

using nlohmann::json;

// Counts (and arrays of them) are read with json_count, never get<T>() (base/json_count.h).
template <typename T>
constexpr bool kWhole = std::is_integral_v<T> && !std::is_same_v<T, bool>;
template <typename T>
constexpr bool kWholes = false;
template <typename E>
constexpr bool kWholes<std::vector<E>> = kWhole<E>;

// Reads one field with a type check; errors say "field: expected X, got Y".
struct Reader {
  std::string error;

  bool check_keys(const json& obj, const std::string& where, std::set<std::string> allowed) {
    if (!obj.is_object()) return fail(where, "expected an object");
    for (const auto& [key, value] : obj.items()) {
      if (!allowed.count(key)) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        return fail(where.empty() ? key : where + "." + key, "unknown key (known: " + list + ")");
      }
    }
    return true;
  }
  bool fail(const std::string& field, const std::string& what) {
    if (error.empty()) error = "config field \"" + field + "\": " + what;
    return false;
  }
  template <typename T>
  void get(const json& obj, const std::string& key, const std::string& path, T& out) {
    if (!error.empty() || !obj.contains(key)) return;
    const json& v = obj.at(key);
    if constexpr (kWhole<T>) {
      if (const auto n = json_count<T>(v))
        out = *n;
      else
        fail(path, "expected a whole number" + json_count_range<T>() + ", got " + v.dump());
    } else if constexpr (kWholes<T>) {
      using E = typename T::value_type;
      T values;
      bool ok = v.is_array();
      for (std::size_t i = 0; ok && i < v.size(); ++i) {
        const auto n = json_count<E>(v[i]);
        ok = n.has_value();
        if (ok) values.push_back(*n);
      }
      if (ok)
        out = std::move(values);
      else
        fail(path,
             "expected an array of whole numbers" + json_count_range<E>() + ", got " + v.dump());
    } else {
      try {
        out = v.get<T>();
      } catch (const std::exception&) {
        fail(path, std::string("expected ") + describe<T>() + ", got " + v.dump());
      }
    }
  }
  void get_ports(const json& obj, const std::string& key, const std::string& path,
                 std::vector<std::uint16_t>& out) {
    if (!error.empty() || !obj.contains(key)) return;
    const json& v = obj.at(key);
    if (!v.is_array()) {
      fail(path, "expected an array of ports, got " + v.dump());
      return;
    }
    out.clear();
    for (const auto& p : v) {
      const auto port = json_count<std::uint16_t>(p);
      if (!port || *port == 0) {
        fail(path, "ports are integers from 1 to 65535, got " + p.dump());
        return;
      }
      out.push_back(*port);
    }
  }
  template <typename T>
  static const char* describe() {
    if constexpr (std::is_same_v<T, bool>)
      return "true or false";
    else if constexpr (std::is_same_v<T, std::string>)
      return "a string";
    else if constexpr (std::is_arithmetic_v<T>)
      return "a number";
    else
      return "an array";
  }
};

}  // namespace

Result<Config> parse_config(std::string_view text) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {  // a syntax error, or a number no double holds (1e999)
    return make_error(std::string("config is not valid JSON: ") + e.what());
  }
  Config c;
  Reader r;
  if (!r.check_keys(
          doc, "",
          {"listen", "targets", "kafka_ports", "object_store", "log_dirs", "log_dirs_inotify",
           "log_dirs_rescan_seconds", "price_table", "sensors", "state_dir", "ledger", "audit_log",
           "capture", "attribution_enabled", "budgets"}))
    return make_error(r.error);
  r.get(doc, "listen", "listen", c.listen);
  r.get_ports(doc, "kafka_ports", "kafka_ports", c.kafka_ports);
  r.get(doc, "log_dirs", "log_dirs", c.log_dirs);
  r.get(doc, "log_dirs_inotify", "log_dirs_inotify", c.log_dirs_inotify);
  r.get(doc, "log_dirs_rescan_seconds", "log_dirs_rescan_seconds", c.log_dirs_rescan_seconds);
  r.get(doc, "price_table", "price_table", c.price_table);
  r.get(doc, "state_dir", "state_dir", c.state_dir);
  r.get(doc, "attribution_enabled", "attribution_enabled", c.attribution_enabled);
  if (doc.contains("targets") &&
      r.check_keys(doc["targets"], "targets", {"pids", "cmdline_match", "cgroup"})) {
    r.get(doc["targets"], "pids", "targets.pids", c.pids);
    r.get(doc["targets"], "cmdline_match", "targets.cmdline_match", c.cmdline_match);
    r.get(doc["targets"], "cgroup", "targets.cgroup", c.cgroup);
  }
  if (doc.contains("object_store") &&
      r.check_keys(doc["object_store"], "object_store",
                   {"ports", "cidrs", "hosts", "key_layout", "virtual_host_suffixes"})) {
    r.get_ports(doc["object_store"], "ports", "object_store.ports", c.object_store_ports);
    r.get(doc["object_store"], "cidrs", "object_store.cidrs", c.object_store_cidrs);
    r.get(doc["object_store"], "hosts", "object_store.hosts", c.object_store_hosts);
    r.get(doc["object_store"], "key_layout", "object_store.key_layout", c.key_layout);
    r.get(doc["object_store"], "virtual_host_suffixes", "object_store.virtual_host_suffixes",
          c.virtual_host_suffixes);
  }
  if (doc.contains("sensors") &&
      r.check_keys(doc["sensors"], "sensors",
                   {"max_sensors", "idle_expiry_seconds", "partition_label"})) {
    r.get(doc["sensors"], "max_sensors", "sensors.max_sensors", c.max_sensors);
    r.get(doc["sensors"], "idle_expiry_seconds", "sensors.idle_expiry_seconds",
          c.idle_expiry_seconds);
    r.get(doc["sensors"], "partition_label", "sensors.partition_label", c.partition_label);
  }
  if (doc.contains("ledger") &&
      r.check_keys(doc["ledger"], "ledger", {"retention_days", "hourly_days"})) {
    r.get(doc["ledger"], "retention_days", "ledger.retention_days", c.ledger_retention_days);
    r.get(doc["ledger"], "hourly_days", "ledger.hourly_days", c.ledger_hourly_days);
  }
  if (doc.contains("audit_log") &&
      r.check_keys(doc["audit_log"], "audit_log", {"path", "max_bytes", "keep"})) {
    r.get(doc["audit_log"], "path", "audit_log.path", c.audit_log_path);
    r.get(doc["audit_log"], "max_bytes", "audit_log.max_bytes", c.audit_log_max_bytes);
    r.get(doc["audit_log"], "keep", "audit_log.keep", c.audit_log_keep);
  }
  if (doc.contains("capture") &&
      r.check_keys(doc["capture"], "capture",
                   {"ring_kib_per_cpu", "wakeup_kib", "capture_bytes", "object_store_head_bytes",
                    "tls_libraries", "drain_nice", "realtime_reader", "pass_interval_ms",
                    "drain_yields", "program_stats", "skip_quiet_fetches"})) {
    r.get(doc["capture"], "ring_kib_per_cpu", "capture.ring_kib_per_cpu", c.ring_kib_per_cpu);
    r.get(doc["capture"], "wakeup_kib", "capture.wakeup_kib", c.wakeup_kib);
    r.get(doc["capture"], "capture_bytes", "capture.capture_bytes", c.capture_bytes);
    r.get(doc["capture"], "object_store_head_bytes", "capture.object_store_head_bytes",
          c.object_store_head_bytes);
    r.get(doc["capture"], "tls_libraries", "capture.tls_libraries", c.tls_libraries);
    r.get(doc["capture"], "drain_nice", "capture.drain_nice", c.drain_nice);
    r.get(doc["capture"], "realtime_reader", "capture.realtime_reader", c.realtime_reader);
    r.get(doc["capture"], "pass_interval_ms", "capture.pass_interval_ms", c.pass_interval_ms);
    r.get(doc["capture"], "drain_yields", "capture.drain_yields", c.drain_yields);
    r.get(doc["capture"], "program_stats", "capture.program_stats", c.program_stats);
    r.get(doc["capture"], "skip_quiet_fetches", "capture.skip_quiet_fetches", c.skip_quiet_fetches);
  }
  if (doc.contains("budgets") &&
      r.check_keys(doc["budgets"], "budgets",
                   {"limits", "window_seconds", "repeat_seconds", "command", "webhook"})) {
    const json& b = doc["budgets"];
    r.get(b, "window_seconds", "budgets.window_seconds", c.budgets.window_seconds);
    r.get(b, "repeat_seconds", "budgets.repeat_seconds", c.budgets.repeat_seconds);
    r.get(b, "command", "budgets.command", c.budgets.command);
    r.get(b, "webhook", "budgets.webhook", c.budgets.webhook);
    if (b.contains("limits") && !b["limits"].is_array())
      r.fail("budgets.limits", "expected an array of {\"client_id\"|\"group_id\", \"per_hour\"}");
    if (b.contains("limits") && b["limits"].is_array()) {
      for (std::size_t i = 0; i < b["limits"].size() && r.error.empty(); ++i) {
        const std::string where = "budgets.limits[" + std::to_string(i) + "]";
        const json& item = b["limits"][i];
        if (!r.check_keys(item, where, {"client_id", "group_id", "per_hour"})) break;
        BudgetLimit limit;
        r.get(item, "client_id", where + ".client_id", limit.client_id);
        r.get(item, "group_id", where + ".group_id", limit.group_id);
        limit.per_hour = -1;
        r.get(item, "per_hour", where + ".per_hour", limit.per_hour);
        if (!r.error.empty()) break;
        if (limit.client_id.empty() == limit.group_id.empty())
          r.fail(where, "set exactly one of client_id or group_id");
        else if (!(limit.per_hour > 0))
          r.fail(where + ".per_hour", "money per hour, a positive number (e.g. 0.5)");
        c.budgets.limits.push_back(limit);
      }
    }
  }
  if (!r.error.empty()) return make_error(r.error);
  if (!(c.budgets.window_seconds >= 1 && c.budgets.window_seconds <= 86400))
    return make_error("config field \"budgets.window_seconds\": must be from 1 to 86400");
  if (!(c.budgets.repeat_seconds >= 1))
    return make_error("config field \"budgets.repeat_seconds\": must be at least 1");
  if (!c.budgets.webhook.empty() && c.budgets.webhook.rfind("http://", 0) != 0)
    return make_error(
        "config field \"budgets.webhook\": expected an http://host:port/path URL "
        "(for https, point it at a local relay), got \"" +
        c.budgets.webhook + "\"");
  if (c.max_sensors < 1 || c.max_sensors > 10'000'000)
    return make_error("config field \"sensors.max_sensors\": must be from 1 to 10000000");
  if (!(c.log_dirs_rescan_seconds >= 1 && c.log_dirs_rescan_seconds <= 3600))
    return make_error("config field \"log_dirs_rescan_seconds\": must be from 1 to 3600");
  if (c.idle_expiry_seconds <= 0)
    return make_error("config field \"sensors.idle_expiry_seconds\": must be positive");
  if (c.ring_kib_per_cpu < 4 || c.ring_kib_per_cpu > (1u << 20))
    return make_error("config field \"capture.ring_kib_per_cpu\": must be from 4 to 1048576");
  if (c.wakeup_kib >= c.ring_kib_per_cpu)
    return make_error(
        "config field \"capture.wakeup_kib\": must be below capture.ring_kib_per_cpu (0 = half "
        "the ring, at most 512)");
  if (c.drain_nice < -20 || c.drain_nice > 19)
    return make_error("config field \"capture.drain_nice\": must be from -20 to 19");
  if (c.pass_interval_ms < 1 || c.pass_interval_ms > 100)
    return make_error("config field \"capture.pass_interval_ms\": must be from 1 to 100");
  if (c.capture_bytes > 16384)
    return make_error("config field \"capture.capture_bytes\": at most 16384");
  if (c.object_store_head_bytes > 16384)
    return make_error(
        "config field \"capture.object_store_head_bytes\": at most 16384 (0 = capture_bytes)");
  if (c.ledger_retention_days < 0 || c.ledger_retention_days > 36500)
    return make_error(
        "config field \"ledger.retention_days\": days from 0 (keep everything) to 36500");
  if (c.ledger_hourly_days < 0 || c.ledger_hourly_days > 36500)
    return make_error("config field \"ledger.hourly_days\": days from 0 (stay hourly) to 36500");
  if (c.audit_log_keep < 0 || c.audit_log_max_bytes < 4096)
    return make_error("config field \"audit_log\": keep >= 0 and max_bytes >= 4096");
  for (const int pid : c.pids) {
    if (pid < 1)
      return make_error("config field \"targets.pids\": process ids start at 1, got " +
                        std::to_string(pid));
  }
  for (const auto& lib : c.tls_libraries) {
    if (lib != "openssl" && lib != "gnutls" && lib != "boringssl")
      return make_error("config field \"capture.tls_libraries\": unknown library \"" + lib +
                        "\" (known: openssl, boringssl, gnutls)");
  }
  for (const auto& cidr : c.object_store_cidrs) {
    if (auto parsed = pipeline::parse_cidr(cidr); !parsed)
      return make_error("config field \"object_store.cidrs\": " + parsed.error().message);
  }
  if (c.listen.find(':') == std::string::npos)
    return make_error("config field \"listen\": expected host:port, got \"" + c.listen + "\"");
  return c;
}

Result<Config> load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) return make_error("cannot read the config file " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto c = parse_config(ss.str());
  if (!c) return make_error(path + ": " + c.error().message);
  return c;
}

}  // namespace fc::daemon
