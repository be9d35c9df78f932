// tiered-broker: a single-node Kafka broker simulator with a tiered (KIP-405) remote log on an S3
// endpoint. A TEST FIXTURE for fetchcost's demo and end-to-end tests, not a Kafka broker.
#include <httplib.h>
#include <signal.h>
#include <sys/prctl.h>

#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "broker.h"
#include "ledger.h"
#include "log.h"
#include "records.h"
#include "s3.h"

namespace {

bool split_host_port(const std::string& s, std::string* host, int* port) {
  auto colon = s.rfind(':');
  if (colon == std::string::npos) return false;
  *host = s.substr(0, colon);
  try {
    *port = std::stoi(s.substr(colon + 1));
  } catch (...) {
    return false;
  }
  return !host->empty();
}

bool parse_topic(const std::string& s, tb::TopicSpec* t) {
  // NAME:PARTITIONS:MESSAGES:VALUE_SIZE (the name may itself contain ':'-free dashes and dots)
  std::vector<std::string> f;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == ':') {
      f.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  if (f.empty() || f[0].empty() || f.size() > 4) return false;
  try {
    t->name = f[0];
    if (f.size() > 1) t->partitions = std::stoi(f[1]);
    if (f.size() > 2) t->messages = std::stoll(f[2]);
    if (f.size() > 3) t->value_size = std::stoul(f[3]);
  } catch (...) {
    return false;
  }
  return t->partitions > 0 && t->messages >= 0;
}

// The value of `key` in a properties file of plain `key=value` lines; escapes and continuation
// lines are not read (this fixture is given files its own scripts write).
std::string property(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line, value;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (line.empty() || line[0] == '#' || eq == std::string::npos) continue;
    if (line.substr(0, eq) == key) value = line.substr(eq + 1);
  }
  return value;
}

