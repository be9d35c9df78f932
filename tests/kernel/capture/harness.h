// Shared helpers for the capture kernel tests: a child process that runs a scenario when told
// to (so it can be made a target first), a collector that copies every record, a throw-away
// certificate, and the plaintext stream of a TLS connection rebuilt from TLS_DATA records.
#pragma once

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "capture/capture.h"
#include "pattern.h"

namespace fc::capture_test {

// A forked child. The scenario runs when go() is called; it talks back with report().
class Child {
 public:
  explicit Child(std::function<int(Child&)> scenario) {
    int go[2], back[2], cont[2];
    REQUIRE(pipe(go) == 0);
    REQUIRE(pipe(back) == 0);
    REQUIRE(pipe(cont) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      close(go[1]);
      close(back[0]);
      close(cont[1]);
      report_fd_ = back[1];
      continue_fd_ = cont[0];
      char byte;
      if (read(go[0], &byte, 1) != 1) _exit(90);
      _exit(scenario(*this));
    }
    close(go[0]);
    close(back[1]);
    close(cont[0]);
    go_fd_ = go[1];
    report_fd_ = back[0];
    continue_fd_ = cont[1];
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close(go_fd_);
    close(report_fd_);
    close(continue_fd_);
  }
  pid_t pid() const { return pid_; }
  void go() {
    char b = 'g';
    REQUIRE(write(go_fd_, &b, 1) == 1);
  }
  // In the child: send a value to the parent / wait for the parent's nod.
  void report(long long v) {
    if (write(report_fd_, &v, sizeof(v)) != sizeof(v)) _exit(91);
  }
  void wait_parent() {
    char b;
    if (read(continue_fd_, &b, 1) != 1) _exit(92);
  }
  // In the parent.
  long long receive() {
    long long v = 0;
    REQUIRE(read(report_fd_, &v, sizeof(v)) == sizeof(v));
    return v;
  }
  // True when a report is waiting (the parent can keep draining until then).
  bool ready() {
    pollfd p{report_fd_, POLLIN, 0};
    return ::poll(&p, 1, 0) == 1;
  }
  void nod() {
    char b = 'c';
    REQUIRE(write(continue_fd_, &b, 1) == 1);
  }
  int wait() {
    int status = 0;
    REQUIRE(waitpid(pid_, &status, 0) == pid_);
    reaped_ = true;
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  }

 private:
  pid_t pid_ = -1;
  int go_fd_ = -1, report_fd_ = -1, continue_fd_ = -1;
  bool reaped_ = false;
};

struct Record {
  fc_event_common common{};
  fc_data_event data{};
  fc_conn_event conn{};
  bool is_data = false;
  bool folded = false;
  bool skipped = false;
  std::string payload;
  std::vector<fc_segment> segments;
};

struct Collector {
  std::vector<Record> records;
  std::unique_ptr<capture::Capture> capture;

