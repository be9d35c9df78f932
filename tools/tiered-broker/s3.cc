#include "s3.h"

#include <arpa/inet.h>
#include <gnutls/gnutls.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

namespace tb {

// One TCP connection, optionally wrapped in TLS. Blocking I/O: it runs on remote reader threads.
class S3Connection {
 public:
  S3Connection(int fd, S3Transport t, std::size_t read_bytes)
      : fd_(fd), transport_(t), read_bytes_(std::clamp<std::size_t>(read_bytes, 1, kMaxRead)) {}
  ~S3Connection() {
    if (ssl_) SSL_free(ssl_);
    if (gnutls_) gnutls_deinit(gnutls_);
    if (fd_ >= 0) close(fd_);
  }
  bool handshake(void* ctx, const std::string& host, std::string* error) {
    if (transport_ == S3Transport::kOpenSsl) {
      ssl_ = SSL_new(static_cast<SSL_CTX*>(ctx));
      SSL_set_fd(ssl_, fd_);
      SSL_set_tlsext_host_name(ssl_, host.c_str());
      ERR_clear_error();  // the message below must name this handshake's error, not a stale one
      if (SSL_connect(ssl_) != 1) {
        *error = "OpenSSL handshake with the S3 endpoint failed: " +
                 std::string(ERR_reason_error_string(ERR_get_error()) ?: "unknown");
        return false;
      }
    } else if (transport_ == S3Transport::kGnuTls) {
      gnutls_init(&gnutls_, GNUTLS_CLIENT);
      gnutls_set_default_priority(gnutls_);
      gnutls_credentials_set(gnutls_, GNUTLS_CRD_CERTIFICATE, ctx);
      gnutls_transport_set_int(gnutls_, fd_);
      int rc;
      do rc = gnutls_handshake(gnutls_);
      while (rc < 0 && gnutls_error_is_fatal(rc) == 0);
      if (rc < 0) {
        *error =
            std::string("GnuTLS handshake with the S3 endpoint failed: ") + gnutls_strerror(rc);
        return false;
      }
    }
    return true;
  }
  bool write_all(const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n;
      if (ssl_) {
        n = SSL_write(ssl_, data.data() + done, int(data.size() - done));
      } else if (gnutls_) {
        n = gnutls_record_send(gnutls_, data.data() + done, data.size() - done);
        if (n == GNUTLS_E_INTERRUPTED) continue;
        if (n == GNUTLS_E_AGAIN && wait_for(POLLOUT)) continue;
      } else {
        n = ::send(fd_, data.data() + done, data.size() - done, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
      }
      if (n <= 0) return false;
      done += size_t(n);
    }
    return true;
  }
  ssize_t read_some(char* buf, size_t n) {
    while (true) {
      ssize_t r;
      if (ssl_) {
        r = SSL_read(ssl_, buf, int(n));
      } else if (gnutls_) {
        r = gnutls_record_recv(gnutls_, buf, n);
        if (r == GNUTLS_E_INTERRUPTED) continue;
        // E_AGAIN also follows records without data (TLS 1.3 session tickets): wait, bounded.
        if (r == GNUTLS_E_AGAIN && wait_for(POLLIN)) continue;
        if (r == GNUTLS_E_PREMATURE_TERMINATION) r = 0;
      } else {
        r = ::read(fd_, buf, n);
        if (r < 0 && errno == EINTR) continue;
      }
      return r;
    }
  }
  // True when the socket becomes ready within the I/O timeout.
  bool wait_for(short events) {
    pollfd p{fd_, events, 0};
    return poll(&p, 1, 30000) > 0;
  }
  // Buffered reads over read_some.
  bool read_line(std::string* line) {
    while (true) {
      size_t eol = rbuf_.find("\r\n", rpos_);
      if (eol != std::string::npos) {
        line->assign(rbuf_, rpos_, eol - rpos_);
        rpos_ = eol + 2;
        return true;
      }
      if (!fill()) return false;
    }
  }
  bool read_exact(size_t n, std::string* out) {
    while (rbuf_.size() - rpos_ < n)
      if (!fill()) return false;
    out->append(rbuf_, rpos_, n);
    rpos_ += n;
    return true;
  }
  bool read_to_eof(std::string* out) {
    out->append(rbuf_, rpos_, std::string::npos);
    rpos_ = rbuf_.size();
    char buf[kMaxRead];
    ssize_t r;
    while ((r = read_some(buf, read_bytes_)) > 0) out->append(buf, size_t(r));
    return r == 0;
  }

 private:
  bool fill() {
    if (rpos_ > 0 && rpos_ == rbuf_.size()) {
      rbuf_.clear();
      rpos_ = 0;
    }
    char buf[kMaxRead];
    ssize_t r = read_some(buf, read_bytes_);
    if (r <= 0) return false;
    rbuf_.append(buf, size_t(r));
    return true;
  }
  static constexpr std::size_t kMaxRead = 65536;
  int fd_;
  S3Transport transport_;
  std::size_t read_bytes_;
  SSL* ssl_ = nullptr;
  gnutls_session_t gnutls_ = nullptr;
  std::string rbuf_;
  size_t rpos_ = 0;
};

S3Client::S3Client(S3Config config) : config_(std::move(config)) {
  if (config_.transport == S3Transport::kOpenSsl) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) throw std::runtime_error("cannot create an OpenSSL client context");
    // A test fixture talking to a self-signed s3rver on loopback: no certificate verification.
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
    tls_ctx_ = ctx;
  } else if (config_.transport == S3Transport::kGnuTls) {
    gnutls_global_init();
    gnutls_certificate_credentials_t cred;
    gnutls_certificate_allocate_credentials(&cred);
    tls_ctx_ = cred;
  }
}