// The first entry of a comma-separated value.
std::string first_of(const std::string& list) {
  std::string first;
  std::getline(std::istringstream(list), first, ',');
  return first;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "tiered-broker: a single-node Kafka broker SIMULATOR whose remote tier (KIP-405) lives on "
      "an S3 endpoint.\nIt is a test fixture for fetchcost's demo and tests, not a broker: topics "
      "are seeded at start\nwith deterministic records, Produce is not served, and nothing is "
      "replicated.\nEvery remote GET it makes is attributed to the client fetch that caused it "
      "(the ledger)."};
  app.get_formatter()->column_width(40);
  std::string listen = "127.0.0.1:0", admin_listen = "127.0.0.1:0", s3_endpoint, log_dir;
  std::string s3_transport = "http", ready_file, ledger_file;
  std::vector<std::string> topic_args;
  tb::BrokerConfig bc;
  tb::LogConfig lc;
  tb::S3Config sc;
  int produce_interval_ms = 0;
  std::string log_level = "info";
  app.add_option("--listen", listen, "Kafka PLAINTEXT listener HOST:PORT (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--tls-port", bc.tls_port,
                 "Kafka SSL listener port on the same host (OpenSSL; 0: any free port; -1: off)")
      ->capture_default_str();
  app.add_option("--tls-cert", bc.tls_cert, "PEM certificate chain for the SSL listener");
  app.add_option("--tls-key", bc.tls_key, "PEM private key for the SSL listener");
  app.add_option("--advertised-host", bc.advertised_host, "host name given to clients in Metadata")
      ->capture_default_str();
  app.add_option("--admin-listen", admin_listen,
                 "HTTP admin HOST:PORT: GET /ledger[?gets=1], /topics, /groups, /stats, /healthz")
      ->capture_default_str();
  std::string properties_file;
  app.add_option("--log-dirs", log_dir, "log directory (topic dirs in it are recreated)");
  app.add_option("properties", properties_file,
                 "server.properties, as a broker is started: its log.dirs (its first dir) is the "
                 "log directory unless --log-dirs is given, and its listeners (the first, "
                 "PLAINTEXT://HOST:PORT) the Kafka listener unless --listen is given");
  app.add_option("--topic", topic_args,
                 "topic to seed, NAME[:PARTITIONS[:MESSAGES[:VALUE_BYTES]]] (repeatable; "
                 "default scan:3:2000:1000)");
  app.add_option("--batch-records", lc.batch_records, "records per seeded batch")
      ->capture_default_str();
  app.add_option("--segment-bytes", lc.segment_bytes, "segment size (log.segment.bytes)")
      ->capture_default_str();
  app.add_option("--local-segments", lc.local_segments,
                 "segments kept locally per partition, the active one included; older ones are "
                 "only in the remote tier (local retention)")
      ->capture_default_str();
  app.add_option("--chunk-size", lc.chunk_size, "remote chunk size: one ranged GET per chunk")
      ->capture_default_str();
  app.add_option("--s3-endpoint", s3_endpoint, "S3 endpoint HOST:PORT (IPv4), path-style")
      ->required();
  app.add_option("--s3-bucket", sc.bucket, "bucket")->capture_default_str();
  app.add_option("--s3-prefix", sc.prefix, "object key prefix")->capture_default_str();
  app.add_option("--s3-transport", s3_transport,
                 "http | openssl | gnutls (gnutls stands in for an opaque JVM TLS stack)")
      ->check(CLI::IsMember({"http", "openssl", "gnutls"}))
      ->capture_default_str();
  app.add_option("--s3-read-bytes", sc.read_bytes,
                 "bytes asked of each read of an S3 response (1-65536; a JVM HTTP client reads "
                 "in smaller pieces)")
      ->check(CLI::Range(1, 65536))
      ->capture_default_str();
  app.add_option(
         "--chunk-pool-threads", lc.get_pool_threads,
         "run the S3 GETs on a pool of ForkJoinPool-1-worker-N threads (Aiven's chunk cache) "
         "instead of on the remote-log-reader threads (0: off)")
      ->capture_default_str();
  app.add_flag("--read-size-prefix-first", bc.read_size_prefix_first,
               "read each plaintext request as a JVM broker does: its 4-byte size prefix, then "
               "the rest, one request per readiness (else as much as a read returns)");
  app.add_option("--network-threads", bc.network_threads, "network (epoll) threads")
      ->capture_default_str();
  app.add_option("--handler-threads", bc.handler_threads, "request handler threads")
      ->capture_default_str();
  app.add_option("--remote-reader-threads", bc.remote_reader_threads,
                 "remote-log-reader pool size (remote.log.reader.threads)")
      ->capture_default_str();
  app.add_flag("--accept-produce", bc.accept_produce,
               "answer Produce v3-8 with an empty response and drop its records (a load for "
               "fetchcost's receive path; nothing is appended)");
  app.add_flag("--kafka-4-2", bc.all_remote_partitions,
               "read every remote partition of a fetch (Kafka 4.2); default: one per fetch "
               "(Kafka 3.6-4.1)");
  app.add_option("--remote-fetch-max-wait-ms", bc.remote_fetch_max_wait_ms,
                 "remote.fetch.max.wait.ms: answer without remote data after this long")
      ->capture_default_str();
  app.add_option("--fetch-max-version", bc.fetch_max_version,
                 "highest Fetch version advertised (4-17): steers clients to older versions")
      ->check(CLI::Range(4, 17))
      ->capture_default_str();
  app.add_option("--group-initial-rebalance-delay-ms", bc.group_initial_delay_ms,
                 "group.initial.rebalance.delay.ms: how long a new group waits for more members")
      ->capture_default_str();
  app.add_option("--produce-interval-ms", produce_interval_ms,
                 "append one batch to every partition this often, for tailing consumers (0: off)")
      ->capture_default_str();
  std::string record_marker;
  app.add_option("--record-marker", record_marker,
                 "put this string in every record value after the key (payload-leak tests)");
  std::vector<std::string> sasl_users;
  app.add_option("--sasl-plain", sasl_users,
                 "USER:PASSWORD: serve SASL/PLAIN (SASL_PLAINTEXT) with this user (repeatable)");
  app.add_option("--ready-file", ready_file,
                 "write {\"kafka_port\",\"tls_port\",\"admin_port\",\"pid\"} here once serving");
  app.add_option("--ledger-file", ledger_file, "write the ledger (JSON) here on exit");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!properties_file.empty()) {
    if (log_dir.empty()) log_dir = first_of(property(properties_file, "log.dirs"));
    if (log_dir.empty()) log_dir = property(properties_file, "log.dir");
    const std::string listener = first_of(property(properties_file, "listeners"));
    if (app.count("--listen") == 0 && listener.find("://") != std::string::npos)
      listen = listener.substr(listener.find("://") + 3);
  }
  if (log_dir.empty()) {
    std::cerr << "tiered-broker: give --log-dirs or a properties file with log.dirs\n";
    return 2;
  }
  tb::set_record_marker(record_marker);
  for (const auto& u : sasl_users) {
    const auto colon = u.find(':');
    if (colon == std::string::npos || colon == 0) {
      std::fprintf(stderr, "tiered-broker: --sasl-plain expects USER:PASSWORD\n");
      return 2;
    }
    bc.sasl_plain_users[u.substr(0, colon)] = u.substr(colon + 1);
  }
  spdlog::set_level(spdlog::level::from_str(log_level));

  if (!split_host_port(listen, &bc.listen_host, &bc.port)) {
    std::cerr << "tiered-broker: --listen must be HOST:PORT, got " << listen << "\n";
    return 2;
  }
  std::string admin_host;
  int admin_port = 0;
  if (!split_host_port(admin_listen, &admin_host, &admin_port)) {
    std::cerr << "tiered-broker: --admin-listen must be HOST:PORT, got " << admin_listen << "\n";
    return 2;
  }
  if (!split_host_port(s3_endpoint, &sc.host, &sc.port)) {
    std::cerr << "tiered-broker: --s3-endpoint must be HOST:PORT, got " << s3_endpoint << "\n";
    return 2;
  }
  if (bc.tls_port >= 0 && (bc.tls_cert.empty() || bc.tls_key.empty())) {
    std::cerr << "tiered-broker: --tls-port needs --tls-cert and --tls-key\n";
    return 2;
  }
  bc.wake_parked_fetches = produce_interval_ms > 0;
  sc.transport = s3_transport == "openssl"  ? tb::S3Transport::kOpenSsl
                 : s3_transport == "gnutls" ? tb::S3Transport::kGnuTls
                                            : tb::S3Transport::kHttp;
  if (topic_args.empty()) topic_args.push_back("scan:3:2000:1000");
  for (auto& a : topic_args) {
    tb::TopicSpec t;
    if (!parse_topic(a, &t)) {
      std::cerr << "tiered-broker: bad --topic " << a
                << " (want NAME[:PARTITIONS[:MESSAGES[:VALUE_BYTES]]])\n";
      return 2;
    }
    lc.topics.push_back(t);
  }
  lc.log_dir = log_dir;
  if (lc.chunk_size == 0 || lc.segment_bytes == 0 || lc.batch_records <= 0) {
    std::cerr << "tiered-broker: --chunk-size, --segment-bytes and --batch-records must be > 0\n";
    return 2;
  }

  // Signals are taken synchronously by the main thread; every other thread blocks them.
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  tb::S3Client s3(sc);
  tb::LogStore store(lc, &s3);
  std::string error = store.seed();
  if (!error.empty()) {
    std::cerr << "tiered-broker: seeding failed: " << error << "\n";
    return 1;
  }
  tb::Ledger ledger;
  auto broker = tb::start_broker(bc, &store, &ledger, &error);
  if (!broker) {
    std::cerr << "tiered-broker: " << error << "\n";
    return 1;
  }

  httplib::Server admin;
  admin.Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  admin.Get("/ledger", [&](const httplib::Request& req, httplib::Response& res) {
    res.set_content(ledger.to_json(req.has_param("gets"))
                        .dump(2, ' ', false, nlohmann::json::error_handler_t::replace),
                    "application/json");
  });
  admin.Get("/stats", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(tb::broker_stats(broker.get())
                        .dump(2, ' ', false, nlohmann::json::error_handler_t::replace),
                    "application/json");
  });
  admin.Get("/groups", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(tb::broker_groups(broker.get())
                        .dump(2, ' ', false, nlohmann::json::error_handler_t::replace),
                    "application/json");
  });
  admin.Get("/topics", [&](const httplib::Request&, httplib::Response& res) {
    nlohmann::json topics = nlohmann::json::array();
    for (auto& t : store.topics()) {
      nlohmann::json parts = nlohmann::json::array();
      for (auto& p : t->partitions) {
        std::lock_guard lock(p->append_mu);  // the appender grows the active segment
        nlohmann::json segs = nlohmann::json::array();
        for (auto& s : p->segments)
          segs.push_back({{"base_offset", s->base_offset},
                          {"end_offset", s->end_offset},
                          {"size", s->size},
                          {"remote", s->remote},
                          {"object", s->remote ? s->object_base : ""}});
        parts.push_back({{"partition", p->index},
                         {"log_start_offset", p->log_start_offset},
                         {"local_log_start_offset", p->local_log_start_offset},
                         {"high_watermark", p->high_watermark.load()},
                         {"dir", p->dir},
                         {"segments", segs}});
      }
      topics.push_back({{"name", t->name},
                        {"topic_id", t->id_b64},
                        {"value_size", t->value_size},
                        {"partitions", parts}});
    }
    res.set_content(topics.dump(2), "application/json");
  });
  int bound_admin = admin_port == 0
                        ? admin.bind_to_any_port(admin_host)
                        : (admin.bind_to_port(admin_host, admin_port) ? admin_port : -1);
  if (bound_admin < 0) {
    std::cerr << "tiered-broker: cannot listen on admin address " << admin_listen << "\n";
    tb::stop_broker(broker.get());
    return 1;
  }
  std::thread admin_thread([&] {
    prctl(PR_SET_NAME, "tb-admin-http", 0, 0, 0);
    admin.listen_after_bind();
  });

  std::atomic<bool> stopping{false};
  std::thread producer;
  if (produce_interval_ms > 0)
    producer = std::thread([&] {
      prctl(PR_SET_NAME, "tb-appender", 0, 0, 0);
      while (!stopping.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(produce_interval_ms));
        store.append_round();
        tb::notify_appended(broker.get());
      }
    });

  int kafka_port = tb::broker_port(broker.get());
  int tls_port = tb::broker_tls_port(broker.get());
  nlohmann::json ready = {{"kafka_port", kafka_port},
                          {"tls_port", bc.tls_port >= 0 ? tls_port : -1},
                          {"admin_port", bound_admin},
                          {"pid", getpid()}};
  spdlog::info("serving Kafka on {}:{}{}, admin on {}:{}, S3 at {} ({})", bc.listen_host,
               kafka_port, bc.tls_port >= 0 ? " and TLS port " + std::to_string(tls_port) : "",
               admin_host, bound_admin, s3_endpoint, s3_transport);
  if (!ready_file.empty()) {
    std::string tmp = ready_file + ".tmp";
    std::ofstream(tmp) << ready.dump() << "\n";
    std::rename(tmp.c_str(), ready_file.c_str());
  }

  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("signal {}: shutting down", sig);
  stopping = true;
  if (producer.joinable()) producer.join();
  admin.stop();
  admin_thread.join();
  tb::stop_broker(broker.get());
  if (!ledger_file.empty()) {
    std::string tmp = ledger_file + ".tmp";
    std::ofstream(tmp) << ledger.to_json(true).dump(2, ' ', false,
                                                    nlohmann::json::error_handler_t::replace)
                       << "\n";
    std::rename(tmp.c_str(), ledger_file.c_str());
  }
  return 0;
}
