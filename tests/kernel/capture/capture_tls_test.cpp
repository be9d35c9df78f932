// Kernel test: TLS plaintext through uprobes. OpenSSL and GnuTLS client/server pairs inside a
// target process, and curl against `openssl s_server -WWW` (both targets): the plaintext each
// side captures equals the plaintext the other side sent, bound to the right TCP connection;
// the ciphertext of those connections is suppressed; a skipped library is not hooked.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "harness.h"
#include "testing.h"

using namespace fc::capture_test;
using fc::capture::Variant;

namespace {

// An OpenSSL server and client over `p`, handshake done. False if any step failed.
bool openssl_handshake(const Pair& p, const CertDir& certs, SSL** server, SSL** client) {
  SSL_CTX* sctx = SSL_CTX_new(TLS_server_method());
  SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
  if (SSL_CTX_use_certificate_file(sctx, certs.cert.c_str(), SSL_FILETYPE_PEM) != 1 ||
      SSL_CTX_use_PrivateKey_file(sctx, certs.key.c_str(), SSL_FILETYPE_PEM) != 1)
    return false;
  SSL* s = SSL_new(sctx);
  SSL* c = SSL_new(cctx);
  SSL_set_fd(s, p.server);
  SSL_set_fd(c, p.client);
  int accepted = 0;
  std::thread st([&] { accepted = SSL_accept(s); });
  const int connected = SSL_connect(c);
  st.join();
  *server = s;
  *client = c;
  return connected == 1 && accepted == 1;
}

// An OpenSSL pair over loopback, handshake done, its ports reported (client, then listener);
// returns once the parent has hooked the target. 0, or the scenario's exit code for the failure.
int openssl_pair_reported(Child& self, const CertDir& certs, Pair& p, SSL** server, SSL** client) {
  if (!open_pair(p, AF_INET, false)) return 10;
  if (!openssl_handshake(p, certs, server, client)) return 12;
  self.report(p.client_port);
  self.report(p.listen_port);
  self.wait_parent();
  return 0;
}

const std::string kRequest1 = pattern(1000, 101);
const std::string kRequest2 = pattern(5000, 102);
const std::string kResponse = pattern(7000, 103);

int openssl_scenario(Child& self, const CertDir& certs) {
  Pair p;
  SSL *s = nullptr, *c = nullptr;
  if (int rc = openssl_pair_reported(self, certs, p, &s, &c)) return rc;
  // client -> server: SSL_write then SSL_write_ex; server reads with SSL_read.
  if (SSL_write(c, kRequest1.data(), static_cast<int>(kRequest1.size())) !=
      static_cast<int>(kRequest1.size()))
    return 13;
  std::size_t written = 0;
  if (SSL_write_ex(c, kRequest2.data(), kRequest2.size(), &written) != 1 ||
      written != kRequest2.size())
    return 14;
  std::string got;
  char buf[16384];
  while (got.size() < kRequest1.size() + kRequest2.size()) {
    int n = SSL_read(s, buf, sizeof(buf));
    if (n <= 0) return 15;
    got.append(buf, static_cast<std::size_t>(n));
  }
  if (got != kRequest1 + kRequest2) return 16;
  // server -> client: SSL_write_ex; client reads with SSL_read_ex.
  if (SSL_write_ex(s, kResponse.data(), kResponse.size(), &written) != 1) return 17;
  got.clear();
  while (got.size() < kResponse.size()) {
    std::size_t n = 0;
    if (SSL_read_ex(c, buf, sizeof(buf), &n) != 1) return 18;
    got.append(buf, n);
  }
  if (got != kResponse) return 19;
  self.report(1);
  self.wait_parent();
  return 0;
}

// The server blocks in SSL_read (the client sends nothing) until the parent has looked, then
// the client writes and the read returns.
int openssl_blocked_read_scenario(Child& self, const CertDir& certs) {
  Pair p;
  SSL *s = nullptr, *c = nullptr;
  if (int rc = openssl_pair_reported(self, certs, p, &s, &c)) return rc;
  int n = 0;
  char buf[16384];
  std::thread reader([&] { n = SSL_read(s, buf, sizeof(buf)); });
  self.report(2);
  self.wait_parent();
  const int wrote = SSL_write(c, kRequest1.data(), static_cast<int>(kRequest1.size()));
  reader.join();
  if (wrote != static_cast<int>(kRequest1.size()) || n <= 0) return 13;
  self.report(1);
  self.wait_parent();
  return 0;
}

int gnutls_scenario(Child& self, const CertDir& certs) {
  Pair p;
  if (!open_pair(p, AF_INET, false)) return 10;
  gnutls_certificate_credentials_t server_cred, client_cred;
  gnutls_certificate_allocate_credentials(&server_cred);
  gnutls_certificate_allocate_credentials(&client_cred);
  if (gnutls_certificate_set_x509_key_file(server_cred, certs.cert.c_str(), certs.key.c_str(),
                                           GNUTLS_X509_FMT_PEM) < 0)
    return 11;
  gnutls_session_t s, c;
  gnutls_init(&s, GNUTLS_SERVER);
  gnutls_init(&c, GNUTLS_CLIENT);
  for (auto [session, cred] : {std::pair{s, server_cred}, std::pair{c, client_cred}}) {
    gnutls_set_default_priority(session);
    gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, cred);
  }
  gnutls_transport_set_int(s, p.server);
  gnutls_transport_set_int(c, p.client);
  int accepted = -1;
  std::thread st([&] {
    do accepted = gnutls_handshake(s);
    while (accepted < 0 && gnutls_error_is_fatal(accepted) == 0);
  });
  int connected;
  do connected = gnutls_handshake(c);
  while (connected < 0 && gnutls_error_is_fatal(connected) == 0);
  st.join();
  if (connected < 0 || accepted < 0) return 12;
  self.report(p.client_port);
  self.report(p.listen_port);
  self.wait_parent();
  for (const std::string* m : {&kRequest1, &kRequest2})
    if (gnutls_record_send(c, m->data(), m->size()) != static_cast<ssize_t>(m->size())) return 13;
  std::string got;
  char buf[16384];
  while (got.size() < kRequest1.size() + kRequest2.size()) {
    ssize_t n = gnutls_record_recv(s, buf, sizeof(buf));
    if (n <= 0) return 15;
    got.append(buf, static_cast<std::size_t>(n));
  }
  if (got != kRequest1 + kRequest2) return 16;
  if (gnutls_record_send(s, kResponse.data(), kResponse.size()) !=
      static_cast<ssize_t>(kResponse.size()))
    return 17;
  got.clear();
  while (got.size() < kResponse.size()) {
    ssize_t n = gnutls_record_recv(c, buf, sizeof(buf));
    if (n <= 0) return 18;
    got.append(buf, static_cast<std::size_t>(n));
  }
  if (got != kResponse) return 19;
  self.report(1);
  self.wait_parent();
  return 0;
}

