// Kernel test: BoringSSL (Debian's android-libboringssl, the BoringSSL netty-tcnative ships)
// through uprobes. The TLS pair runs in a helper process (boringssl_pair, see its header): linked
// against libssl normally, and loaded netty-tcnative's way (a copy under another name, dlopen'ed
// and deleted) so it can only be found by its symbols in a deleted mapping. The plaintext both
// sides capture must equal what the helper sent (and verified it received), bound to the right
// TCP connections, positions contiguous from 0.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <sstream>
#include <string>

#include "harness.h"
#include "testing.h"

using namespace fc::capture_test;
using fc::capture::Variant;

namespace {

// The helper, with its stdin and stdout on pipes.
class Helper {
 public:
  explicit Helper(const std::vector<std::string>& argv) {
    int in[2], out[2];
    REQUIRE(pipe(in) == 0);
    REQUIRE(pipe(out) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      dup2(in[0], 0);
      dup2(out[1], 1);
      close(in[0]);
      close(in[1]);
      close(out[0]);
      close(out[1]);
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(in[0]);
    close(out[1]);
    to_ = in[1];
    from_ = fdopen(out[0], "r");
  }
  ~Helper() {
    if (!reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(to_);
    std::fclose(from_);
  }
  pid_t pid() const { return pid_; }
  std::string line() {
    char buf[256];
    if (!std::fgets(buf, sizeof(buf), from_)) return {};
    std::string s(buf);
    if (!s.empty() && s.back() == '\n') s.pop_back();
    return s;
  }
  void nod() { REQUIRE(write(to_, "\n", 1) == 1); }
  int wait() {
    int status = 0;
    REQUIRE(waitpid(pid_, &status, 0) == pid_);
    reaped_ = true;
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  FILE* from_ = nullptr;
  bool reaped_ = false;
};

void run(Variant variant, bool netty_style) {
  fc::testing::require_root("loading BPF programs and uprobes");
  REQUIRE(fc::capture::check_environment().ok());
  CertDir certs;
  Collector col({.ring_bytes_per_cpu = 4 << 20,
                 .default_policy = {16384, 16384, FC_ROLE_OTHER},
                 .variant = variant});
  std::vector<std::string> argv = {netty_style ? BORINGSSL_PAIR_DLOPEN : BORINGSSL_PAIR_LINKED,
                                   certs.cert, certs.key};
  if (netty_style) argv.insert(argv.end(), {"--dlopen", BORINGSSL_LIBSSL});
  Helper helper(argv);
  std::istringstream ports(helper.line());
  std::string word;
  unsigned client_port = 0, listen_port = 0;
  ports >> word >> client_port >> listen_port;
  REQUIRE(word == "ports");

  // Added after the handshake: connections found in /proc, the library already mapped.
  auto added = col.capture->add_target(helper.pid());
  REQUIRE(added.ok());
  CHECK(added->existing_connections == 2);
  bool hooked = false;
  for (const auto& lib : added->tls) {
    INFO(lib.path << " " << lib.flavour << " " << lib.error);
    CHECK(lib.error.empty());
    if (lib.flavour != "boringssl") continue;
    hooked = lib.functions.size() >= 2;
    if (netty_style) {
      CHECK(lib.path.find("libnetty_tcnative_linux_x86_64_") != std::string::npos);
      CHECK(lib.path.ends_with(" (deleted)"));
    } else {
      CHECK(lib.path.ends_with("/android/libssl.so.0"));
    }
  }
  CHECK(hooked);
  for (const auto& lib : added->tls) CHECK(lib.flavour != "openssl");  // told apart by symbol

  helper.nod();
  REQUIRE(helper.line() == "done");
  col.drain(10);
  helper.nod();
  CHECK(helper.wait() == 0);  // the helper checked what each side read

  const fc_u64 client = conn_by_ports(col, helper.pid(), client_port, listen_port);
  const fc_u64 server = conn_by_ports(col, helper.pid(), listen_port, client_port);
  REQUIRE(client != 0);
  REQUIRE(server != 0);
  const std::string request = pattern(1000, 201) + pattern(5000, 202);
  const std::string response = pattern(7000, 203);
  // Compared as booleans: the test never prints captured bytes.
  CHECK((tls_stream(col.records, client, FC_DIR_SEND, FC_TLS_OPENSSL) == request));
  CHECK((tls_stream(col.records, server, FC_DIR_RECV, FC_TLS_OPENSSL) == request));
  CHECK((tls_stream(col.records, server, FC_DIR_SEND, FC_TLS_OPENSSL) == response));
  CHECK((tls_stream(col.records, client, FC_DIR_RECV, FC_TLS_OPENSSL) == response));
  for (const auto& r : col.of(helper.pid(), FC_EVENT_DATA))
    CHECK((r.common.flags & FC_FLAG_TLS_CIPHERTEXT) == 0);
  const auto status = col.capture->status();
  CHECK(status.totals.ciphertext_skipped > 0);  // counted, never recorded
  CHECK(status.totals.drops == 0);
}

}  // namespace

TEST_CASE("BoringSSL linked as libssl: plaintext both ways, sock tracepoints") {
  run(Variant::kSockTracepoints, false);
}
TEST_CASE("BoringSSL linked as libssl: plaintext both ways, syscall tracepoints") {
  run(Variant::kSyscallTracepoints, false);
}
TEST_CASE("BoringSSL inside a deleted netty-tcnative-style library: found by symbol") {
  run(Variant::kSockTracepoints, true);
}
