// The Kafka side of the simulator: listeners, network threads, request handlers, the remote
// reader pool, fetch sessions and a one-broker group coordinator.
#pragma once

#include <openssl/ssl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ledger.h"
#include "log.h"

namespace tb {

struct BrokerConfig {
  std::string listen_host = "127.0.0.1";
  int port = 0;
  int tls_port = -1;  // -1: no TLS listener
  std::string tls_cert, tls_key;
  std::string advertised_host = "127.0.0.1";
  int network_threads = 2;
  int handler_threads = 4;
  int remote_reader_threads = 4;
  bool all_remote_partitions = false;  // Kafka 4.2: every remote partition of a fetch is read
  // Answer Produce v3-8 with an empty response and drop its records (a load for the capture's
  // receive path; nothing is appended). Off: Produce is refused, as ever.
  bool accept_produce = false;
  int remote_fetch_max_wait_ms = 500;
  int group_initial_delay_ms = 3000;  // group.initial.rebalance.delay.ms
  int node_id = 1;
  int fetch_max_version = 17;
  // Plaintext requests read as a JVM broker's NetworkReceive reads them: the 4-byte size
  // prefix in one read, then the rest in another (else as much as one read returns).
  bool read_size_prefix_first = false;
  // SASL/PLAIN users (name → password); empty: SASL is neither advertised nor served.
  std::map<std::string, std::string> sasl_plain_users;
  bool wake_parked_fetches = false;  // set when an appender runs (see notify_appended)  // lower it
                                     // to make a client use an older Fetch version
};

class Broker;
struct BrokerDeleter {
  void operator()(Broker* b) const;
};
using BrokerPtr = std::unique_ptr<Broker, BrokerDeleter>;

// Starts every thread; stop_broker() joins them.
BrokerPtr start_broker(BrokerConfig config, LogStore* log, Ledger* ledger, std::string* error);
void stop_broker(Broker* b);
void notify_appended(Broker* b);  // records were appended: wake fetches waiting for data
int broker_port(Broker* b);
int broker_tls_port(Broker* b);
nlohmann::json broker_stats(Broker* b);
nlohmann::json broker_groups(Broker* b);  // members, generation, committed offsets

}  // namespace tb