void run_pair(Variant variant, bool gnutls, bool skip_gnutls, bool record_ciphertext = false) {
  fc::testing::require_root("loading BPF programs and uprobes");
  REQUIRE(fc::capture::check_environment().ok());
  CertDir certs;
  fc::capture::Options options{.ring_bytes_per_cpu = 4 << 20,
                               .default_policy = {16384, 16384, FC_ROLE_OTHER},
                               .variant = variant};
  if (skip_gnutls) options.tls_skip = {"gnutls"};
  options.deliver_tls_ciphertext = record_ciphertext;
  Collector col(options);
  Child target(
      [&](Child& c) { return gnutls ? gnutls_scenario(c, certs) : openssl_scenario(c, certs); });
  target.go();
  const auto client_port = static_cast<std::uint16_t>(target.receive());
  const auto listen_port = static_cast<std::uint16_t>(target.receive());
  // Added after the handshake: the connections are already open (found in /proc), and the
  // TLS sessions were created before the uprobes existed.
  auto added = col.capture->add_target(target.pid());
  REQUIRE(added.ok());
  CHECK(added->existing_connections == 2);
  bool hooked = false, skipped = false;
  for (const auto& lib : added->tls) {
    INFO(lib.path << " " << lib.flavour << " " << lib.error);
    CHECK(lib.error.empty());
    if (lib.flavour == (gnutls ? "gnutls" : "openssl")) {
      if (lib.skipped)
        skipped = true;
      else
        hooked = !lib.functions.empty();
    }
  }
  CHECK(hooked == !skip_gnutls);
  CHECK(skipped == skip_gnutls);
  target.nod();
  CHECK(target.receive() == 1);
  col.drain(10);
  target.nod();
  CHECK(target.wait() == 0);

  // Existing connections came from /proc with their addresses.
  int scanned = 0;
  for (const auto& r : col.of(target.pid(), FC_EVENT_CONNECT))
    if (r.conn.origin == FC_ORIGIN_PROC_SCAN) {
      ++scanned;
      CHECK(((r.conn.local_port == client_port && r.conn.peer_port == listen_port) ||
             (r.conn.local_port == listen_port && r.conn.peer_port == client_port)));
      CHECK(r.common.fd >= 0);
    }
  CHECK(scanned == 2);

  const fc_u64 client = conn_by_ports(col, target.pid(), client_port, listen_port);
  const fc_u64 server = conn_by_ports(col, target.pid(), listen_port, client_port);
  REQUIRE(client != 0);
  REQUIRE(server != 0);
  const fc_u8 lib = gnutls ? FC_TLS_GNUTLS : FC_TLS_OPENSSL;
  const auto status = col.capture->status();
  if (skip_gnutls) {
    CHECK(col.of(target.pid(), FC_EVENT_TLS_DATA).empty());
    // The raw ciphertext is delivered as ordinary data.
    std::size_t raw = 0;
    for (const auto& r : col.of(target.pid(), FC_EVENT_DATA)) raw += r.data.length;
    CHECK(raw > 2 * (kRequest1.size() + kRequest2.size() + kResponse.size()));
    CHECK(status.totals.ciphertext_skipped == 0);
    return;
  }
  CHECK((tls_stream(col.records, client, FC_DIR_SEND, lib) == kRequest1 + kRequest2));
  CHECK((tls_stream(col.records, server, FC_DIR_RECV, lib) == kRequest1 + kRequest2));
  CHECK((tls_stream(col.records, server, FC_DIR_SEND, lib) == kResponse));
  CHECK((tls_stream(col.records, client, FC_DIR_RECV, lib) == kResponse));
  std::size_t ciphertext = 0;
  for (const auto& r : col.of(target.pid(), FC_EVENT_DATA)) {
    if (!(r.common.flags & FC_FLAG_TLS_CIPHERTEXT)) continue;
    ciphertext += r.data.length;
    CHECK(r.data.captured == 0);  // length only
  }
  if (record_ciphertext) {
    // Asked for: every socket call of these connections after the handshake is a record,
    // flagged, its bytes at least the plaintext's.
    CHECK(ciphertext > 2 * (kRequest1.size() + kRequest2.size() + kResponse.size()));
    CHECK(status.totals.ciphertext_skipped == 0);
  } else {
    // By default their socket calls are counted and never recorded.
    CHECK(ciphertext == 0);
    CHECK(status.totals.ciphertext_skipped > 0);
  }
  CHECK(status.totals.tls_events >= 4);
  CHECK(status.tls_calls_in_progress == 0);  // every call returned: none left counted
  CHECK(status.totals.drops == 0);
}

