// fetchcost: the command-line tool (decode, top, report, status, replay).
#include <CLI/CLI.hpp>

#include "base/version.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"fetchcost: attribute Kafka tiered-storage reads to clients"};
  app.set_version_flag("--version", std::string("fetchcost ") + fc::kVersion);
  app.require_subcommand(1);
  add_decode_command(app);
  add_top_command(app);
  add_report_command(app);
  add_status_command(app);
  add_replay_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
