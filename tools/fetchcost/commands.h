// One function per `fetchcost` subcommand; each lives in its own <command>.cpp and registers
// its options and callback on the app. main.cpp calls them all.
#pragma once

namespace CLI {
class App;
}

void add_decode_command(CLI::App& app);
void add_top_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_status_command(CLI::App& app);
void add_replay_command(CLI::App& app);