// A TCP relay that holds the client until released, so a freshly exec'd curl can be made a
// target (its TLS library mapped) before it sends its first byte.
struct HeldRelay {
  int listener = -1;
  std::uint16_t port = 0;
  std::atomic<bool> release{false};
  std::thread thread;

  explicit HeldRelay(std::uint16_t upstream_port) {
    listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&a), len) == 0);
    REQUIRE(listen(listener, 1) == 0);
    getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
    thread = std::thread([this, upstream_port] {
      int down = accept(listener, nullptr, nullptr);
      if (down < 0) return;
      while (!release) usleep(1000);
      int up = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in u{};
      u.sin_family = AF_INET;
      u.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      u.sin_port = htons(upstream_port);
      if (connect(up, reinterpret_cast<sockaddr*>(&u), sizeof(u)) != 0) {
        close(down);
        return;
      }
      pollfd fds[2] = {{down, POLLIN, 0}, {up, POLLIN, 0}};
      char buf[65536];
      for (;;) {
        if (::poll(fds, 2, 10000) <= 0) break;
        bool done = false;
        for (int i = 0; i < 2; ++i) {
          if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          ssize_t n = read(fds[i].fd, buf, sizeof(buf));
          if (n <= 0 || write(fds[1 - i].fd, buf, static_cast<std::size_t>(n)) != n) done = true;
        }
        if (done) break;
      }
      close(up);
      close(down);
    });
  }
  ~HeldRelay() {
    release = true;
    shutdown(listener, SHUT_RDWR);
    close(listener);
    if (thread.joinable()) thread.join();
  }
};