  explicit Collector(capture::Options options) {
    auto opened = capture::Capture::open(options, [this](const capture::EventView& ev) {
      Record r;
      r.common = ev.common;
      if (ev.data) {
        r.is_data = true;
        r.folded = ev.folded;
        r.skipped = ev.skipped;
        r.data = *ev.data;
        r.payload.assign(ev.payload.begin(), ev.payload.end());
        r.segments.assign(ev.segments.begin(), ev.segments.end());
      }
      if (ev.conn) r.conn = *ev.conn;
      records.push_back(std::move(r));
    });
    REQUIRE_MESSAGE(opened.ok(), (opened.ok() ? "" : opened.error().message));
    capture = std::move(opened.value());
  }
  void drain(int rounds = 5) {
    for (int i = 0; i < rounds; ++i) REQUIRE(capture->poll(20).ok());
  }
  std::vector<Record> of(pid_t pid, fc_u16 kind) const {
    std::vector<Record> out;
    for (const auto& r : records)
      if (r.common.tgid == static_cast<fc_u32>(pid) && r.common.kind == kind) out.push_back(r);
    return out;
  }
};

// A fresh self-signed EC certificate and key (openssl CLI), removed at the end.
struct CertDir {
  std::string dir, cert, key;
  CertDir() {
    char tmpl[] = "/tmp/fc-tls-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    cert = dir + "/cert.pem";
    key = dir + "/key.pem";
    const std::string cmd =
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout " + key +
        " -out " + cert + " -subj /CN=localhost -days 2 2>/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
  }
  ~CertDir() { std::filesystem::remove_all(dir); }
};

// The plaintext stream of one connection and direction, from TLS_DATA records: positions must be
// contiguous from 0 and every byte captured.
inline std::string tls_stream(const std::vector<Record>& all, fc_u64 conn_id, fc_u8 dir,
                              fc_u8 lib) {
  std::vector<Record> evs;
  for (const auto& r : all)
    if (r.common.kind == FC_EVENT_TLS_DATA && r.common.conn_id == conn_id &&
        r.data.direction == dir)
      evs.push_back(r);
  std::sort(evs.begin(), evs.end(),
            [](const Record& a, const Record& b) { return a.data.stream_pos < b.data.stream_pos; });
  std::string out;
  for (const auto& e : evs) {
    CHECK(e.data.stream_pos == out.size());
    CHECK(e.data.captured == e.data.length);
    CHECK(e.data.source == FC_SRC_TLS);
    CHECK(e.data.tls_lib == lib);
    CHECK(e.data.tls_obj != 0);
    CHECK((e.common.flags & FC_FLAG_TLS_UNBOUND) == 0);
    out += e.payload;
  }
  return out;
}

// The calling process stays on the CPU it runs on now: body hints are per CPU, and so are the
// rings, which deliver the records of a process that moved between CPUs in either order.
inline bool pin_to_this_cpu() {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(sched_getcpu() < 0 ? 0 : sched_getcpu(), &one);
  return sched_setaffinity(0, sizeof(one), &one) == 0;
}

// An object store's response arriving in several reads (kernel_capture_io over plain TCP,
// kernel_capture_tls over OpenSSL), a request before reads 0 and 4: the first read after a
// request copies up to the policy's head_bytes (2048 by default: the HTTP header is there), the
// reads after it, object body, only their length.
inline const std::vector<std::size_t> kStoreReads = {3000, 5000, 200, 3000, 300};
inline const std::vector<std::size_t> kStoreCaptured = {2048, 0, 0, 0, 300};
inline std::vector<std::string> store_chunks(unsigned seed) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < kStoreReads.size(); ++i)
    out.push_back(pattern(kStoreReads[i], seed + static_cast<unsigned>(i)));
  return out;
}

// One connection-direction's calls in stream order: call i moved `calls[i]` bytes, of which the
// first `captured[i]` were copied. Records come from per-CPU rings, so they are ordered by
// position first. `role` (if not 0xff) is checked on each.
inline void check_prefixes(std::vector<Record> records, const std::vector<std::string>& calls,
                           const std::vector<std::size_t>& captured, fc_u8 role = 0xff) {
  std::sort(records.begin(), records.end(),
            [](const Record& a, const Record& b) { return a.data.stream_pos < b.data.stream_pos; });
  REQUIRE(records.size() == calls.size());
  REQUIRE(captured.size() == calls.size());
  std::size_t pos = 0;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    INFO("call " << i);
    if (role != 0xff) {
      CHECK(records[i].common.role == role);
      // The thread's name on every connection's records but a Kafka client's (the object-store
      // pipeline reads it; Kafka client records are most of a broker's and go without).
      CHECK((records[i].common.comm[0] != 0) == (role != FC_ROLE_KAFKA_CLIENT));
    }
    CHECK(records[i].data.stream_pos == pos);
    CHECK(records[i].data.length == calls[i].size());
    CHECK(records[i].data.captured == captured[i]);
    CHECK((records[i].payload == calls[i].substr(0, captured[i])));
    pos += calls[i].size();
  }
}

