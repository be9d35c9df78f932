// find_tls_libraries on this process: it links OpenSSL and GnuTLS, so their libraries must be
// found by the functions they define; this executable only imports SSL_read and SSL_write
// (undefined symbols must not count), and libc defines none of them. No root: a process may read
// its own maps.
#include <doctest/doctest.h>
#include <gnutls/gnutls.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "capture/capture.h"

using fc::capture::TlsLibrary;

namespace {

// Referenced, never called with a real session: the executable's .dynsym imports these.
[[maybe_unused]] volatile bool never = false;

bool has(const std::vector<std::string>& functions, const std::string& name) {
  return std::find(functions.begin(), functions.end(), name) != functions.end();
}

const TlsLibrary* find_by_path(const std::vector<TlsLibrary>& libs, const std::string& part,
                               const std::string& flavour) {
  for (const TlsLibrary& lib : libs)
    if (lib.path.find(part) != std::string::npos && lib.flavour == flavour) return &lib;
  return nullptr;
}

}  // namespace

TEST_CASE("OpenSSL and GnuTLS are found in this process by the functions they define") {
  // Keep both libraries mapped (and the imports in .dynsym).
  REQUIRE(OpenSSL_version_num() != 0);
  REQUIRE(gnutls_check_version(nullptr) != nullptr);
  if (never) SSL_write(nullptr, nullptr, SSL_read(nullptr, nullptr, 0));

  const std::vector<TlsLibrary> libs = fc::capture::find_tls_libraries(getpid());
  std::string seen;
  for (const TlsLibrary& lib : libs) seen += lib.flavour + ":" + lib.path + " ";
  INFO("found: " << seen);

  const TlsLibrary* openssl = find_by_path(libs, "libssl.so", "openssl");
  REQUIRE(openssl != nullptr);
  for (const char* f : {"SSL_read", "SSL_write", "SSL_read_ex", "SSL_write_ex"})
    CHECK_MESSAGE(has(openssl->functions, f), f);
  CHECK(openssl->host_path == "/proc/" + std::to_string(getpid()) + "/root" + openssl->path);

  const TlsLibrary* gnutls = find_by_path(libs, "libgnutls", "gnutls");
  REQUIRE(gnutls != nullptr);
  CHECK(has(gnutls->functions, "gnutls_record_recv"));
  CHECK(has(gnutls->functions, "gnutls_record_send"));

  char self[4096] = {};
  REQUIRE(readlink("/proc/self/exe", self, sizeof(self) - 1) > 0);
  for (const TlsLibrary& lib : libs) {
    CHECK_MESSAGE(lib.path != self, "imported SSL_read and SSL_write counted as definitions");
    CHECK(lib.path.find("libc.so") == std::string::npos);
    CHECK(lib.flavour != "boringssl");  // Debian's OpenSSL has no BoringSSL-only function
  }
}

TEST_CASE("a process that does not exist has no TLS libraries") {
  CHECK(fc::capture::find_tls_libraries(999999999).empty());
}
