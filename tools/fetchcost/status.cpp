// `fetchcost status`: what a running fetchcostd watches and how: probes, targets, TLS libraries,
// drops, version and the config in force (from /api/v1/status).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "api_client.h"
#include "commands.h"

namespace {

struct StatusOptions {
  std::string endpoint = "http://127.0.0.1:9464";
  bool json = false;
};

std::string str(const nlohmann::json& doc, const char* key) {
  if (!doc.contains(key)) return "?";
  const auto& v = doc.at(key);
  return v.is_string() ? v.get<std::string>() : v.dump();
}

int run_status(const StatusOptions& o) {
  auto doc = fc::cli::get_json(o.endpoint, "/api/v1/status");
  if (!doc) {
    std::fprintf(stderr, "fetchcost status: %s\n", doc.error().message.c_str());
    return 1;
  }
  const auto& s = *doc;
  if (o.json) {
    std::printf("%s\n", s.dump(1).c_str());
    return 0;
  }
  std::printf("fetchcostd %s at %s\n", str(s, "version").c_str(), o.endpoint.c_str());
  std::printf("capture     %s, ring %s bytes/cpu, attribution %s\n", str(s, "variant").c_str(),
              str(s, "ring_bytes_per_cpu").c_str(),
              s.value("attribution_enabled", true) ? "on" : "OFF (POST /api/v1/attribution)");
  std::printf("probes      %s attached:", str(s, "probes_attached").c_str());
  std::uint64_t most_insns = 0, runs = 0, run_ns = 0;
  if (s.contains("programs"))
    for (const auto& p : s["programs"]) {
      std::printf(" %s", p.value("name", "?").c_str());
      most_insns = std::max(most_insns, p.value("verified_insns", std::uint64_t{0}));
      runs += p.value("run_count", std::uint64_t{0});
      run_ns += p.value("run_time_ns", std::uint64_t{0});
    }
  std::printf("\n");
  if (s.contains("program_stats")) {  // capture.program_stats: the kernel times the runs
    const auto& ps = s["program_stats"];
    if (const std::string error = ps.value("error", ""); !error.empty())
      std::printf("run time    not timed: %s\n", error.c_str());
    else if (ps.value("kernel_timing", false) && runs > 0)
      std::printf("run time    %.3f s in %llu runs (%.0f ns per run), every process's calls\n",
                  static_cast<double>(run_ns) / 1e9, static_cast<unsigned long long>(runs),
                  static_cast<double>(run_ns) / static_cast<double>(runs));
    else if (!ps.value("kernel_timing", false))
      std::printf("run time    not timed (capture.program_stats)\n");
    else
      std::printf("run time    timed, no runs yet\n");
  }
  if (s.contains("programs_load_seconds"))
    std::printf("verifier    programs loaded in %.2f s, at most %llu instructions walked\n",
                s.value("programs_load_seconds", 0.0), static_cast<unsigned long long>(most_insns));
  std::uint64_t drops = 0;
  std::string per_cpu;
  if (s.contains("drops_per_cpu"))
    for (const auto& d : s["drops_per_cpu"]) {
      drops += d.get<std::uint64_t>();
      per_cpu += (per_cpu.empty() ? "" : " ") + d.dump();
    }
  std::printf("events      %s captured, %s handled, drops %llu (per cpu: %s)\n",
              str(s, "events").c_str(), str(s, "handled_events").c_str(),
              static_cast<unsigned long long>(drops), per_cpu.empty() ? "-" : per_cpu.c_str());
  if (s.contains("quiet_fetches")) {  // capture.skip_quiet_fetches
    const auto& q = s["quiet_fetches"];
    if (q.value("enabled", false))
      std::printf(
          "quiet       %llu fetches left out (no object-store call in their window); held "
          "requests paused %llu times (a consumer's fetches kept causing object-store calls)\n",
          static_cast<unsigned long long>(q.value("left_out", std::uint64_t{0})),
          static_cast<unsigned long long>(q.value("pauses", std::uint64_t{0})));
    else
      std::printf(
          "quiet       every fetch recorded (capture.skip_quiet_fetches off, or the "
          "syscall variant)\n");
  }
  if (s.contains("ring_reader") && s["ring_reader"].contains("spool_limit_bytes")) {
    const auto& r = s["ring_reader"];
    constexpr double kMiB = 1 << 20;
    std::printf(
        "ring reader %s priority; drain backlog %.1f MiB (peak %.1f of %.0f MiB, past "
        "which the rings drop)\n",
        r.value("realtime", false) ? "real-time" : "normal",
        static_cast<double>(r.value("spool_bytes", std::uint64_t{0})) / kMiB,
        static_cast<double>(r.value("spool_peak_bytes", std::uint64_t{0})) / kMiB,
        static_cast<double>(r.value("spool_limit_bytes", std::uint64_t{0})) / kMiB);
  }
  if (s.contains("drain") && s["drain"].contains("yields")) {  // capture.drain_yields
    const auto& d = s["drain"];
    if (d.value("yields", false))
      std::printf(
          "drain       yields to the broker (SCHED_IDLE while it keeps up; %s now), fell "
          "behind %s times\n",
          d.value("idle_now", false) ? "idle" : "behind, normal priority",
          str(d, "promotions").c_str());
    else if (const std::string error = d.value("error", ""); !error.empty())
      std::printf("drain       normal priority: %s\n", error.c_str());
    else
      std::printf("drain       normal priority\n");
  }
  if (s.contains("local_tier")) {  // which fetches may read remotely: the broker's log dirs
    const auto& t = s["local_tier"];
    std::string dirs;
    for (const auto& d : t.value("log_dirs", nlohmann::json::array()))
      dirs += (dirs.empty() ? "" : ", ") + d.get<std::string>();
    if (!dirs.empty())
      std::printf("local tier  %s partitions in %s (from %s)\n", str(t, "partitions").c_str(),
                  dirs.c_str(), t.value("origin", "?").c_str());
    else if (const std::string error = t.value("error", ""); !error.empty())
      std::printf("local tier  none: %s\n", error.c_str());
    else
      std::printf("local tier  none yet (read from the broker once it is found)\n");
  }
  if (s.contains("broker_settings") && s["broker_settings"].value("unread", 0) > 0)
    std::printf("settings    %s watched broker(s) unread, tried again every 10 s: %s\n",
                str(s["broker_settings"], "unread").c_str(),
                s["broker_settings"].value("error", "").c_str());
  if (s.contains("target_search"))  // said only when the search cannot spare its reads
    if (const std::string error = s["target_search"].value("exec_hook_error", ""); !error.empty())
      std::printf("search      reads every process each second: %s\n", error.c_str());
  const auto targets = s.value("targets", nlohmann::json::array());
  std::printf("targets     %zu\n", targets.size());
  for (const auto& t : targets) {
    std::printf("  pid %s (%s), %s connections at attach\n", str(t, "pid").c_str(),
                str(t, "comm").c_str(), str(t, "existing_connections").c_str());
    for (const auto& l : t.value("tls", nlohmann::json::array())) {
      std::string fns;
      for (const auto& f : l.value("functions", nlohmann::json::array()))
        fns += (fns.empty() ? "" : ",") + f.get<std::string>();
      std::printf("    tls %s %s %s%s%s\n", str(l, "flavour").c_str(), str(l, "path").c_str(),
                  l.value("skipped", false) ? "(skipped by configuration)" : fns.c_str(),
                  l.value("error", "").empty() ? "" : " error: ", l.value("error", "").c_str());
    }
  }
  if (s.contains("reads"))
    std::printf("reads       exact %s, estimated %s, unattributed %s\n",
                str(s["reads"], "exact").c_str(), str(s["reads"], "estimated").c_str(),
                str(s["reads"], "unattributed").c_str());
  if (s.contains("sensors"))
    std::printf("sensors     %s live, %s __other__, %s evicted, %s expired, ~%s bytes\n",
                str(s["sensors"], "live").c_str(), str(s["sensors"], "other").c_str(),
                str(s["sensors"], "evictions").c_str(), str(s["sensors"], "expirations").c_str(),
                str(s["sensors"], "approx_memory_bytes").c_str());
  std::printf("prices      %s (%s)\n", str(s, "price_table").c_str(), str(s, "currency").c_str());
  std::printf("ledger      %s\n", str(s, "ledger").c_str());
  for (const auto& b : s.value("budgets", nlohmann::json::array())) {
    const std::string who = b.value("client_id", "").empty() ? "group " + b.value("group_id", "")
                                                             : "client " + b.value("client_id", "");
    std::printf("budget      %s: %.6f/h of %.6f/h%s\n", who.c_str(), b.value("cost_per_hour", 0.0),
                b.value("per_hour", 0.0), b.value("exceeded", false) ? "  EXCEEDED" : "");
  }
  if (s.contains("budget_actions"))
    std::printf("actions     ok %s, failed %s, skipped %s\n",
                str(s["budget_actions"], "ok").c_str(), str(s["budget_actions"], "failed").c_str(),
                str(s["budget_actions"], "skipped").c_str());
  if (s.contains("config")) std::printf("config      %s\n", s["config"].dump().c_str());
  return 0;
}

}  // namespace

void add_status_command(CLI::App& app) {
  auto o = std::make_shared<StatusOptions>();
  auto* cmd = app.add_subcommand(
      "status", "What fetchcostd watches: probes, targets, drops, version, the config in force");
  cmd->add_option("--endpoint", o->endpoint, "fetchcostd's listen URL")->capture_default_str();
  cmd->add_flag("--json", o->json, "Print /api/v1/status as JSON");
  cmd->callback([o] {
    const int rc = run_status(*o);
    if (rc != 0) std::exit(rc);
  });
}
