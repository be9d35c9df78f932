// A small keep-alive HTTP/1.1 client for an S3 endpoint (path-style, anonymous), over plain TCP,
// OpenSSL or GnuTLS. GnuTLS stands in for a TLS stack fetchcost is told not to hook (the JVM's).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace tb {

enum class S3Transport { kHttp, kOpenSsl, kGnuTls };

struct S3Config {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string bucket = "tiered";
  std::string prefix;  // object key prefix (Aiven's `prefix` setting)
  S3Transport transport = S3Transport::kHttp;
  // Bytes asked of each read of a response (an HTTP client's buffer): a JVM broker's client reads
  // a large object in many smaller reads, each one a socket call fetchcostd sees.
  std::size_t read_bytes = 65536;
};

struct S3Response {
  int status = 0;  // 0: transport failure (see error)
  std::string body;
  std::string error;   // human-readable failure reason, empty on 2xx
  double seconds = 0;  // request write to last body byte
  bool ok() const { return status >= 200 && status < 300; }
};

class S3Connection;

class S3Client {
 public:
  explicit S3Client(S3Config config);
  ~S3Client();
  // range_first/range_last are inclusive (HTTP Range semantics); nullopt reads the whole object.
  S3Response get(const std::string& key, std::optional<std::pair<uint64_t, uint64_t>> range);
  S3Response put(const std::string& key, const std::string& body);
  const S3Config& config() const { return config_; }

 private:
  S3Response request(const std::string& method, const std::string& key,
                     const std::string& extra_headers, const std::string& body);
  std::unique_ptr<S3Connection> take_connection(std::string* error, bool fresh);
  void give_back(std::unique_ptr<S3Connection> c);

  S3Config config_;
  void* tls_ctx_ = nullptr;  // SSL_CTX* or gnutls_certificate_credentials_t
  std::mutex mu_;
  std::vector<std::unique_ptr<S3Connection>> idle_;
};

}  // namespace tb