bool maps_contain(pid_t pid, const std::string& needle) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(in, line))
    if (line.find(needle) != std::string::npos) return true;
  return false;
}

bool port_listening(std::uint16_t port) {
  char want[16];
  std::snprintf(want, sizeof(want), ":%04X", port);
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state;
      f >> sl >> local >> remote >> state;
      if (state == "0A" && local.ends_with(want)) return true;
    }
  }
  return false;
}

std::uint16_t free_port() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  bind(s, reinterpret_cast<sockaddr*>(&a), len);
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

}  // namespace

TEST_CASE("OpenSSL pair: plaintext both ways, bound to its connections, sock tracepoints") {
  run_pair(Variant::kSockTracepoints, false, false);
}
TEST_CASE("OpenSSL pair: plaintext both ways, syscall tracepoints") {
  run_pair(Variant::kSyscallTracepoints, false, false);
}
// Socket calls look up their thread's TLS call only while some call is counted in progress: the
// count must never fall below the calls really in progress (their sockets would then pass as
// plaintext), nor stay above once none is (every socket call would pay the lookup again).
TEST_CASE("a TLS call in progress is counted until it returns or its target is removed") {
  fc::testing::require_root("loading BPF programs and uprobes");
  REQUIRE(fc::capture::check_environment().ok());
  CertDir certs;
  Collector col({.ring_bytes_per_cpu = 4 << 20,
                 .default_policy = {16384, 16384, FC_ROLE_OTHER},
                 .variant = Variant::kSockTracepoints});
  Child target([&](Child& c) { return openssl_blocked_read_scenario(c, certs); });
  target.go();
  target.receive();
  target.receive();
  REQUIRE(col.capture->add_target(target.pid()).ok());
  CHECK(col.capture->status().tls_calls_in_progress == 0);
  target.nod();
  CHECK(target.receive() == 2);
  // The reader thread enters SSL_read on its own schedule.
  std::int64_t during = 0;
  for (int i = 0; i < 200 && during == 0; ++i) {
    usleep(10000);
    during = col.capture->status().tls_calls_in_progress;
  }
  CHECK(during == 1);
  col.capture->remove_target(target.pid());
  CHECK(col.capture->status().tls_calls_in_progress == 0);
  target.nod();  // the read returns through a detached return probe: nothing to count out
  CHECK(target.receive() == 1);
  CHECK(col.capture->status().tls_calls_in_progress == 0);
  target.nod();
  CHECK(target.wait() == 0);
}

