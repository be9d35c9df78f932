// The same pcap of real client traffic decoded by `fetchcost decode` and by tshark's Kafka
// dissector: every request tshark reports must be in fetchcost's output with the same client_id,
// api key/version and correlation id, and (Fetch v4–v11, whose bodies tshark 4.0 decodes) the
// same topics, partitions and fetch offsets in the same order.
#include <doctest/doctest.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE_MESSAGE(pipe, "cannot run " << command);
  char buf[65536];
  std::size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  int rc = pclose(pipe);
  REQUIRE_MESSAGE(rc == 0, command << " failed: " << rc);
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, sep)) out.push_back(item);
  return out;
}

}  // namespace

TEST_CASE("fetchcost decode agrees with tshark on every request tshark decodes") {
  const std::string port = std::to_string(BROKER_PORT);
  // fetchcost: key (client port, correlation id).
  std::map<std::pair<std::string, long>, nlohmann::json> decoded;
  std::istringstream lines(
      run(std::string(FETCHCOST_BIN) + " decode --pcap " PCAP_FILE " --port " + port));
  for (std::string line; std::getline(lines, line);) {
    auto j = nlohmann::json::parse(line);
    std::string conn = j["connection"];  // "ip:port->ip:port"
    std::string client = conn.substr(0, conn.find("->"));
    std::string client_port = client.substr(client.rfind(':') + 1);
    decoded[{client_port, j["correlation_id"].get<long>()}] = j;
  }
  REQUIRE(decoded.size() >= 20);

  std::string tshark = run(
      "tshark -r " PCAP_FILE " -d tcp.port==" + port + ",kafka -Y 'kafka && tcp.dstport==" + port +
      "' -T fields -E separator='|' -e tcp.srcport -e kafka.client_id -e kafka.api_key"
      " -e kafka.api_version -e kafka.correlation_id -e kafka.topic_name -e kafka.partition_id"
      " -e kafka.offset 2>/dev/null");
  std::istringstream rows(tshark);
  std::size_t requests = 0, fetch_bodies = 0, partitions = 0;
  for (std::string row; std::getline(rows, row);) {
    auto f = split(row, '|');
    f.resize(8);
    auto keys = split(f[2], ',');
    INFO("tshark: " << row);
    REQUIRE(keys.size() == 1);  // one request per packet in this capture
    ++requests;
    auto it = decoded.find({f[0], std::stol(f[4])});
    REQUIRE_MESSAGE(it != decoded.end(), "fetchcost did not report this request");
    const auto& j = it->second;
    CHECK(j["client_id"] == f[1]);
    CHECK(j["api_key"].get<int>() == std::stoi(f[2]));
    CHECK(j["version"].get<int>() == std::stoi(f[3]));
    const int version = std::stoi(f[3]);
    if (j["api_key"] != 1 || version > 11) continue;  // tshark 4.0: Fetch bodies up to v11
    ++fetch_bodies;
    std::vector<std::string> topics, parts, offsets;
    for (const auto& t : j["fetch"]["topics"]) {
      topics.push_back(t["topic"]);
      for (const auto& p : t["partitions"]) {
        parts.push_back(std::to_string(p["partition"].get<int>()));
        offsets.push_back(std::to_string(p["fetch_offset"].get<long long>()));
      }
    }
    CHECK(topics == split(f[5], ','));
    CHECK(parts == split(f[6], ','));
    CHECK(offsets == split(f[7], ','));
    partitions += parts.size();
  }
  CHECK(requests == decoded.size());  // nothing tshark misses or fetchcost invents
  CHECK(fetch_bodies >= 10);
  CHECK(partitions >= 30);
}
