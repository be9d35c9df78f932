// helm_config_check CONFIG.json [CONFIGMAP_DIR]: loads a config.json rendered by the chart with
// fetchcostd's own parser and its price table with the cost stage's loader. A price table under
// /etc/fetchcost/ (the ConfigMap's mount path) is read from CONFIGMAP_DIR instead.
// Exit 0 and "ok" when both load; 1 and fetchcostd's own message otherwise.
#include <cstdio>
#include <string>

#include "cost/cost.h"
#include "daemon/config.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: helm_config_check CONFIG.json [CONFIGMAP_DIR]\n");
    return 2;
  }
  auto config = fc::daemon::load_config(argv[1]);
  if (!config) {
    std::printf("config: %s\n", config.error().message.c_str());
    return 1;
  }
  std::string table = config->price_table;
  const std::string mount = "/etc/fetchcost/";
  if (argc > 2 && table.rfind(mount, 0) == 0)
    table = std::string(argv[2]) + "/" + table.substr(mount.size());
  auto prices = fc::cost::load_price_table(table);
  if (!prices) {
    std::printf("price_table: %s\n", prices.error().message.c_str());
    return 1;
  }
  std::printf("ok listen=%s state_dir=%s log_dirs=%zu currency=%s\n", config->listen.c_str(),
              config->state_dir.c_str(), config->log_dirs.size(), prices->currency.c_str());
  return 0;
}
