// `fetchcost report`: chargeback per client, group and topic from the persisted ledger, read
// from <state_dir>/ledger.json directly or from a running fetchcostd's /api/v1/report.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>

#include "api_client.h"
#include "commands.h"
#include "report_model.h"

namespace {

struct ReportOptions {
  std::string endpoint = "http://127.0.0.1:9464";
  std::string state_dir;
  std::string from = "0";
  std::string to = "now";
  std::string format = "table";
  std::string currency = "USD";
};

int run_report(const ReportOptions& o) {
  using namespace fc::cli;
  const std::int64_t now = static_cast<std::int64_t>(std::time(nullptr));
  auto from = parse_time(o.from, now);
  auto to = parse_time(o.to, now);
  auto format = parse_report_format(o.format);
  for (const auto* err : {from.ok() ? nullptr : &from.error(), to.ok() ? nullptr : &to.error(),
                          format.ok() ? nullptr : &format.error()}) {
    if (err) {
      std::fprintf(stderr, "fetchcost report: %s\n", err->message.c_str());
      return 2;
    }
  }
  // "now" includes the current (partial) hour: the window end is exclusive.
  const std::int64_t end = o.to == "now" ? *to + 1 : *to;
  if (end <= *from) {
    std::fprintf(stderr, "fetchcost report: --to must be after --from\n");
    return 2;
  }
  nlohmann::json doc;
  std::string currency = o.currency;
  if (!o.state_dir.empty()) {
    const std::string path = o.state_dir + "/ledger.json";
    std::ifstream in(path);
    if (!in) {
      std::fprintf(stderr,
                   "fetchcost report: cannot read %s (is --state-dir fetchcostd's state_dir? the "
                   "ledger is written every 10 s and on exit)\n",
                   path.c_str());
      return 1;
    }
    try {
      doc = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fetchcost report: %s is not JSON (%s)\n", path.c_str(), e.what());
      return 1;
    }
  } else {
    auto answer = get_json(o.endpoint, "/api/v1/report",
                           {{"from", std::to_string(*from)}, {"to", std::to_string(end)}});
    if (!answer) {
      std::fprintf(stderr, "fetchcost report: %s (or read the ledger file with --state-dir)\n",
                   answer.error().message.c_str());
      return 1;
    }
    doc = std::move(*answer);
    currency = doc.value("currency", currency);
  }
  auto buckets = parse_ledger(doc);
  if (!buckets) {
    std::fprintf(stderr, "fetchcost report: %s\n", buckets.error().message.c_str());
    return 1;
  }
  const Report report = aggregate(*buckets, *from, end, currency);
  std::fputs(render_report(report, *format).c_str(), stdout);
  return 0;
}

}  // namespace

void add_report_command(CLI::App& app) {
  auto o = std::make_shared<ReportOptions>();
  auto* cmd = app.add_subcommand(
      "report", "Chargeback per client, group and topic (bytes, requests, cost) from the ledger");
  cmd->footer(
      "The ledger keeps hourly buckets (daily ones for days older than ledger.hourly_days):\n"
      "a bucket counts when its hour (or day) overlaps [--from, --to).\n"
      "Totals equal the sums of fetchcostd's /metrics counters over the same time (while no\n"
      "sensor has been folded into __other__ or expired).\n"
      "Times: now, unix seconds, -2h / -30m / -7d, or UTC 2026-11-29 / 2026-11-29T16:00:00Z.");
  auto* endpoint = cmd->add_option("--endpoint", o->endpoint, "fetchcostd to ask (/api/v1/report)")
                       ->capture_default_str();
  cmd->add_option("--state-dir", o->state_dir,
                  "Read <state-dir>/ledger.json directly instead (fetchcostd may be stopped)")
      ->excludes(endpoint);
  cmd->add_option("--from", o->from, "Start (default: the beginning)")->capture_default_str();
  cmd->add_option("--to", o->to, "End, exclusive")->capture_default_str();
  cmd->add_option("--format", o->format, "table, csv or json")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "csv", "json"}));
  cmd->add_option("--currency", o->currency,
                  "Currency label when reading a ledger file (the API reports its own)")
      ->capture_default_str();
  cmd->callback([o] {
    const int rc = run_report(*o);
    if (rc != 0) std::exit(rc);
  });
}
