// Helper of kernel_capture_boringssl: a TLS client and server in one process, both BoringSSL
// (Debian's android-libboringssl, the BoringSSL that netty-tcnative ships). It cannot share a
// process with the test, whose OpenSSL 3 defines the same symbols.
//
//   boringssl_pair CERT KEY                  libssl linked normally (found as a library)
//   boringssl_pair CERT KEY --dlopen LIBSSL  netty-tcnative's way: LIBSSL is copied to
//       /tmp/libnetty_tcnative_linux_x86_64_<pid>.so, loaded with dlopen and deleted, so only the
//       mapping of a deleted file with BoringSSL's symbols inside is left to find.
//
// Protocol on stdin/stdout: after the handshake it prints "ports <client> <listener>" and waits
// for a line; then the client sends pattern(1000, 201) + pattern(5000, 202) with SSL_write, the
// server answers pattern(7000, 203), each side checks what it read; it prints "done" and waits
// for a line before exiting. Exit codes 10+ say which step failed.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include "pattern.h"

namespace {

using fc::capture_test::pattern;

// The BoringSSL entry points used, resolved either at link time or through dlsym.
struct Api {
  decltype(&TLS_method) tls_method = nullptr;
  decltype(&SSL_CTX_new) ctx_new = nullptr;
  decltype(&SSL_CTX_use_certificate_file) use_cert = nullptr;
  decltype(&SSL_CTX_use_PrivateKey_file) use_key = nullptr;
  decltype(&SSL_new) ssl_new = nullptr;
  decltype(&SSL_set_fd) set_fd = nullptr;
  decltype(&SSL_accept) accept = nullptr;
  decltype(&SSL_connect) connect = nullptr;
  decltype(&SSL_read) read = nullptr;
  decltype(&SSL_write) write = nullptr;
};

#ifdef FC_BORINGSSL_LINKED
bool linked_api(Api& a) {
  a = {TLS_method,
       SSL_CTX_new,
       SSL_CTX_use_certificate_file,
       SSL_CTX_use_PrivateKey_file,
       SSL_new,
       SSL_set_fd,
       SSL_accept,
       SSL_connect,
       SSL_read,
       SSL_write};
  return true;
}
#else
bool linked_api(Api&) {
  return false;
}
#endif

template <typename F>
bool resolve(void* lib, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(lib, name));
  return out != nullptr;
}

bool dlopen_api(const std::string& libssl, Api& a) {
  const std::string copy =
      "/tmp/libnetty_tcnative_linux_x86_64_" + std::to_string(getpid()) + ".so";
  std::error_code ec;
  std::filesystem::copy_file(libssl, copy, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return false;
  void* lib = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::filesystem::remove(copy, ec);
  if (!lib) return false;
  return resolve(lib, "TLS_method", a.tls_method) && resolve(lib, "SSL_CTX_new", a.ctx_new) &&
         resolve(lib, "SSL_CTX_use_certificate_file", a.use_cert) &&
         resolve(lib, "SSL_CTX_use_PrivateKey_file", a.use_key) &&
         resolve(lib, "SSL_new", a.ssl_new) && resolve(lib, "SSL_set_fd", a.set_fd) &&
         resolve(lib, "SSL_accept", a.accept) && resolve(lib, "SSL_connect", a.connect) &&
         resolve(lib, "SSL_read", a.read) && resolve(lib, "SSL_write", a.write);
}

std::uint16_t port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

bool read_exactly(const Api& api, SSL* ssl, std::size_t n, std::string& out) {
  char buf[16384];
  while (out.size() < n) {
    const int got = api.read(ssl, buf, sizeof(buf));
    if (got <= 0) return false;
    out.append(buf, static_cast<std::size_t>(got));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && !(argc == 5 && std::string(argv[3]) == "--dlopen")) {
    std::fprintf(stderr, "usage: boringssl_pair CERT KEY [--dlopen LIBSSL]\n");
    return 2;
  }
  Api api;
  if (!(argc == 5 ? dlopen_api(argv[4], api) : linked_api(api))) return 10;

  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(listener, 1) != 0)
    return 11;
  a.sin_port = htons(port_of(listener));
  int client = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(client, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 11;
  int server = accept(listener, nullptr, nullptr);
  if (server < 0) return 11;

  SSL_CTX* sctx = api.ctx_new(api.tls_method());
  SSL_CTX* cctx = api.ctx_new(api.tls_method());
  if (api.use_cert(sctx, argv[1], SSL_FILETYPE_PEM) != 1 ||
      api.use_key(sctx, argv[2], SSL_FILETYPE_PEM) != 1)
    return 12;
  SSL* s = api.ssl_new(sctx);
  SSL* c = api.ssl_new(cctx);
  api.set_fd(s, server);
  api.set_fd(c, client);
  int accepted = 0;
  std::thread t([&] { accepted = api.accept(s); });
  const int connected = api.connect(c);
  t.join();
  if (connected != 1 || accepted != 1) return 13;

  std::cout << "ports " << port_of(client) << " " << port_of(listener) << std::endl;
  std::string line;
  if (!std::getline(std::cin, line)) return 14;

  const std::string request = pattern(1000, 201) + pattern(5000, 202);
  const std::string response = pattern(7000, 203);
  if (api.write(c, request.data(), 1000) != 1000 ||
      api.write(c, request.data() + 1000, 5000) != 5000)
    return 15;
  std::string got;
  if (!read_exactly(api, s, request.size(), got) || got != request) return 16;
  if (api.write(s, response.data(), static_cast<int>(response.size())) !=
      static_cast<int>(response.size()))
    return 17;
  got.clear();
  if (!read_exactly(api, c, response.size(), got) || got != response) return 18;

  std::cout << "done" << std::endl;
  std::getline(std::cin, line);
  return 0;
}