// The same calls, whatever records they came in (gathered sends cover several calls): the
// records, ordered by position, cover the stream from 0 without gaps, and capture exactly the
// first `captured[i]` bytes of each call i, at their positions. Returns the records in order.
inline std::vector<Record> check_stream(std::vector<Record> records,
                                        const std::vector<std::string>& calls,
                                        const std::vector<std::size_t>& captured) {
  std::sort(records.begin(), records.end(),
            [](const Record& a, const Record& b) { return a.data.stream_pos < b.data.stream_pos; });
  REQUIRE(captured.size() == calls.size());
  std::string stream;
  std::vector<bool> expected;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    stream += calls[i];
    for (std::size_t k = 0; k < calls[i].size(); ++k) expected.push_back(k < captured[i]);
  }
  std::vector<bool> got(stream.size(), false);
  std::size_t pos = 0;
  for (std::size_t i = 0; i < records.size(); ++i) {
    INFO("record " << i);
    const Record& r = records[i];
    CHECK(r.data.stream_pos == pos);
    pos = r.data.stream_pos + r.data.length;
    std::size_t off = 0;
    for (const fc_segment& seg : r.segments) {
      const std::size_t at = r.data.stream_pos + seg.offset;
      REQUIRE(off + seg.length <= r.payload.size());
      REQUIRE(at + seg.length <= stream.size());
      CHECK((r.payload.substr(off, seg.length) == stream.substr(at, seg.length)));
      for (std::size_t k = 0; k < seg.length; ++k) {
        CHECK_FALSE(got[at + k]);  // no byte twice
        got[at + k] = true;
      }
      off += seg.length;
    }
    CHECK(off == r.payload.size());
  }
  CHECK(pos == stream.size());
  CHECK((got == expected));
  return records;
}

inline fc_u64 conn_by_ports(const Collector& col, pid_t pid, std::uint16_t local,
                            std::uint16_t peer) {
  for (const auto& r : col.of(pid, FC_EVENT_CONNECT))
    if (r.conn.origin != FC_ORIGIN_PROC_SCAN && r.conn.local_port == local &&
        r.conn.peer_port == peer)
      return r.common.conn_id;
  return 0;
}

// A TCP connection over loopback: its listener, both ends and their ports.
struct Pair {
  int listener = -1, client = -1, server = -1;
  std::uint16_t listen_port = 0, client_port = 0;
};

// Watches `target`, starts it and makes the first port it reports (its listener) a Kafka
// port; returns that port.
inline std::uint16_t watch_kafka_listener(Collector& col, Child& target) {
  REQUIRE(col.capture->add_target(target.pid()).ok());
  target.go();
  const auto listen_port = static_cast<std::uint16_t>(target.receive());
  REQUIRE(
      col.capture->set_port_policy(listen_port, false, {4096, 4096, FC_ROLE_KAFKA_CLIENT}).ok());
  target.nod();
  return listen_port;
}

// A new connection to `lb.listener` (already listening): its client and server ends and ports
// into `lb`. `no_delay` sets TCP_NODELAY on both ends (a write is a segment).
inline bool connect_pair(Pair& lb, bool no_delay = true) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(lb.listener, reinterpret_cast<sockaddr*>(&ss), &len);
  const int family = ss.ss_family;
  lb.client = socket(family, SOCK_STREAM, 0);
  if (connect(lb.client, reinterpret_cast<sockaddr*>(&ss), len) != 0) return false;
  lb.server = accept(lb.listener, nullptr, nullptr);
  if (lb.server < 0) return false;
  if (no_delay) {
    int one = 1;
    setsockopt(lb.client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(lb.server, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  sockaddr_storage mine{};
  socklen_t mlen = sizeof(mine);
  getsockname(lb.client, reinterpret_cast<sockaddr*>(&mine), &mlen);
  lb.listen_port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  lb.client_port = ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in*>(&mine)->sin_port
                                           : reinterpret_cast<sockaddr_in6*>(&mine)->sin6_port);
  return true;
}

// A listener and one connection to it, over IPv4 or IPv6 loopback (see connect_pair).
inline bool open_pair(Pair& lb, int family = AF_INET, bool no_delay = true) {
  lb.listener = socket(family, SOCK_STREAM, 0);
  sockaddr_storage ss{};
  socklen_t len;
  if (family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_addr = in6addr_loopback;
    len = sizeof(*a);
  }
  if (bind(lb.listener, reinterpret_cast<sockaddr*>(&ss), len) != 0) return false;
  if (listen(lb.listener, 4) != 0) return false;
  return connect_pair(lb, no_delay);
}

// Waits (up to 2 s) until `fd` has `n` bytes to read.
inline bool wait_inq(int fd, std::size_t n) {
  for (int i = 0; i < 2000; ++i) {
    int inq = 0;
    if (ioctl(fd, FIONREAD, &inq) == 0 && static_cast<std::size_t>(inq) >= n) return true;
    usleep(1000);
  }
  return false;
}

// True while `pid` has not exited (a zombie counts as exited).
inline bool alive(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == 0;
}

inline const char* variant_label(capture::Variant v) {
  return capture::variant_name(v);
}

}  // namespace fc::capture_test