S3Client::~S3Client() {
  idle_.clear();
  if (config_.transport == S3Transport::kOpenSsl) SSL_CTX_free(static_cast<SSL_CTX*>(tls_ctx_));
  if (config_.transport == S3Transport::kGnuTls)
    gnutls_certificate_free_credentials(static_cast<gnutls_certificate_credentials_t>(tls_ctx_));
}

std::unique_ptr<S3Connection> S3Client::take_connection(std::string* error, bool fresh) {
  if (!fresh) {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(config_.port));
  if (inet_pton(AF_INET, config_.host.c_str(), &addr.sin_addr) != 1) {
    close(fd);
    *error = "S3 host must be an IPv4 address: " + config_.host;
    return nullptr;
  }
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    *error = "cannot connect to the S3 endpoint " + config_.host + ":" +
             std::to_string(config_.port) + ": " + strerror(errno);
    close(fd);
    return nullptr;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  // A hung endpoint must not hang a reader (or shutdown) forever: it becomes a failed GET.
  timeval timeout{30, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  auto c = std::make_unique<S3Connection>(fd, config_.transport, config_.read_bytes);
  if (!c->handshake(tls_ctx_, config_.host, error)) return nullptr;
  return c;
}

void S3Client::give_back(std::unique_ptr<S3Connection> c) {
  std::lock_guard lock(mu_);
  idle_.push_back(std::move(c));
}

S3Response S3Client::get(const std::string& key,
                         std::optional<std::pair<uint64_t, uint64_t>> range) {
  std::string headers;
  if (range)
    headers = "Range: bytes=" + std::to_string(range->first) + "-" + std::to_string(range->second) +
              "\r\n";
  return request("GET", key, headers, "");
}

S3Response S3Client::put(const std::string& key, const std::string& body) {
  return request("PUT", key,
                 "Content-Type: application/octet-stream\r\nContent-Length: " +
                     std::to_string(body.size()) + "\r\n",
                 body);
}

S3Response S3Client::request(const std::string& method, const std::string& key,
                             const std::string& extra_headers, const std::string& body) {
  auto start = std::chrono::steady_clock::now();
  S3Response resp;
  // A kept-alive connection may have been closed by the server meanwhile (s3rver, like any Node.js
  // server, drops idle ones after 5 s): when nothing at all came back, retry once on a new one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::string error;
    auto conn = take_connection(&error, attempt > 0);
    if (!conn) {
      resp.error = error;
      break;
    }
    std::string req = method + " /" + config_.bucket + "/" + key +
                      " HTTP/1.1\r\nHost: " + config_.host + ":" + std::to_string(config_.port) +
                      "\r\n" + extra_headers + "\r\n";
    req += body;
    if (!conn->write_all(req)) {
      resp.error = "write to the S3 endpoint failed";
      continue;
    }
    std::string line;
    if (!conn->read_line(&line)) {
      resp.error = "the S3 endpoint closed the connection without a response";
      continue;
    }
    if (line.size() < 12 || line.compare(0, 5, "HTTP/") != 0) {
      resp.error = "malformed HTTP status line from the S3 endpoint";
      break;
    }
    resp.status = std::atoi(line.c_str() + 9);
    int64_t content_length = -1;
    bool chunked = false, keep_alive = true;
    while (conn->read_line(&line) && !line.empty()) {
      auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      for (auto& ch : name) ch = char(std::tolower(ch));
      std::string value = line.substr(colon + 1);
      while (!value.empty() && value.front() == ' ') value.erase(0, 1);
      if (name == "content-length") content_length = std::atoll(value.c_str());
      if (name == "transfer-encoding" && value.find("chunked") != std::string::npos) chunked = true;
      if (name == "connection" && (value == "close" || value == "Close")) keep_alive = false;
    }
    bool complete;
    if (chunked) {
      complete = true;
      while (true) {
        if (!conn->read_line(&line)) {
          complete = false;
          break;
        }
        size_t n = std::stoul(line, nullptr, 16);
        if (n == 0) {
          conn->read_line(&line);
          break;
        }
        std::string crlf;
        if (!conn->read_exact(n, &resp.body) || !conn->read_exact(2, &crlf)) {
          complete = false;
          break;
        }
      }
    } else if (content_length >= 0) {
      complete = conn->read_exact(size_t(content_length), &resp.body);
    } else {
      keep_alive = false;
      complete = conn->read_to_eof(&resp.body);
    }
    if (!complete) {
      resp.error = "the S3 endpoint closed the connection mid-body";
      resp.status = 0;
      break;
    }
    if (keep_alive) give_back(std::move(conn));
    if (!resp.ok())
      resp.error = method + " " + key + " answered HTTP " + std::to_string(resp.status);
    else
      resp.error.clear();
    break;
  }
  resp.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return resp;
}

}  // namespace tb