TEST_CASE("GnuTLS pair: plaintext both ways, sock tracepoints") {
  run_pair(Variant::kSockTracepoints, true, false);
}
TEST_CASE("GnuTLS pair: plaintext both ways, syscall tracepoints") {
  run_pair(Variant::kSyscallTracepoints, true, false);
}
TEST_CASE("GnuTLS skipped by configuration: no uprobes, ciphertext delivered") {
  run_pair(Variant::kSockTracepoints, true, true);
}
TEST_CASE("OpenSSL pair with its ciphertext recorded on request: flagged, length only") {
  run_pair(Variant::kSockTracepoints, false, false, true);
}

namespace {

// An object store over TLS (harness.h, kStoreReads): each SSL_write of the server is one
// record, read by one SSL_read of the client.
constexpr unsigned kStoreSeed = 140;

int tls_store_scenario(Child& self, const CertDir& certs) {
  Pair p;
  SSL *s = nullptr, *c = nullptr;
  // Once hooked, the listener's port is an object-store port.
  if (int rc = openssl_pair_reported(self, certs, p, &s, &c)) return rc;
  char buf[16384];
  const auto chunks = store_chunks(kStoreSeed);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if (i == 0 || i == 4) {
      const std::string request = pattern(100, 130 + static_cast<unsigned>(i));
      if (SSL_write(c, request.data(), 100) != 100 || SSL_read(s, buf, sizeof(buf)) != 100)
        return 13;
    }
    const std::string& chunk = chunks[i];
    const int n = static_cast<int>(chunk.size());
    if (SSL_write(s, chunk.data(), n) != n || SSL_read(c, buf, sizeof(buf)) != n) return 14;
  }
  self.report(1);
  self.wait_parent();
  return 0;
}

}  // namespace

TEST_CASE("an object store's TLS response gives only the bulk prefix after its first read") {
  fc::testing::require_root("loading BPF programs and uprobes");
  REQUIRE(fc::capture::check_environment().ok());
  CertDir certs;
  Collector col({.ring_bytes_per_cpu = 4 << 20,
                 .default_policy = {4096, 4096, FC_ROLE_OTHER},
                 .variant = Variant::kSockTracepoints});
  Child target([&](Child& c) { return tls_store_scenario(c, certs); });
  target.go();
  const auto client_port = static_cast<std::uint16_t>(target.receive());
  const auto listen_port = static_cast<std::uint16_t>(target.receive());
  REQUIRE(col.capture->add_target(target.pid()).ok());
  REQUIRE(col.capture
              ->set_port_policy(listen_port, true, {4096, 4096, FC_ROLE_OBJECT_STORE, 16384, 256})
              .ok());
  target.nod();
  CHECK(target.receive() == 1);
  col.drain(10);
  target.nod();
  CHECK(target.wait() == 0);
  const fc_u64 client = conn_by_ports(col, target.pid(), client_port, listen_port);
  REQUIRE(client != 0);
  std::vector<Record> reads;
  for (const auto& r : col.of(target.pid(), FC_EVENT_TLS_DATA))
    if (r.common.conn_id == client && r.data.direction == FC_DIR_RECV) reads.push_back(r);
  check_prefixes(reads, store_chunks(kStoreSeed), kStoreCaptured, FC_ROLE_OBJECT_STORE);
}

