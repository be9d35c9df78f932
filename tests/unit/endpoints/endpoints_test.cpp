// Object-store endpoint matching: CIDRs, host suffixes, and SNI from ClientHellos that OpenSSL
// and GnuTLS themselves produce (independent encoders).
#include <doctest/doctest.h>
#include <gnutls/gnutls.h>
#include <openssl/ssl.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "pipeline/endpoints.h"
#include "pipeline/pipeline.h"

using fc::pipeline::client_hello_server_name;
using fc::pipeline::ObjectStoreEndpoints;
using fc::pipeline::parse_cidr;

namespace {

std::vector<std::uint8_t> openssl_client_hello(const char* server_name) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL* ssl = SSL_new(ctx);
  BIO* in = BIO_new(BIO_s_mem());
  BIO* out = BIO_new(BIO_s_mem());
  SSL_set_bio(ssl, in, out);
  if (server_name) SSL_set_tlsext_host_name(ssl, server_name);
  SSL_connect(ssl);  // writes the ClientHello to `out`, then wants to read
  std::vector<std::uint8_t> bytes(static_cast<std::size_t>(BIO_ctrl_pending(out)));
  BIO_read(out, bytes.data(), static_cast<int>(bytes.size()));
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  return bytes;
}

std::vector<std::uint8_t> gnutls_client_hello(const char* server_name) {
  static std::vector<std::uint8_t> captured;
  captured.clear();
  gnutls_session_t session;
  gnutls_certificate_credentials_t creds;
  gnutls_certificate_allocate_credentials(&creds);
  gnutls_init(&session, GNUTLS_CLIENT | GNUTLS_NONBLOCK);
  gnutls_set_default_priority(session);
  gnutls_credentials_set(session, GNUTLS_CRD_CERTIFICATE, creds);
  gnutls_server_name_set(session, GNUTLS_NAME_DNS, server_name, std::strlen(server_name));
  gnutls_transport_set_push_function(
      session, [](gnutls_transport_ptr_t, const void* data, size_t size) -> ssize_t {
        auto* p = static_cast<const std::uint8_t*>(data);
        captured.insert(captured.end(), p, p + size);
        return static_cast<ssize_t>(size);
      });
  gnutls_transport_set_pull_function(session, [](gnutls_transport_ptr_t, void*, size_t) -> ssize_t {
    errno = EAGAIN;
    return -1;
  });
  gnutls_handshake(session);
  gnutls_deinit(session);
  gnutls_certificate_free_credentials(creds);
  return captured;
}

}  // namespace

TEST_CASE("SNI is read from real ClientHellos; anything else yields none") {
  CHECK(client_hello_server_name(openssl_client_hello("bucket.s3.eu-west-1.amazonaws.com")) ==
        std::optional<std::string>("bucket.s3.eu-west-1.amazonaws.com"));
  CHECK(client_hello_server_name(gnutls_client_hello("myaccount.blob.core.windows.net")) ==
        std::optional<std::string>("myaccount.blob.core.windows.net"));
  CHECK_FALSE(client_hello_server_name(openssl_client_hello(nullptr)).has_value());
  const std::string http = "GET /bucket/key HTTP/1.1\r\n";
  CHECK_FALSE(
      client_hello_server_name({reinterpret_cast<const std::uint8_t*>(http.data()), http.size()}));
  auto hello = openssl_client_hello("storage.googleapis.com");
  for (std::size_t cut = 0; cut < hello.size(); cut += 7) {  // truncated: no crash, no name
    auto name = client_hello_server_name({hello.data(), cut});
    if (name) CHECK(*name == "storage.googleapis.com");
  }
}

TEST_CASE("CIDRs, ports and host names decide what an object-store connection is") {
  ObjectStoreEndpoints e;
  e.ports = {443, 9000};
  e.cidrs = {*parse_cidr("10.20.0.0/16"), *parse_cidr("2600:1f18::/32"), *parse_cidr("192.0.2.7")};
  e.hosts = {".amazonaws.com", "minio.internal"};
  CHECK(e.port_matches(9000));
  CHECK_FALSE(e.port_matches(9092));
  CHECK(e.address_matches("10.20.3.4"));
  CHECK_FALSE(e.address_matches("10.21.0.1"));
  CHECK(e.address_matches("2600:1f18:abcd::1"));
  CHECK_FALSE(e.address_matches("2600:1f19::1"));
  CHECK(e.address_matches("192.0.2.7"));
  CHECK_FALSE(e.address_matches("192.0.2.8"));
  CHECK_FALSE(e.address_matches("not-an-ip"));
  CHECK(e.host_matches("bucket.s3.us-east-1.amazonaws.com"));
  CHECK(e.host_matches("amazonaws.com"));
  CHECK_FALSE(e.host_matches("evilamazonaws.com"));
  CHECK(e.host_matches("minio.internal"));
  CHECK_FALSE(e.host_matches("x.minio.internal"));
  for (const char* bad : {"10.0.0.0/33", "10.0.0/8", "::1/129", "host.example", "10.0.0.0/x"})
    CHECK_FALSE(parse_cidr(bad).ok());
}

TEST_CASE("the pipeline takes a TLS connection to a configured host name as the object store") {
  fc::sensors::SensorTable sensors;
  fc::pipeline::PipelineConfig config;
  config.kafka_ports = {9092};
  config.object_store_ports = {};
  config.object_store_hosts = {".amazonaws.com"};
  config.object_store_cidrs = {*parse_cidr("10.9.0.0/16")};
  auto pipeline = fc::pipeline::Pipeline::create(
      config, *fc::cost::preset("aws-s3-standard-same-region"), sensors, nullptr, nullptr, nullptr);
  REQUIRE(pipeline.ok());
  auto feed_first_bytes = [&](std::uint64_t conn, std::string_view peer_ip,
                              const std::vector<std::uint8_t>& bytes) {
    (*pipeline)->describe(conn, 40000, 8443, peer_ip);
    fc::pipeline::Segment seg{0, bytes};
    fc::pipeline::Piece piece;
    piece.connection = conn;
    piece.to_target = false;  // the broker sends its ClientHello
    piece.time_ns = 1;
    piece.length = bytes.size();
    piece.captured = std::span<const fc::pipeline::Segment>(&seg, 1);
    (*pipeline)->piece(piece);
  };
  feed_first_bytes(1, "198.51.100.1", openssl_client_hello("bucket.s3.us-east-1.amazonaws.com"));
  CHECK((*pipeline)->stats().opaque_connections == 1);
  feed_first_bytes(2, "198.51.100.1", openssl_client_hello("metrics.example.org"));
  CHECK((*pipeline)->stats().opaque_connections == 1);  // another TLS peer: not the store
  feed_first_bytes(3, "10.9.4.4", openssl_client_hello(nullptr));
  CHECK((*pipeline)->stats().opaque_connections == 2);  // by address
}