// The server is gnutls-serv --http (GnuTLS), the client curl (OpenSSL): both libraries at once.
// (`openssl s_server -WWW` would not do: it reads through OpenSSL's SSL BIO, which calls the
// library's internal read/write functions, not the SSL_read/SSL_write entry points.)
TEST_CASE("curl over https against gnutls-serv --http: both sides see the same plaintext") {
  fc::testing::require_root("loading BPF programs and uprobes");
  REQUIRE(fc::capture::check_environment().ok());
  CertDir certs;
  Collector col({.ring_bytes_per_cpu = 4 << 20, .default_policy = {16384, 16384, FC_ROLE_OTHER}});
  const std::uint16_t server_port = free_port();
  Child server([&](Child&) {
    const std::string port = std::to_string(server_port);
    int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    execlp("gnutls-serv", "gnutls-serv", "--http", "-q", "-p", port.c_str(), "--x509certfile",
           certs.cert.c_str(), "--x509keyfile", certs.key.c_str(), static_cast<char*>(nullptr));
    return 127;
  });
  server.go();
  // Wait for the server to listen, then watch it.
  bool listening = false;
  for (int i = 0; i < 500 && !listening; ++i) {
    usleep(10000);
    listening = maps_contain(server.pid(), "libgnutls") && port_listening(server_port);
  }
  REQUIRE(listening);
  auto server_added = col.capture->add_target(server.pid());
  REQUIRE(server_added.ok());
  bool server_hooked = false;
  for (const auto& lib : server_added->tls)
    if (lib.flavour == "gnutls" && lib.functions.size() == 2) server_hooked = true;
  CHECK(server_hooked);

  HeldRelay relay(server_port);
  const std::string url = "https://localhost:" + std::to_string(relay.port) + "/page";
  char out_path[] = "/tmp/fc-curl-out-XXXXXX";
  int out_fd = mkstemp(out_path);
  REQUIRE(out_fd >= 0);
  close(out_fd);
  Child curl([&](Child&) {
    execlp("curl", "curl", "-sS", "-k", "--http1.1", "-o", out_path, url.c_str(),
           static_cast<char*>(nullptr));
    return 127;
  });
  curl.go();
  for (int i = 0; i < 500 && !maps_contain(curl.pid(), "libssl"); ++i) usleep(10000);
  usleep(100000);  // curl is connecting to the held relay; its libraries are mapped
  auto added = col.capture->add_target(curl.pid());
  REQUIRE(added.ok());
  bool curl_hooked = false;
  for (const auto& lib : added->tls)
    if (lib.flavour == "openssl" && !lib.functions.empty()) curl_hooked = true;
  CHECK(curl_hooked);
  relay.release = true;
  CHECK(curl.wait() == 0);
  usleep(100000);
  col.drain(10);
  std::string body;  // what curl saved: the response body, ground truth from curl itself
  {
    std::ifstream got(out_path, std::ios::binary);
    body.assign((std::istreambuf_iterator<char>(got)), std::istreambuf_iterator<char>());
  }
  unlink(out_path);
  REQUIRE(body.size() > 100);

  // Plaintext per process and direction (one TLS connection each).
  auto stream = [&](pid_t pid, fc_u8 dir) {
    std::vector<Record> evs = col.of(pid, FC_EVENT_TLS_DATA);
    std::erase_if(evs, [&](const Record& r) { return r.data.direction != dir; });
    std::sort(evs.begin(), evs.end(), [](const Record& a, const Record& b) {
      return a.data.stream_pos < b.data.stream_pos;
    });
    std::string s;
    for (const auto& e : evs) {
      CHECK(e.data.stream_pos == s.size());
      CHECK(e.data.captured == e.data.length);
      CHECK((e.common.flags & FC_FLAG_TLS_UNBOUND) == 0);
      s += e.payload;
    }
    return s;
  };
  const std::string curl_sent = stream(curl.pid(), FC_DIR_SEND);
  const std::string curl_got = stream(curl.pid(), FC_DIR_RECV);
  const std::string server_got = stream(server.pid(), FC_DIR_RECV);
  const std::string server_sent = stream(server.pid(), FC_DIR_SEND);
  // Compared as booleans: the test never prints captured bytes.
  CHECK(curl_sent.starts_with("GET /page HTTP/1.1\r\n"));
  CHECK(curl_sent.ends_with("\r\n\r\n"));
  CHECK((server_got == curl_sent));
  CHECK((server_sent == curl_got));
  CHECK(curl_got.ends_with(body));
  CHECK(curl_got.starts_with("HTTP/1.0 200 OK\r\n"));
}
