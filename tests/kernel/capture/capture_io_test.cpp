// Kernel test: every data syscall variant on a loopback TCP connection, IPv4 and IPv6, on both
// capture variants. The events of each connection and direction must reassemble to exactly the
// bytes sent, with exact positions and lengths, and holes exactly where the caps put them.
// Also: fd reuse gives a new generation, close events carry the byte counts (also for a
// connection reset by its peer, never closed by the target), and a process that is not a target
// produces nothing.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <numeric>
#include <thread>

#include "harness.h"
#include "testing.h"

using namespace fc::capture_test;
using fc::capture::Variant;

namespace {

enum class Sys {
  Write,
  Writev,
  Sendto,
  Sendmsg,
  Sendfile,
  Sendmmsg,
  Read,
  Readv,
  Recvfrom,
  Recvmsg,
  Recvmmsg
};

struct Step {
  Sys send;
  std::vector<std::size_t> send_iov;  // sizes (Sendmmsg: one message per entry)
  Sys recv;
  std::vector<std::size_t> recv_iov;
  std::size_t total() const {
    return std::accumulate(send_iov.begin(), send_iov.end(), std::size_t{0});
  }
};

// Client -> server, then server -> client.
const std::vector<Step> kForward = {
    {Sys::Write, {100}, Sys::Read, {100}},
    {Sys::Write, {5000}, Sys::Read, {5000}},
    {Sys::Writev, {10, 400, 0, 2000}, Sys::Readv, {1000, 1410}},
    {Sys::Sendto, {700}, Sys::Recvfrom, {700}},
    {Sys::Sendmsg, {50, 50, 2000}, Sys::Recvmsg, {30, 2070}},
    {Sys::Sendfile, {3000}, Sys::Read, {3000}},
    {Sys::Writev, {100, 100, 100, 100, 100, 100, 100, 100, 100, 100}, Sys::Readv, {1000}},
    {Sys::Sendmmsg, {200, 300}, Sys::Recvmmsg, {500}},
    // The edges of the one-range record sizes (128, 256 and 512 bytes of payload).
    {Sys::Write, {128}, Sys::Read, {128}},
    {Sys::Sendto, {129}, Sys::Recvfrom, {129}},
    {Sys::Write, {256}, Sys::Read, {256}},
    {Sys::Write, {257}, Sys::Read, {257}},
    {Sys::Write, {512}, Sys::Read, {512}},
};
const std::vector<Step> kBackward = {
    {Sys::Write, {1500}, Sys::Readv, {500, 500, 500}},
    {Sys::Writev, {20, 3000}, Sys::Recvmsg, {3020}},
    {Sys::Sendmsg, {64, 64, 64}, Sys::Read, {192}},
};

std::string step_bytes(std::size_t step, bool forward, std::size_t n) {
  return pattern(n, static_cast<unsigned>(step * 2 + (forward ? 0 : 1)));
}

bool do_send(int fd, const Step& s, const std::string& bytes) {
  std::vector<iovec> iov;
  std::size_t off = 0;
  for (std::size_t len : s.send_iov) {
    iov.push_back({const_cast<char*>(bytes.data() + off), len});
    off += len;
  }
  ssize_t r = -1;
  switch (s.send) {
    case Sys::Write:
      r = write(fd, bytes.data(), bytes.size());
      break;
    case Sys::Writev:
      r = writev(fd, iov.data(), static_cast<int>(iov.size()));
      break;
    case Sys::Sendto:
      r = sendto(fd, bytes.data(), bytes.size(), 0, nullptr, 0);
      break;
    case Sys::Sendmsg: {
      msghdr m{};
      m.msg_iov = iov.data();
      m.msg_iovlen = iov.size();
      r = sendmsg(fd, &m, 0);
      break;
    }
    case Sys::Sendfile: {
      char path[] = "/tmp/fc-sendfile-XXXXXX";
      int f = mkstemp(path);
      if (f < 0 || write(f, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size()))
        return false;
      unlink(path);
      off_t start = 0;
      r = sendfile(fd, f, &start, bytes.size());
      close(f);
      break;
    }
    case Sys::Sendmmsg: {
      std::vector<mmsghdr> msgs(iov.size());
      for (std::size_t i = 0; i < iov.size(); ++i) {
        msgs[i] = {};
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
      }
      int sent = sendmmsg(fd, msgs.data(), static_cast<unsigned>(msgs.size()), 0);
      if (sent != static_cast<int>(msgs.size())) return false;
      r = static_cast<ssize_t>(bytes.size());
      break;
    }
    default:
      return false;
  }
  return r == static_cast<ssize_t>(bytes.size());
}

bool do_recv(int fd, const Step& s, const std::string& expect) {
  if (!wait_inq(fd, expect.size())) return false;
  std::string got(expect.size(), '\0');
  std::vector<iovec> iov;
  std::size_t off = 0;
  for (std::size_t len : s.recv_iov) {
    iov.push_back({got.data() + off, len});
    off += len;
  }
  ssize_t r = -1;
  switch (s.recv) {
    case Sys::Read:
      r = read(fd, got.data(), got.size());
      break;
    case Sys::Readv:
      r = readv(fd, iov.data(), static_cast<int>(iov.size()));
      break;
    case Sys::Recvfrom:
      r = recvfrom(fd, got.data(), got.size(), 0, nullptr, nullptr);
      break;
    case Sys::Recvmsg: {
      msghdr m{};
      m.msg_iov = iov.data();
      m.msg_iovlen = iov.size();
      r = recvmsg(fd, &m, 0);
      break;
    }
    case Sys::Recvmmsg: {
      mmsghdr msg{};
      msg.msg_hdr.msg_iov = iov.data();
      msg.msg_hdr.msg_iovlen = 1;
      int n = recvmmsg(fd, &msg, 1, 0, nullptr);
      r = n == 1 ? static_cast<ssize_t>(msg.msg_len) : -1;
      break;
    }
    default:
      return false;
  }
  return r == static_cast<ssize_t>(expect.size()) && got == expect;
}

using Loopback = Pair;

int io_scenario(Child& self, int family) {
  Loopback lb;
  if (!open_pair(lb, family)) return 10;
  self.report(lb.listen_port);
  self.report(lb.client_port);
  self.report(lb.client);
  self.report(lb.server);
  self.wait_parent();  // the parent sets port rules now
  for (std::size_t i = 0; i < kForward.size(); ++i) {
    const std::string b = step_bytes(i, true, kForward[i].total());
    if (!do_send(lb.client, kForward[i], b)) return 20 + static_cast<int>(i);
    if (!do_recv(lb.server, kForward[i], b)) return 40 + static_cast<int>(i);
  }
  for (std::size_t i = 0; i < kBackward.size(); ++i) {
    const std::string b = step_bytes(i, false, kBackward[i].total());
    if (!do_send(lb.server, kBackward[i], b)) return 60 + static_cast<int>(i);
    if (!do_recv(lb.client, kBackward[i], b)) return 70 + static_cast<int>(i);
  }
  self.report(1);
  self.wait_parent();
  return 0;
}

fc_u8 source_of(Sys s) {
  switch (s) {
    case Sys::Write:
      return FC_SRC_WRITE;
    case Sys::Writev:
      return FC_SRC_WRITEV;
    case Sys::Sendto:
      return FC_SRC_SENDTO;
    case Sys::Sendmsg:
      return FC_SRC_SENDMSG;
    case Sys::Sendfile:
      return FC_SRC_SENDFILE;
    case Sys::Sendmmsg:
      return FC_SRC_SENDMMSG;
    case Sys::Read:
      return FC_SRC_READ;
    case Sys::Readv:
      return FC_SRC_READV;
    case Sys::Recvfrom:
      return FC_SRC_RECVFROM;
    case Sys::Recvmsg:
      return FC_SRC_RECVMSG;
    case Sys::Recvmmsg:
      return FC_SRC_RECVMMSG;
  }
  return FC_SRC_UNKNOWN;
}

// The capture rule, stated from the test's side: plain calls copy a prefix up to the call cap;
// vectored calls copy each iovec's prefix up to the iovec cap until the call cap is used up,
// for at most FC_MAX_SEGMENTS iovecs; sendfile and the mmsg calls copy nothing.
std::vector<fc_segment> expected_segments(Sys sys, const std::vector<std::size_t>& iov,
                                          std::size_t n, const fc::capture::Policy& p,
                                          bool& truncated) {
  std::vector<fc_segment> out;
  truncated = false;
  switch (sys) {
    case Sys::Write:
    case Sys::Read:
    case Sys::Sendto:
    case Sys::Recvfrom:
      if (p.bytes_per_call)
        out.push_back({0, static_cast<fc_u32>(std::min<std::size_t>(n, p.bytes_per_call))});
      return out;
    case Sys::Writev:
    case Sys::Readv:
    case Sys::Sendmsg:
    case Sys::Recvmsg: {
      std::size_t off = 0, captured = 0, i = 0;
      for (; i < iov.size() && i < FC_MAX_SEGMENTS && off < n; ++i) {
        std::size_t seg = std::min(iov[i], n - off);
        std::size_t want =
            std::min({seg, std::size_t{p.bytes_per_iovec}, p.bytes_per_call - captured});
        if (want) out.push_back({static_cast<fc_u32>(off), static_cast<fc_u32>(want)});
        captured += want;
        off += seg;
      }
      truncated = off < n && i >= FC_MAX_SEGMENTS;
      return out;
    }
    default:
      return out;
  }
}

// Checks one direction of one connection against the steps that fed it.
void check_stream(const std::vector<Record>& all, fc_u64 conn_id, fc_u8 dir,
                  const std::vector<Step>& steps, bool forward, bool sending_side,
                  const fc::capture::Policy& policy, Variant variant, fc_u8 role) {
  std::vector<Record> evs;
  for (const auto& r : all)
    if (r.is_data && r.common.kind == FC_EVENT_DATA && r.common.conn_id == conn_id &&
        r.data.direction == dir)
      evs.push_back(r);
  std::sort(evs.begin(), evs.end(),
            [](const Record& a, const Record& b) { return a.data.stream_pos < b.data.stream_pos; });
  std::size_t step_start = 0, ei = 0;
  for (std::size_t si = 0; si < steps.size(); ++si) {
    const Step& s = steps[si];
    const Sys sys = sending_side ? s.send : s.recv;
    const auto& iov = sending_side ? s.send_iov : s.recv_iov;
    const std::string bytes = step_bytes(si, forward, s.total());
    // The sock tracepoints see each message of sendmmsg separately; everything else is one call.
    std::vector<std::size_t> calls = {s.total()};
    if (sys == Sys::Sendmmsg && variant == Variant::kSockTracepoints) calls = s.send_iov;
    std::size_t call_start = step_start;
    for (std::size_t n : calls) {
      INFO("step " << si << (sending_side ? " send" : " recv") << " dir " << int(dir) << " pos "
                   << call_start);
      REQUIRE(ei < evs.size());
      const Record& e = evs[ei++];
      CHECK(e.data.stream_pos == call_start);
      CHECK(e.data.length == n);
      CHECK(e.data.source == source_of(sys));
      CHECK(e.common.role == role);
      bool truncated = false;
      auto want = expected_segments(sys, iov, n, policy, truncated);
      REQUIRE(e.segments.size() == want.size());
      std::size_t p = 0;
      for (std::size_t k = 0; k < want.size(); ++k) {
        CHECK(e.segments[k].offset == want[k].offset);
        CHECK(e.segments[k].length == want[k].length);
        const std::size_t at = call_start - step_start + want[k].offset;
        CHECK((e.payload.substr(p, want[k].length) == bytes.substr(at, want[k].length)));
        p += want[k].length;
      }
      CHECK(e.payload.size() == p);
      CHECK(bool(e.common.flags & FC_FLAG_TRUNCATED_SEGS) == truncated);
      CHECK((e.common.flags & FC_FLAG_COPY_FAULT) == 0);
      call_start += n;
    }
    step_start += s.total();
  }
  CHECK(ei == evs.size());  // nothing extra: no duplicate or phantom events
}

const fc::capture::Policy kDefault{1000, 300, FC_ROLE_OTHER};
const fc::capture::Policy kServer{64, 64, FC_ROLE_KAFKA_CLIENT};

void run_io(Variant variant, int family) {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  Collector col({.ring_bytes_per_cpu = 8 << 20, .default_policy = kDefault, .variant = variant});
  REQUIRE(col.capture->variant() == variant);

  Child target([family](Child& c) { return io_scenario(c, family); });
  Child other([family](Child& c) { return io_scenario(c, family); });
  REQUIRE(col.capture->add_target(target.pid()).ok());
  target.go();
  other.go();
  const auto listen_port = static_cast<std::uint16_t>(target.receive());
  const auto client_port = static_cast<std::uint16_t>(target.receive());
  const int client_fd = static_cast<int>(target.receive());
  const int server_fd = static_cast<int>(target.receive());
  for (int i = 0; i < 4; ++i) other.receive();
  // The broker-side socket (local port = listener) is a Kafka client connection.
  REQUIRE(col.capture->set_port_policy(listen_port, false, kServer).ok());
  target.nod();
  other.nod();
  CHECK(target.receive() == 1);
  CHECK(other.receive() == 1);
  col.drain(10);
  target.nod();
  other.nod();
  CHECK(target.wait() == 0);
  CHECK(other.wait() == 0);
  col.capture->clear_port_policy(listen_port, false);

  for (const auto& r : col.records)
    CHECK_MESSAGE(r.common.tgid != static_cast<fc_u32>(other.pid()),
                  "a non-target produced an event");

  // Connection events: one per socket, with addresses, fds and generation 1.
  fc_u64 client_conn = 0, server_conn = 0;
  for (const auto& r : col.of(target.pid(), FC_EVENT_CONNECT)) {
    if (r.conn.origin == FC_ORIGIN_PROC_SCAN) continue;
    CHECK(r.conn.family == family);
    CHECK(r.common.generation == 1);
    CHECK(r.common.conn_id != 0);
    std::uint8_t loop[16] = {};
    if (family == AF_INET) {
      in_addr a{htonl(INADDR_LOOPBACK)};
      std::memcpy(loop, &a, 4);
    } else {
      std::memcpy(loop, &in6addr_loopback, 16);
    }
    CHECK(std::memcmp(r.conn.local_addr, loop, 16) == 0);
    CHECK(std::memcmp(r.conn.peer_addr, loop, 16) == 0);
    if (r.conn.local_port == client_port && r.conn.peer_port == listen_port) {
      CHECK(client_conn == 0);
      client_conn = r.common.conn_id;
      CHECK(r.common.fd == client_fd);
      CHECK(r.common.role == FC_ROLE_OTHER);
      if (variant != Variant::kSockTracepoints) CHECK(r.conn.origin == FC_ORIGIN_CONNECT);
    } else if (r.conn.local_port == listen_port && r.conn.peer_port == client_port) {
      CHECK(server_conn == 0);
      server_conn = r.common.conn_id;
      CHECK(r.common.fd == server_fd);
      if (variant != Variant::kSockTracepoints) CHECK(r.conn.origin == FC_ORIGIN_ACCEPT);
    } else {
      FAIL("unexpected connection event, ports " << r.conn.local_port << " -> "
                                                 << r.conn.peer_port);
    }
  }
  REQUIRE(client_conn != 0);
  REQUIRE(server_conn != 0);
  CHECK(client_conn != server_conn);

  check_stream(col.records, client_conn, FC_DIR_SEND, kForward, true, true, kDefault, variant,
               FC_ROLE_OTHER);
  check_stream(col.records, server_conn, FC_DIR_RECV, kForward, true, false, kServer, variant,
               FC_ROLE_KAFKA_CLIENT);
  check_stream(col.records, server_conn, FC_DIR_SEND, kBackward, false, true, kServer, variant,
               FC_ROLE_KAFKA_CLIENT);
  check_stream(col.records, client_conn, FC_DIR_RECV, kBackward, false, false, kDefault, variant,
               FC_ROLE_OTHER);

  const auto totals = col.capture->totals();
  CHECK(totals.drops == 0);
  CHECK(totals.copy_faults == 0);
}

// fd reuse: close a connection, open another that gets the same fd numbers.
// Each round runs on its own CPU, the later one on a lower-numbered CPU, so the later round's
// records are likely read first (rings are per CPU).
int reuse_scenario(Child& self, int family) {
  const int cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  for (int round = 0; round < 2; ++round) {
    cpu_set_t one_cpu;
    CPU_ZERO(&one_cpu);
    CPU_SET(round == 0 ? cpus - 1 : 0, &one_cpu);
    if (sched_setaffinity(0, sizeof(one_cpu), &one_cpu) != 0) return 13;
    Loopback lb;
    if (!open_pair(lb, family)) return 10;
    const std::string msg = pattern(100 + round, 7);
    if (write(lb.client, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) return 11;
    std::string got(msg.size(), '\0');
    if (!wait_inq(lb.server, msg.size()) ||
        read(lb.server, got.data(), got.size()) != static_cast<ssize_t>(got.size()))
      return 12;
    self.report(lb.client);
    self.report(lb.server);
    self.report(lb.client_port);
    close(lb.client);
    close(lb.server);
    close(lb.listener);
    usleep(50000);
  }
  self.wait_parent();
  return 0;
}

void run_reuse(Variant variant) {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  Collector col({.ring_bytes_per_cpu = 1 << 20, .default_policy = kDefault, .variant = variant});
  Child target([](Child& c) { return reuse_scenario(c, AF_INET); });
  REQUIRE(col.capture->add_target(target.pid()).ok());
  target.go();
  int client_fd[2], server_fd[2], client_port[2];
  for (int round = 0; round < 2; ++round) {
    client_fd[round] = static_cast<int>(target.receive());
    server_fd[round] = static_cast<int>(target.receive());
    client_port[round] = static_cast<int>(target.receive());
  }
  CHECK(client_fd[0] == client_fd[1]);
  CHECK(server_fd[0] == server_fd[1]);
  usleep(200000);
  col.drain(10);
  target.nod();
  CHECK(target.wait() == 0);

  // Per (fd, round): the connection id and generation from the CONNECT events.
  for (int fd_kind = 0; fd_kind < 2; ++fd_kind) {
    const int fd = fd_kind == 0 ? client_fd[0] : server_fd[0];
    std::vector<Record> conns;
    for (const auto& r : col.of(target.pid(), FC_EVENT_CONNECT))
      if (r.common.fd == fd && r.conn.origin != FC_ORIGIN_PROC_SCAN) conns.push_back(r);
    REQUIRE(conns.size() == 2);
    // The rings are per CPU: when the two rounds ran on different CPUs, their records arrive
    // in either order. The kernel's clock orders them.
    std::sort(conns.begin(), conns.end(), [](const Record& a, const Record& b) {
      return a.common.timestamp_ns < b.common.timestamp_ns;
    });
    CHECK(conns[0].common.conn_id != conns[1].common.conn_id);
    CHECK(conns[0].common.generation + 1 == conns[1].common.generation);
    if (fd_kind == 0) {
      CHECK(conns[0].conn.local_port == client_port[0]);
      CHECK(conns[1].conn.local_port == client_port[1]);
    }
    // Data events carry the generation of their connection; the first closed with its bytes.
    for (int round = 0; round < 2; ++round) {
      bool data = false;
      for (const auto& r : col.of(target.pid(), FC_EVENT_DATA))
        if (r.common.conn_id == conns[round].common.conn_id) {
          data = true;
          CHECK(r.common.generation == conns[round].common.generation);
          CHECK(r.data.length == static_cast<fc_u32>(100 + round));
        }
      CHECK(data);
    }
    bool closed = false;
    for (const auto& r : col.of(target.pid(), FC_EVENT_CLOSE))
      if (r.common.conn_id == conns[0].common.conn_id) {
        closed = true;
        CHECK(r.common.generation == conns[0].common.generation);
        CHECK(r.conn.bytes[fd_kind == 0 ? FC_DIR_SEND : FC_DIR_RECV] == 100);
      }
    CHECK(closed);
  }
}

}  // namespace

TEST_CASE("every data syscall over IPv4, sock tracepoints") {
  run_io(Variant::kSockTracepoints, AF_INET);
}
TEST_CASE("every data syscall over IPv6, sock tracepoints") {
  run_io(Variant::kSockTracepoints, AF_INET6);
}
TEST_CASE("every data syscall over IPv4, syscall tracepoints") {
  run_io(Variant::kSyscallTracepoints, AF_INET);
}
TEST_CASE("every data syscall over IPv6, syscall tracepoints") {
  run_io(Variant::kSyscallTracepoints, AF_INET6);
}
TEST_CASE("fd reuse gives a new generation, sock tracepoints") {
  run_reuse(Variant::kSockTracepoints);
}
TEST_CASE("fd reuse gives a new generation, syscall tracepoints") {
  run_reuse(Variant::kSyscallTracepoints);
}
// The entry-exit pairs (kernels before 5.15) differ from the exit programs in where the
// arguments come from and how the fd table is reached: every call, connect, accept and close
// once more.
TEST_CASE("every data syscall over IPv4, syscall entry-exit pairs") {
  run_io(Variant::kSyscallEntryExit, AF_INET);
}
TEST_CASE("fd reuse gives a new generation, syscall entry-exit pairs") {
  run_reuse(Variant::kSyscallEntryExit);
}

namespace {

// A per-connection rule set from userspace after the connection was seen takes effect on its
// next call: here role "ignore" (counted, never copied), then a 10-byte cap.
int policy_scenario(Child& self) {
  Loopback lb;
  if (!open_pair(lb, AF_INET)) return 10;
  const std::string msg = pattern(500, 9);
  for (int round = 0; round < 3; ++round) {
    if (write(lb.client, msg.data(), msg.size()) != static_cast<ssize_t>(msg.size())) return 11;
    std::string got(msg.size(), '\0');
    if (!wait_inq(lb.server, msg.size()) || read(lb.server, got.data(), got.size()) != 500)
      return 12;
    self.report(lb.client_port);
    self.wait_parent();
  }
  return 0;
}

void run_policy(Variant variant) {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  Collector col({.ring_bytes_per_cpu = 1 << 20, .default_policy = kDefault, .variant = variant});
  Child target(policy_scenario);
  REQUIRE(col.capture->add_target(target.pid()).ok());
  target.go();
  const auto client_port = static_cast<std::uint16_t>(target.receive());
  col.drain(3);
  fc_u64 client = 0;
  for (const auto& r : col.of(target.pid(), FC_EVENT_CONNECT))
    if (r.conn.local_port == client_port) client = r.common.conn_id;
  REQUIRE(client != 0);
  REQUIRE(col.capture->set_connection_policy(client, {4096, 4096, FC_ROLE_IGNORE}).ok());
  target.nod();
  target.receive();
  REQUIRE(col.capture->set_connection_policy(client, {10, 10, FC_ROLE_OBJECT_STORE}).ok());
  target.nod();
  target.receive();
  col.drain(3);
  target.nod();
  CHECK(target.wait() == 0);
  col.capture->clear_connection_policy(client);

  std::vector<Record> sends;
  for (const auto& r : col.of(target.pid(), FC_EVENT_DATA))
    if (r.common.conn_id == client && r.data.direction == FC_DIR_SEND) sends.push_back(r);
  REQUIRE(sends.size() == 3);
  std::sort(sends.begin(), sends.end(),
            [](const Record& a, const Record& b) { return a.data.stream_pos < b.data.stream_pos; });
  CHECK(sends[0].common.role == FC_ROLE_OTHER);
  CHECK(sends[0].data.captured == 500);
  CHECK(sends[1].common.role == FC_ROLE_IGNORE);
  CHECK(sends[1].data.captured == 0);
  CHECK(sends[1].data.length == 500);
  CHECK(sends[1].data.stream_pos == 500);
  CHECK(sends[2].common.role == FC_ROLE_OBJECT_STORE);
  CHECK(sends[2].data.captured == 10);
  CHECK((sends[2].payload == pattern(500, 9).substr(0, 10)));
}

}  // namespace

TEST_CASE("per-connection policy takes effect, sock tracepoints") {
  run_policy(Variant::kSockTracepoints);
}
TEST_CASE("per-connection policy takes effect, syscall tracepoints") {
  run_policy(Variant::kSyscallTracepoints);
}

namespace {

// A keep-alive connection that dies without a close() of the target's own: the peer (the test
// process, not a target) resets it. The target's socket reaches TCP_CLOSE and must be reported
// closed while the target still holds the fd.
void run_reset(Variant variant) {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  Collector col({.ring_bytes_per_cpu = 1 << 20, .default_policy = kDefault, .variant = variant});
  int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&a), len) == 0);
  REQUIRE(listen(listener, 1) == 0);
  getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
  Child target([&](Child& self) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 10;
    const std::string msg = pattern(300, 11);
    if (write(fd, msg.data(), msg.size()) != 300) return 11;
    self.report(fd);
    self.wait_parent();  // the connection is reset meanwhile; the fd stays open until exit
    return 0;
  });
  REQUIRE(col.capture->add_target(target.pid()).ok());
  target.go();
  const int fd = static_cast<int>(target.receive());
  int peer = accept(listener, nullptr, nullptr);
  REQUIRE(peer >= 0);
  REQUIRE(wait_inq(peer, 300));
  linger reset{1, 0};
  setsockopt(peer, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
  close(peer);  // unread data + linger 0: an RST
  close(listener);
  usleep(100000);
  col.drain(5);
  std::vector<Record> conns;
  for (const auto& r : col.of(target.pid(), FC_EVENT_CONNECT))
    if (r.common.fd == fd && r.conn.origin != FC_ORIGIN_PROC_SCAN) conns.push_back(r);
  REQUIRE(conns.size() == 1);
  std::vector<Record> closes;
  for (const auto& r : col.of(target.pid(), FC_EVENT_CLOSE))
    if (r.common.conn_id == conns[0].common.conn_id) closes.push_back(r);
  REQUIRE(closes.size() == 1);  // before the target exits: it never called close()
  CHECK(closes[0].common.generation == conns[0].common.generation);
  CHECK(closes[0].conn.bytes[FC_DIR_SEND] == 300);
  CHECK(closes[0].conn.bytes[FC_DIR_RECV] == 0);
  target.nod();
  CHECK(target.wait() == 0);
  col.drain(3);  // exit closes the fd: no second CLOSE for the same connection
  std::size_t after = 0;
  for (const auto& r : col.of(target.pid(), FC_EVENT_CLOSE))
    after += r.common.conn_id == conns[0].common.conn_id;
  CHECK(after == 1);
}

}  // namespace

TEST_CASE("a connection reset by the peer is reported closed, sock tracepoints") {
  run_reset(Variant::kSockTracepoints);
}
TEST_CASE("a connection reset by the peer is reported closed, syscall tracepoints") {
  run_reset(Variant::kSyscallTracepoints);
}

namespace {

// A target run: `scenario` reports its client's port once its calls are made, and the
// records the target produced. `listen_policy`, if given, is set on the scenario's listener's
// port (the accepted side, or with `peer_side` the side that connected) after the scenario
// first reports that port.
struct TargetRun {
  std::vector<Record> records;
  std::uint16_t client_port = 0;
  std::uint64_t folded = 0;          // the capture's count of folded calls (Counters::folded)
  std::uint64_t folded_by_hint = 0;  // ... of which folded by a body hint
};

TargetRun run_target(Variant variant, const fc::capture::Policy& policy, int (*scenario)(Child&),
                     const fc::capture::Policy* listen_policy = nullptr, bool peer_side = false) {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  Collector col({.ring_bytes_per_cpu = 4 << 20, .default_policy = policy, .variant = variant});
  Child target(scenario);
  REQUIRE(col.capture->add_target(target.pid()).ok());
  target.go();
  std::uint16_t listen_port = 0;
  if (listen_policy) {
    listen_port = static_cast<std::uint16_t>(target.receive());
    REQUIRE(col.capture->set_port_policy(listen_port, peer_side, *listen_policy).ok());
    target.nod();
  }
  TargetRun run;
  run.client_port = static_cast<std::uint16_t>(target.receive());
  col.drain(5);
  target.nod();
  CHECK(target.wait() == 0);
  if (listen_policy) col.capture->clear_port_policy(listen_port, peer_side);
  for (const auto& r : col.records)
    if (r.common.tgid == static_cast<fc_u32>(target.pid())) run.records.push_back(r);
  const auto totals = col.capture->totals();
  run.folded = totals.folded;
  run.folded_by_hint = totals.folded_by_hint;
  return run;
}

// The data records of one side of the run's client connection (the client's, or with `server`
// the accepted one's) in one direction, in delivery order.
std::vector<Record> side_calls(const TargetRun& run, bool server, fc_u8 direction) {
  fc_u64 conn = 0;
  for (const auto& r : run.records)
    if (r.common.kind == FC_EVENT_CONNECT && r.conn.origin != FC_ORIGIN_PROC_SCAN &&
        (server ? r.conn.peer_port : r.conn.local_port) == run.client_port)
      conn = r.common.conn_id;
  REQUIRE(conn != 0);
  std::vector<Record> out;
  for (const auto& r : run.records)
    if (r.common.kind == FC_EVENT_DATA && r.common.conn_id == conn && r.data.direction == direction)
      out.push_back(r);
  return out;
}

// Bulk runs: the first large write of a run keeps the call cap, the ones that follow it in the
// same direction copy only the bulk prefix, and a byte from the other side starts a new run.
int bulk_scenario(Child& self) {
  Loopback lb;
  if (!open_pair(lb, AF_INET)) return 10;
  auto send = [&](int from, int to, std::size_t n, unsigned seed) {
    const std::string msg = pattern(n, seed);
    std::string got(n, '\0');
    return write(from, msg.data(), n) == static_cast<ssize_t>(n) && wait_inq(to, n) &&
           read(to, got.data(), n) == static_cast<ssize_t>(n);
  };
  const bool ok = send(lb.client, lb.server, 20000, 21) && send(lb.client, lb.server, 20000, 22) &&
                  send(lb.client, lb.server, 30000, 23) && send(lb.server, lb.client, 10, 24) &&
                  send(lb.client, lb.server, 20000, 25) && send(lb.client, lb.server, 100, 26);
  if (!ok) return 11;
  self.report(lb.client_port);
  self.wait_parent();
  return 0;
}

void run_bulk(Variant variant) {
  const auto run = run_target(variant, {4096, 4096, FC_ROLE_OTHER, 16384, 256}, bulk_scenario);
  const std::size_t length[] = {20000, 20000, 30000, 20000, 100};
  const unsigned seed[] = {21, 22, 23, 25, 26};
  std::vector<std::string> calls;
  for (std::size_t i = 0; i < std::size(length); ++i) calls.push_back(pattern(length[i], seed[i]));
  check_prefixes(side_calls(run, false, FC_DIR_SEND), calls, {4096, 256, 256, 4096, 100});
}

}  // namespace

TEST_CASE("bulk runs copy only a prefix after their first call, sock tracepoints") {
  run_bulk(Variant::kSockTracepoints);
}
TEST_CASE("bulk runs copy only a prefix after their first call, syscall tracepoints") {
  run_bulk(Variant::kSyscallTracepoints);
}

namespace {

// Vectored sends: an iovec of at least bulk_from bytes is a body handed over whole and gives
// only the bulk prefix, so the headers after it still fit in the call cap. A receive's iovec
// is a buffer: its size says nothing, and the call cap applies as before.
const std::size_t kBodyIovecs[] = {100, 20000, 50, 20000, 30};

// One writev of iovecs of `sizes` (pattern seeds 31, 32, ...), read with one readv.
int writev_scenario(Child& self, const std::vector<std::size_t>& sizes) {
  Loopback lb;
  if (!open_pair(lb, AF_INET)) return 10;
  std::vector<std::string> parts;
  std::vector<iovec> iov;
  std::size_t total = 0;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    parts.push_back(pattern(sizes[i], 31 + static_cast<unsigned>(i)));
    total += sizes[i];
  }
  for (auto& p : parts) iov.push_back({p.data(), p.size()});
  if (writev(lb.client, iov.data(), static_cast<int>(iov.size())) != static_cast<ssize_t>(total))
    return 11;
  if (!wait_inq(lb.server, total)) return 12;
  std::string got(65536, '\0');
  iovec into{got.data(), got.size()};
  if (readv(lb.server, &into, 1) != static_cast<ssize_t>(total)) return 13;
  self.report(lb.client_port);
  self.wait_parent();
  return 0;
}

int vectored_body_scenario(Child& self) {
  return writev_scenario(self, {std::begin(kBodyIovecs), std::end(kBodyIovecs)});
}

// An iovec that alone fills the largest capture (16 KiB, no bulk rule): its segment holds its
// bytes.
int full_iovec_scenario(Child& self) {
  return writev_scenario(self, {20000, 100});
}

void run_full_iovec(Variant variant) {
  const auto run = run_target(variant, {FC_MAX_CAPTURE, FC_MAX_CAPTURE, FC_ROLE_OTHER, 0, 0},
                              full_iovec_scenario);
  const auto sends = side_calls(run, false, FC_DIR_SEND);
  REQUIRE(sends.size() == 1);
  const Record& w = sends[0];
  CHECK(w.data.length == 20100);
  REQUIRE(w.segments.size() == 1);
  CHECK(w.segments[0].offset == 0);
  CHECK(w.segments[0].length == FC_MAX_CAPTURE);
  CHECK(w.payload == pattern(20000, 31).substr(0, FC_MAX_CAPTURE));
}

void run_vectored_body(Variant variant) {
  const auto run =
      run_target(variant, {4096, 4096, FC_ROLE_OTHER, 16384, 256}, vectored_body_scenario);
  const auto sends = side_calls(run, false, FC_DIR_SEND);
  const auto receives = side_calls(run, true, FC_DIR_RECV);
  REQUIRE(sends.size() == 1);
  const Record& w = sends[0];
  CHECK(w.data.source == FC_SRC_WRITEV);
  CHECK(w.data.length == 40180);
  // Expected segments: each header whole, each body's first 256 bytes, at their offsets.
  std::string expected;
  std::vector<std::pair<std::size_t, std::size_t>> segments;  // offset, length
  std::size_t offset = 0;
  for (std::size_t i = 0; i < std::size(kBodyIovecs); ++i) {
    const std::size_t take = std::min<std::size_t>(kBodyIovecs[i], 256);
    expected += pattern(kBodyIovecs[i], 31 + static_cast<unsigned>(i)).substr(0, take);
    segments.emplace_back(offset, take);
    offset += kBodyIovecs[i];
  }
  CHECK(w.data.captured == expected.size());
  CHECK(w.payload == expected);
  REQUIRE(w.segments.size() == segments.size());
  for (std::size_t i = 0; i < segments.size(); ++i) {
    INFO("segment " << i);
    CHECK(w.segments[i].offset == segments[i].first);
    CHECK(w.segments[i].length == segments[i].second);
  }
  // The receive into one 64 KiB buffer keeps the call cap.
  REQUIRE(receives.size() == 1);
  CHECK(receives[0].data.length == 40180);
  CHECK(receives[0].data.captured == 4096);
  std::string sent;
  for (std::size_t i = 0; i < std::size(kBodyIovecs); ++i)
    sent += pattern(kBodyIovecs[i], 31 + static_cast<unsigned>(i));
  CHECK(receives[0].payload == sent.substr(0, 4096));
}

// A Kafka response written from memory (records read from the remote tier): a first header,
// then partition headers between records, most of them below bulk_from. The first iovec keeps
// the cap it needs; each later one gets at most an equal share of what is left, so every
// header is whole and every body gives a prefix. (Before, the first records took the rest of
// the cap and every header after them was lost.)
const std::size_t kMemoryResponseIovecs[] = {1500, 6000, 50, 600,  50, 20000, 50, 6000,
                                             50,   600,  50, 6000, 50, 600,   50, 40};

int memory_response_scenario(Child& self) {
  return writev_scenario(self,
                         {std::begin(kMemoryResponseIovecs), std::end(kMemoryResponseIovecs)});
}

void run_memory_response(Variant variant) {
  const auto run =
      run_target(variant, {4096, 4096, FC_ROLE_OTHER, 16384, 256}, memory_response_scenario);
  const auto sends = side_calls(run, false, FC_DIR_SEND);
  REQUIRE(sends.size() == 1);
  const Record& w = sends[0];
  std::size_t total = 0;
  for (std::size_t size : kMemoryResponseIovecs) total += size;
  CHECK(w.data.length == total);
  CHECK(w.data.captured <= 4096);
  CHECK((w.common.flags & FC_FLAG_TRUNCATED_SEGS) == 0);
  REQUIRE(w.segments.size() == std::size(kMemoryResponseIovecs));
  CHECK(w.segments[0].length == 1500);
  std::size_t offset = 0, at = 0;
  for (std::size_t i = 0; i < std::size(kMemoryResponseIovecs); ++i) {
    INFO("iovec " << i);
    const std::size_t size = kMemoryResponseIovecs[i];
    const std::size_t length = w.segments[i].length;
    CHECK(w.segments[i].offset == offset);
    if (size <= 100)
      CHECK(length == size);  // a header: whole
    else if (i > 0)
      CHECK((length > 0 && length < size));  // records: a prefix
    const std::string sent = pattern(size, 31 + static_cast<unsigned>(i));
    CHECK(w.payload.substr(at, length) == sent.substr(0, length));
    offset += size;
    at += length;
  }
  CHECK(at == w.data.captured);
}

}  // namespace

TEST_CASE("records below bulk_from leave room for the headers after them, sock tracepoints") {
  run_memory_response(Variant::kSockTracepoints);
}
TEST_CASE("records below bulk_from leave room for the headers after them, syscall tracepoints") {
  run_memory_response(Variant::kSyscallTracepoints);
}
TEST_CASE("a large iovec of a vectored send gives only the bulk prefix, sock tracepoints") {
  run_vectored_body(Variant::kSockTracepoints);
}
TEST_CASE("a large iovec of a vectored send gives only the bulk prefix, syscall tracepoints") {
  run_vectored_body(Variant::kSyscallTracepoints);
}
TEST_CASE("an iovec that fills the whole 16 KiB capture is copied, sock tracepoints") {
  run_full_iovec(Variant::kSockTracepoints);
}
TEST_CASE("an iovec that fills the whole 16 KiB capture is copied, syscall tracepoints") {
  run_full_iovec(Variant::kSyscallTracepoints);
}

namespace {

// Response framing on a Kafka client connection: a sendfile that ends inside a response has no
// record of its own; it reaches userspace as the sendfile record it stands for, ahead of the
// record that carried it. A wrong guess (a size prefix the response does not keep) only delays
// the report until the connection's next receive or its close.
struct SendCall {
  bool file;
  std::string bytes;
};

bool send_call(int fd, const SendCall& c) {
  if (!c.file) {
    iovec iov{const_cast<char*>(c.bytes.data()), c.bytes.size()};
    return writev(fd, &iov, 1) == static_cast<ssize_t>(c.bytes.size());
  }
  char path[] = "/tmp/fc-fold-XXXXXX";
  int f = mkstemp(path);
  if (f < 0) return false;
  unlink(path);
  bool ok = write(f, c.bytes.data(), c.bytes.size()) == static_cast<ssize_t>(c.bytes.size());
  off_t start = 0;
  ok = ok && sendfile(fd, f, &start, c.bytes.size()) == static_cast<ssize_t>(c.bytes.size());
  close(f);
  return ok;
}

// What the records of `calls` hold: the calls' bytes in order, and how many of each are captured
// (a write whole, a sendfile none).
struct SentStream {
  std::vector<std::string> bytes;
  std::vector<std::size_t> captured;
};
SentStream sent_stream(const std::vector<SendCall>& calls) {
  SentStream out;
  for (const auto& c : calls) {
    out.bytes.push_back(c.bytes);
    out.captured.push_back(c.file ? 0 : c.bytes.size());
  }
  return out;
}

// A loopback connection whose listener's port is reported; returns once the parent has made it
// a Kafka port.
bool open_kafka_loopback(Child& self, Loopback& lb) {
  if (!open_pair(lb, AF_INET)) return false;
  self.report(lb.listen_port);
  self.wait_parent();
  return true;
}

// The client sends a request of 30 bytes (pattern `seed`) and the broker side reads it.
bool serve_request(const Loopback& lb, unsigned seed) {
  const std::string request = pattern(30, seed);
  std::string got(30, '\0');
  return write(lb.client, request.data(), 30) == 30 && wait_inq(lb.server, 30) &&
         read(lb.server, got.data(), 30) == 30;
}

// A Kafka connection on loopback: the listener's port is reported and given a policy, the
// client sends one request, the broker side answers with `calls` (memory with write(2) when
// `plain_write`, else writev(2); files with sendfile) and the client reads them all.
int answer_one_request(Child& self, const std::vector<SendCall>& calls, bool plain_write) {
  Loopback lb;
  if (!open_kafka_loopback(self, lb)) return 10;
  if (!serve_request(lb, 99)) return 11;
  std::size_t total = 0;
  for (const auto& c : calls) {
    const bool sent = plain_write && !c.file ? write(lb.server, c.bytes.data(), c.bytes.size()) ==
                                                   static_cast<ssize_t>(c.bytes.size())
                                             : send_call(lb.server, c);
    if (!sent) return 12;
    total += c.bytes.size();
  }
  std::string sink(total, '\0');
  if (!wait_inq(lb.client, total) || read(lb.client, sink.data(), total) != ssize_t(total))
    return 13;
  self.report(lb.client_port);
  self.wait_parent();
  return 0;
}

std::string be32(std::uint32_t v) {
  v = htonl(v);
  return std::string(reinterpret_cast<const char*>(&v), 4);
}

// A response: its first call starts with the size prefix of the whole response (or `claim`).
std::vector<SendCall> response(std::vector<std::pair<bool, std::size_t>> calls, unsigned seed,
                               std::uint32_t claim = 0) {
  std::size_t total = 0;
  for (const auto& c : calls) total += c.second;
  std::vector<SendCall> out;
  for (std::size_t i = 0; i < calls.size(); ++i) {
    std::string b = pattern(calls[i].second, seed + static_cast<unsigned>(i));
    if (i == 0) b.replace(0, 4, be32(claim ? claim : static_cast<std::uint32_t>(total - 4)));
    out.push_back({calls[i].first, b});
  }
  return out;
}

// The calls the target makes on the broker side, in order; `request` marks where the client's
// request is read. The expected fold of each is in `folded_expected`.
const std::vector<std::pair<bool, std::size_t>> kR1 = {
    {false, 24}, {true, 3000}, {false, 30}, {true, 5000}, {false, 10}};
const std::vector<std::pair<bool, std::size_t>> kR2 = {
    {false, 20}, {true, 4000}, {false, 20}, {true, 2000}};  // ends with a sendfile
const std::vector<std::pair<bool, std::size_t>> kR3 = {{false, 8}, {true, 1000}};  // claims more
const bool kFoldedExpected[] = {false, true,  false, true,  false, false,
                                true,  false, false, false, true,  true};

std::vector<SendCall> broker_calls() {
  std::vector<SendCall> all;
  for (auto& c : response(kR1, 40)) all.push_back(c);
  for (auto& c : response(kR2, 50)) all.push_back(c);  // pipelined: no request in between
  for (auto& c : response(kR3, 60, 100000)) all.push_back(c);
  all.push_back({true, pattern(500, 70)});  // after the next request, then the close
  return all;
}

int fold_scenario(Child& self) {
  if (!pin_to_this_cpu()) return 9;  // the checks below follow the records' delivery order
  Loopback lb;
  if (!open_kafka_loopback(self, lb)) return 10;
  if (!serve_request(lb, 80)) return 11;
  const auto calls = broker_calls();
  for (std::size_t i = 0; i + 1 < calls.size(); ++i)
    if (!send_call(lb.server, calls[i])) return 12;
  if (!serve_request(lb, 80)) return 13;  // reports the folded sendfile of the wrong guess
  if (!send_call(lb.server, calls.back())) return 14;
  std::size_t total = 0;
  for (const auto& c : calls) total += c.bytes.size();
  std::string sink(total, '\0');
  if (!wait_inq(lb.client, total) || read(lb.client, sink.data(), total) != ssize_t(total))
    return 15;
  close(lb.server);  // reports the last fold
  close(lb.client);
  self.report(lb.client_port);
  self.wait_parent();
  return 0;
}

void run_fold(Variant variant) {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  Collector col({.ring_bytes_per_cpu = 1 << 20, .default_policy = kDefault, .variant = variant});
  Child target(fold_scenario);
  const auto listen_port = watch_kafka_listener(col, target);
  const auto client_port = static_cast<std::uint16_t>(target.receive());
  usleep(50000);  // the close's last state change
  col.drain(5);
  target.nod();
  CHECK(target.wait() == 0);
  col.capture->clear_port_policy(listen_port, false);

  const fc_u64 server = conn_by_ports(col, target.pid(), listen_port, client_port);
  REQUIRE(server != 0);
  // Delivery order of the server's records: sends, receives and the close.
  std::vector<const Record*> sends;
  std::size_t last_recv = 0, close_at = 0, second_recv_at = 0, recvs = 0;
  for (std::size_t i = 0; i < col.records.size(); ++i) {
    const Record& r = col.records[i];
    if (r.common.conn_id != server) continue;
    if (r.common.kind == FC_EVENT_CLOSE) close_at = i;
    if (r.common.kind != FC_EVENT_DATA) continue;
    if (r.data.direction == FC_DIR_SEND) {
      sends.push_back(&r);
    } else if (++recvs == 2) {
      second_recv_at = i;
    }
    last_recv = i;
  }
  (void)last_recv;
  const auto calls = broker_calls();
  const auto sent = sent_stream(calls);
  std::size_t pos = 0;
  for (const auto& b : sent.bytes) pos += b.size();
  std::vector<Record> in_delivery;
  for (const Record* r : sends) in_delivery.push_back(*r);
  check_stream(in_delivery, sent.bytes, sent.captured);
  for (const Record* r : sends) CHECK(r->common.comm[0] == 0);  // a Kafka client connection
  if (variant != Variant::kSockTracepoints) {                   // a record per call
    REQUIRE(sends.size() == calls.size());
    for (std::size_t i = 0; i < calls.size(); ++i) {
      INFO("call " << i);
      const Record& r = *sends[i];
      CHECK(r.data.length == calls[i].bytes.size());
      CHECK(r.data.source == (calls[i].file ? FC_SRC_SENDFILE : FC_SRC_WRITEV));
      CHECK(r.folded == kFoldedExpected[i]);
    }
    CHECK(col.capture->totals().gathered == 0);
  } else {
    // A response's sends, and the sendfiles between them, are one record (responses 1 and 2).
    // Response 3 (a wrong guess: it claims more than comes) is gathered until the request after
    // it; the sendfile after that request is folded, reported at the close.
    const fc_u8 sources[] = {FC_SRC_GATHERED, FC_SRC_GATHERED, FC_SRC_GATHERED, FC_SRC_SENDFILE};
    const std::size_t lengths[] = {24 + 3000 + 30 + 5000 + 10, 20 + 4000 + 20 + 2000, 8 + 1000,
                                   500};
    REQUIRE(sends.size() == std::size(sources));
    for (std::size_t i = 0; i < sends.size(); ++i) {
      INFO("record " << i);
      CHECK(sends[i]->data.source == sources[i]);
      CHECK(sends[i]->data.length == lengths[i]);
      CHECK(sends[i]->folded == (i >= 3));
    }
    CHECK(col.capture->totals().gathered == 6);  // the writes
  }
  // The wrong guess's fold comes before the request that reported it, the last before the close.
  const std::size_t wrong_fold = std::size_t(sends[sends.size() - 2] - col.records.data());
  const std::size_t last_fold = std::size_t(sends.back() - col.records.data());
  CHECK(wrong_fold < second_recv_at);
  REQUIRE(close_at != 0);
  CHECK(last_fold < close_at);
  CHECK(col.records[close_at].conn.bytes[FC_DIR_SEND] == pos);
  // The sendfile that ends response 2 is folded too when it closes a gathered record.
  CHECK(col.capture->totals().folded == (variant != Variant::kSockTracepoints ? 5u : 6u));
}

}  // namespace

TEST_CASE("sendfiles inside a Kafka response are folded, sock tracepoints") {
  run_fold(Variant::kSockTracepoints);
}
TEST_CASE("sendfiles inside a Kafka response are folded, syscall tracepoints") {
  run_fold(Variant::kSyscallTracepoints);
}

namespace {

// A JVM broker writes each in-memory records buffer of a Fetch response with a write of its
// own: inside a response, a large send is records and gives only the bulk prefix; a large send
// that starts a response keeps the call cap (its header is there).
const std::size_t kRecordsCalls[] = {100, 20000, 50, 20000};
const std::size_t kRecordsCaptured[] = {100, 256, 50, 4096};

std::vector<std::string> records_calls() {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < std::size(kRecordsCalls); ++i)
    out.push_back(pattern(kRecordsCalls[i], 90 + static_cast<unsigned>(i)));
  out[0].replace(0, 4, be32(100 + 20000 + 50 - 4));  // response 1: calls 0-2
  out[3].replace(0, 4, be32(20000 - 4));             // response 2: call 3 alone
  return out;
}

int records_scenario(Child& self) {
  std::vector<SendCall> calls;
  for (auto& c : records_calls()) calls.push_back({false, c});
  return answer_one_request(self, calls, true);
}

// The records of one direction of a loopback connection made by `scenario`, which reports its
// listener's port, waits while that port gets `policy` (the listener's side, or the side that
// connected to it when `peer_side`), then reports the client's port when done.
std::vector<Record> with_port_policy(Variant variant, int (*scenario)(Child&), bool peer_side,
                                     const fc::capture::Policy& policy, fc_u8 direction) {
  const auto run = run_target(variant, kDefault, scenario, &policy, peer_side);
  return side_calls(run, !peer_side, direction);
}

void run_records(Variant variant) {
  const auto sends = with_port_policy(variant, records_scenario, false,
                                      {4096, 4096, FC_ROLE_KAFKA_CLIENT, 16384, 256}, FC_DIR_SEND);
  const std::vector<std::size_t> captured(std::begin(kRecordsCaptured), std::end(kRecordsCaptured));
  if (variant != Variant::kSockTracepoints) {  // a record per call
    check_prefixes(sends, records_calls(), captured);
    return;
  }
  // Sock variant: response 1's three sends are gathered into one record; response 2's send
  // captures more than the gather holds and has a record of its own.
  const auto in_order = check_stream(sends, records_calls(), captured);
  REQUIRE(in_order.size() == 2);
  CHECK(in_order[0].data.source == FC_SRC_GATHERED);
  CHECK(in_order[0].data.length == 100 + 20000 + 50);
  CHECK(in_order[0].segments.size() == 3);
  CHECK(in_order[1].data.source == FC_SRC_WRITE);
}

}  // namespace

namespace {

// A response of 30 partitions as a broker writes it: its header, then per partition the records
// (a sendfile) and the next partition's header. Headers of 24 bytes, except one of 600 (too
// large to gather) and two of 300 (they do not fit the gather's 512 bytes together).
std::vector<SendCall> many_partitions() {
  std::vector<std::pair<bool, std::size_t>> calls = {{false, 30}};
  for (int i = 0; i < 30; ++i) {
    calls.push_back({true, 1000});
    calls.push_back({false, i == 20 ? 600u : (i == 21 || i == 22) ? 300u : 24u});
  }
  return response(calls, 110);
}

int many_partitions_scenario(Child& self) {
  return answer_one_request(self, many_partitions(), false);
}

void run_many_partitions(Variant variant) {
  const auto sends = with_port_policy(variant, many_partitions_scenario, false,
                                      {4096, 4096, FC_ROLE_KAFKA_CLIENT}, FC_DIR_SEND);
  const auto sent = sent_stream(many_partitions());
  const auto in_order = check_stream(sends, sent.bytes, sent.captured);
  if (variant != Variant::kSockTracepoints) {  // a record per call (sendfiles folded)
    CHECK(in_order.size() == sent.bytes.size());
    return;
  }
  // Sock variant. The gather opens with the response's header and closes when it holds 16
  // writes (the header and partitions 0-14; the sendfile of 15 was already in its range),
  // before the 600-byte header (which gets a record of its own), when the second 300-byte
  // header does not fit, and when the response ends.
  const fc_u8 sources[] = {FC_SRC_GATHERED, FC_SRC_GATHERED, FC_SRC_WRITEV, FC_SRC_GATHERED,
                           FC_SRC_GATHERED};
  const std::size_t lengths[] = {30 + 16 * 1000 + 15 * 24, 5 * 24 + 5 * 1000, 600,
                                 1000 + 300 + 1000, 300 + 7 * (1000 + 24)};
  const std::size_t segments[] = {16, 5, 1, 1, 8};
  REQUIRE(in_order.size() == std::size(sources));
  for (std::size_t i = 0; i < in_order.size(); ++i) {
    INFO("record " << i);
    CHECK(in_order[i].data.source == sources[i]);
    CHECK(in_order[i].data.length == lengths[i]);
    CHECK(in_order[i].segments.size() == segments[i]);
  }
}

}  // namespace

namespace {

// A partition's records of several pipe's worth of pages in one sendfile: the kernel splices them
// to the socket 64 KiB at a time, one sock_sendmsg (and one run of the send program) each. The
// client reads while the broker side sends (loopback would not hold it all unread).
constexpr std::size_t kLargeFile = 300000;

std::vector<SendCall> large_sendfile_response() {
  return response({{false, 24}, {true, kLargeFile}, {false, 10}}, 120);
}

std::size_t total_bytes(const std::vector<SendCall>& calls) {
  std::size_t total = 0;
  for (const auto& c : calls) total += c.bytes.size();
  return total;
}

// The client reads `total` bytes on a thread of its own; `done` says whether it got them all.
std::thread read_all(int fd, std::size_t total, bool& done) {
  return std::thread([fd, total, &done] {
    std::string sink(total, '\0');
    std::size_t got = 0;
    while (got < total) {
      const ssize_t n = read(fd, sink.data() + got, total - got);
      if (n <= 0) return;
      got += static_cast<std::size_t>(n);
    }
    done = true;
  });
}

// The broker side makes `calls` while the client reads them (loopback would not hold them all
// unread). Returns whether all were sent and read.
bool send_while_read(const Loopback& lb, const std::vector<SendCall>& calls) {
  bool read = false;
  std::thread reader = read_all(lb.client, total_bytes(calls), read);
  bool sent = true;
  for (const auto& c : calls) sent = sent && send_call(lb.server, c);
  if (!sent) shutdown(lb.client, SHUT_RDWR);  // ends the reader
  reader.join();
  return sent && read;
}

int large_sendfile_scenario(Child& self) {
  Loopback lb;
  if (!open_kafka_loopback(self, lb)) return 10;
  if (!serve_request(lb, 98)) return 11;
  if (!send_while_read(lb, large_sendfile_response())) return 12;
  self.report(lb.client_port);
  self.wait_parent();
  return 0;
}

void run_large_sendfile(Variant variant) {
  const fc::capture::Policy kafka{4096, 4096, FC_ROLE_KAFKA_CLIENT};
  const auto run = run_target(variant, kDefault, large_sendfile_scenario, &kafka);
  const auto sends = side_calls(run, true, FC_DIR_SEND);
  const auto sent = sent_stream(large_sendfile_response());
  const auto in_order = check_stream(sends, sent.bytes, sent.captured);
  if (variant == Variant::kSockTracepoints) {
    // The header opens a gather, the sendfile's five runs fold into its range, the tail ends it:
    // one record, the header's and the tail's bytes its two segments.
    REQUIRE(in_order.size() == 1);
    CHECK(in_order[0].data.source == FC_SRC_GATHERED);
    CHECK(in_order[0].data.length == total_bytes(large_sendfile_response()));
    CHECK(in_order[0].segments.size() == 2);
    // Every folded run is counted: the splices after the first by the connection's next call
    // (the tail) or its close: at least one more than the first, at most one per page.
    CHECK(run.folded >= 2);
    CHECK(run.folded <= kLargeFile / 4096 + 1);
    return;
  }
  // The header, the whole sendfile as one folded record, the tail that ends the response.
  REQUIRE(in_order.size() == 3);
  CHECK(in_order[0].data.source == FC_SRC_WRITEV);
  CHECK(in_order[1].data.source == FC_SRC_SENDFILE);
  CHECK(in_order[1].data.length == kLargeFile);
  CHECK(in_order[1].folded);
  CHECK(in_order[2].data.source == FC_SRC_WRITEV);
  CHECK_FALSE(in_order[2].folded);
  CHECK(run.folded == 1);  // the one call
}

}  // namespace

namespace {

// The sends that follow a sendfile's folded first splice are folded from the socket's state
// alone (sock variant), up to where that sendfile's count ends. The stream stays exact where a
// many-splice sendfile ends a response (its last splice frames the next response), and where a
// sendfile to a full non-blocking socket stops short and is resumed by later calls. The
// responses' headers are larger than a gather holds (as with many partitions), so on the sock
// variant too the sendfiles are folded into the connection, not into a gathered record.
constexpr std::size_t kEndingFile = 200000;
constexpr std::size_t kResumedFile = 400000;
constexpr std::size_t kLargeHeader = 600;

std::vector<SendCall> ending_sendfile_response() {
  return response({{false, kLargeHeader}, {true, kLargeFile}, {true, kEndingFile}}, 130);
}
std::vector<SendCall> resumed_sendfile_response() {
  return response({{false, kLargeHeader}, {true, kResumedFile}, {false, 10}}, 140);
}

// Sends `bytes` with sendfile on a non-blocking socket whose peer does not read yet: the first
// call stops short (the socket's buffers hold far less), then the reader starts and the rest
// goes out in as many calls as the socket takes. Returns the calls made, 0 on an error or if the
// first call was not short.
int resumed_sendfile(const Loopback& lb, const std::string& bytes, std::thread& reader,
                     std::size_t reader_total, bool& read_done) {
  char path[] = "/tmp/fc-fold-XXXXXX";
  const int f = mkstemp(path);
  if (f < 0) return 0;
  unlink(path);
  if (write(f, bytes.data(), bytes.size()) != static_cast<ssize_t>(bytes.size())) return 0;
  off_t at = 0;
  int calls = 0;
  while (static_cast<std::size_t>(at) < bytes.size()) {
    const ssize_t n = sendfile(lb.server, f, &at, bytes.size() - static_cast<std::size_t>(at));
    ++calls;
    if (calls == 1 && (n <= 0 || static_cast<std::size_t>(n) == bytes.size())) break;
    if (calls == 1) reader = read_all(lb.client, reader_total, read_done);
    if (n < 0 && errno != EAGAIN) break;
    pollfd p{lb.server, POLLOUT, 0};
    if (n < 0) poll(&p, 1, 5000);
  }
  close(f);
  return static_cast<std::size_t>(at) == bytes.size() && calls > 1 ? calls : 0;
}

int ending_and_resumed_scenario(Child& self) {
  Loopback lb;
  if (!open_kafka_loopback(self, lb)) return 10;
  // Response 1: its sendfiles (blocking) end it.
  if (!serve_request(lb, 97)) return 11;
  if (!send_while_read(lb, ending_sendfile_response())) return 12;
  // Response 2 on a non-blocking socket with small buffers: its sendfile stops short.
  if (!serve_request(lb, 96)) return 13;
  const int small = 4096;
  setsockopt(lb.server, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
  setsockopt(lb.client, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  fcntl(lb.server, F_SETFL, fcntl(lb.server, F_GETFL) | O_NONBLOCK);
  const auto second = resumed_sendfile_response();
  bool read_second = false;
  std::thread late_reader;
  const bool ok =
      send_call(lb.server, second[0]) &&
      resumed_sendfile(lb, second[1].bytes, late_reader, total_bytes(second), read_second) > 0;
  pollfd p{lb.server, POLLOUT, 0};
  const bool tail = ok && poll(&p, 1, 5000) == 1 && send_call(lb.server, second[2]);
  if (!tail) shutdown(lb.client, SHUT_RDWR);
  if (late_reader.joinable()) late_reader.join();
  if (!tail) return 14;
  if (!read_second) return 15;
  self.report(lb.client_port);
  self.wait_parent();
  return 0;
}

void run_ending_and_resumed(Variant variant) {
  const auto sends = with_port_policy(variant, ending_and_resumed_scenario, false,
                                      {4096, 4096, FC_ROLE_KAFKA_CLIENT}, FC_DIR_SEND);
  auto calls = ending_sendfile_response();
  for (auto& c : resumed_sendfile_response()) calls.push_back(c);
  const auto sent = sent_stream(calls);
  const auto in_order = check_stream(sends, sent.bytes, sent.captured);
  // Response 1 ends with a record of the sendfile that ends it, not folded (on the sock
  // tracepoints its last splice; what came before it is folded).
  const std::size_t first_end = total_bytes(ending_sendfile_response());
  std::size_t i = 0;
  while (i < in_order.size() && in_order[i].data.stream_pos + in_order[i].data.length < first_end)
    ++i;
  REQUIRE(i + 3 < in_order.size());
  CHECK(in_order[i].data.stream_pos + in_order[i].data.length == first_end);
  CHECK(in_order[i].data.source == FC_SRC_SENDFILE);
  CHECK_FALSE(in_order[i].folded);
  // Response 2: its header starts a response (so its sendfile is folded, across all the calls
  // that sent it), then the tail.
  REQUIRE(in_order.size() == i + 4);
  CHECK(in_order[i + 1].data.source == FC_SRC_WRITEV);
  CHECK(in_order[i + 1].data.length == kLargeHeader);
  CHECK(in_order[i + 2].data.source == FC_SRC_SENDFILE);
  CHECK(in_order[i + 2].data.length == kResumedFile);
  CHECK(in_order[i + 2].folded);
  CHECK(in_order[i + 3].data.source == FC_SRC_WRITEV);
  CHECK(in_order[i + 3].data.length == 10);
  CHECK_FALSE(in_order[i + 3].folded);
}

}  // namespace

TEST_CASE("sendfiles that end a response or stop short keep the stream exact, sock tracepoints") {
  run_ending_and_resumed(Variant::kSockTracepoints);
}
TEST_CASE("sendfiles that end a response or stop short keep the stream exact, syscall") {
  run_ending_and_resumed(Variant::kSyscallTracepoints);
}

TEST_CASE("a sendfile of several 64 KiB splices inside a response is one fold, sock tracepoints") {
  run_large_sendfile(Variant::kSockTracepoints);
}
TEST_CASE("a sendfile of several 64 KiB splices inside a response is one fold, syscall") {
  run_large_sendfile(Variant::kSyscallTracepoints);
}

TEST_CASE("a response's later sends are gathered in records of at most 16 and 512 B, sock") {
  run_many_partitions(Variant::kSockTracepoints);
}
TEST_CASE("a response's later sends are gathered in records of at most 16 and 512 B, syscall") {
  run_many_partitions(Variant::kSyscallTracepoints);
}

namespace {

// A response whose two sends both fit the gather, then one of a single send (a small answer, an
// empty fetch): on the sock variant each send that starts a response opens the gather. The
// first response leaves as one record when its second send ends it; the second, which ends with
// its first send, is handed on at once (the drain runs before the connection closes, and nothing
// follows it), as the record of its call.
std::vector<SendCall> one_and_two_send_responses() {
  auto calls = response({{false, 30}, {false, 50}}, 160);
  for (auto& c : response({{false, 40}}, 150)) calls.push_back(c);
  return calls;
}

int one_and_two_send_scenario(Child& self) {
  return answer_one_request(self, one_and_two_send_responses(), false);
}

void run_one_and_two_sends(Variant variant) {
  const auto sends = with_port_policy(variant, one_and_two_send_scenario, false,
                                      {4096, 4096, FC_ROLE_KAFKA_CLIENT}, FC_DIR_SEND);
  const auto sent = sent_stream(one_and_two_send_responses());
  const auto in_order = check_stream(sends, sent.bytes, sent.captured);
  if (variant != Variant::kSockTracepoints) {  // a record per call
    CHECK(in_order.size() == 3);
    return;
  }
  REQUIRE(in_order.size() == 2);
  CHECK(in_order[0].data.source == FC_SRC_GATHERED);
  CHECK(in_order[0].data.length == 30 + 50);
  CHECK(in_order[0].segments.size() == 2);
  CHECK(in_order[1].data.source == FC_SRC_WRITEV);
  CHECK(in_order[1].data.length == 40);
}

}  // namespace

TEST_CASE("a response's first send opens the gather; one that ends there leaves at once, sock") {
  run_one_and_two_sends(Variant::kSockTracepoints);
}
TEST_CASE("a response's first send opens the gather; one that ends there leaves at once, syscall") {
  run_one_and_two_sends(Variant::kSyscallTracepoints);
}

namespace {

// Two connections answer at once with a single gather slot (sock variant): A's response, in
// flight, holds it, so B's response meanwhile keeps a record per send (counted as not gathered);
// once A's record has left, the slot is free and B's next response is gathered again.
const std::vector<std::pair<bool, std::size_t>> kHeaderAndFile = {{false, 20}, {true, 2000}};
std::vector<SendCall> busy_slot_calls_a() {
  return response(kHeaderAndFile, 130);
}
std::vector<SendCall> busy_slot_calls_b() {
  auto calls = response(kHeaderAndFile, 140);
  for (auto& c : response(kHeaderAndFile, 150)) calls.push_back(c);
  return calls;
}

bool read_all(int fd, const std::vector<SendCall>& calls) {
  std::size_t total = 0;
  for (const auto& c : calls) total += c.bytes.size();
  std::string sink(total, '\0');
  return wait_inq(fd, total) && read(fd, sink.data(), total) == ssize_t(total);
}

int busy_slot_scenario(Child& self) {
  Loopback a;
  if (!open_kafka_loopback(self, a)) return 10;
  Loopback b = a;  // a second connection to the same Kafka port
  b.client = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(a.listen_port);
  if (connect(b.client, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) return 11;
  b.server = accept(a.listener, nullptr, nullptr);
  sockaddr_in mine{};
  socklen_t len = sizeof(mine);
  if (b.server < 0 || getsockname(b.client, reinterpret_cast<sockaddr*>(&mine), &len) != 0)
    return 12;
  if (!serve_request(a, 131) || !serve_request(b, 141)) return 13;
  const auto calls_a = busy_slot_calls_a();
  const auto calls_b = busy_slot_calls_b();
  if (!send_call(a.server, calls_a[0])) return 14;  // A's header takes the slot
  if (!send_call(b.server, calls_b[0]) || !send_call(b.server, calls_b[1])) return 15;
  if (!send_call(a.server, calls_a[1])) return 16;  // ends A's response: the slot is free
  if (!serve_request(b, 142)) return 17;
  if (!send_call(b.server, calls_b[2]) || !send_call(b.server, calls_b[3])) return 18;
  if (!read_all(a.client, calls_a) || !read_all(b.client, calls_b)) return 19;
  self.report(a.client_port);
  self.report(ntohs(mine.sin_port));
  self.wait_parent();
  return 0;
}

}  // namespace

TEST_CASE("a response finds every gather slot busy: a record per send, gathered again after") {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  Collector col({.ring_bytes_per_cpu = 1 << 20,
                 .default_policy = kDefault,
                 .variant = Variant::kSockTracepoints,
                 .gather_slots = 1});
  Child target(busy_slot_scenario);
  const auto listen_port = watch_kafka_listener(col, target);
  const auto port_a = static_cast<std::uint16_t>(target.receive());
  const auto port_b = static_cast<std::uint16_t>(target.receive());
  col.drain(5);
  target.nod();
  CHECK(target.wait() == 0);
  col.capture->clear_port_policy(listen_port, false);

  auto sends_of = [&](std::uint16_t client_port) {
    const fc_u64 conn = conn_by_ports(col, target.pid(), listen_port, client_port);
    REQUIRE(conn != 0);
    std::vector<Record> out;
    for (const auto& r : col.records)
      if (r.is_data && r.common.conn_id == conn && r.data.direction == FC_DIR_SEND)
        out.push_back(r);
    return out;
  };
  const auto sent_a = sent_stream(busy_slot_calls_a());
  const auto sent_b = sent_stream(busy_slot_calls_b());
  const auto a = check_stream(sends_of(port_a), sent_a.bytes, sent_a.captured);
  const auto b = check_stream(sends_of(port_b), sent_b.bytes, sent_b.captured);
  REQUIRE(a.size() == 1);  // header and sendfile, gathered in the slot
  CHECK(a[0].data.source == FC_SRC_GATHERED);
  CHECK(a[0].data.length == 20 + 2000);
  REQUIRE(b.size() == 3);  // the slot was busy: its own records; then gathered again
  CHECK(b[0].data.source == FC_SRC_WRITEV);
  CHECK(b[0].data.length == 20);
  CHECK(b[1].data.source == FC_SRC_SENDFILE);
  CHECK(b[1].data.length == 2000);
  CHECK(b[2].data.source == FC_SRC_GATHERED);
  CHECK(b[2].data.length == 20 + 2000);
  CHECK(col.capture->totals().gather_no_slot == 1);
}

TEST_CASE("gather slots must be a power of two from 1 to 65536") {
  for (std::uint32_t slots : {0u, 3u, 131072u}) {
    INFO(slots);
    auto opened = fc::capture::Capture::open({.gather_slots = slots}, [](const auto&) {});
    REQUIRE_FALSE(opened.ok());
    CHECK(opened.error().message.find("power of two") != std::string::npos);
  }
}

TEST_CASE("a large send inside a Kafka response gives only the bulk prefix, sock tracepoints") {
  run_records(Variant::kSockTracepoints);
}
TEST_CASE("a large send inside a Kafka response gives only the bulk prefix, syscall tracepoints") {
  run_records(Variant::kSyscallTracepoints);
}

namespace {

// The broker's connection to an object store (harness.h, kStoreReads): plain TCP.
constexpr unsigned kStoreSeed = 120;

// A loopback pair whose listener's port the parent makes an object-store port.
bool open_store_loopback(Child& self, Loopback& lb) {
  if (!open_pair(lb, AF_INET)) return false;
  self.report(lb.listen_port);
  self.wait_parent();  // the listener's port is an object-store port now
  return true;
}

// The broker's request: `n` bytes written by the client, read whole by the store.
bool store_request(const Loopback& lb, std::size_t n, unsigned seed) {
  const std::string r = pattern(n, seed);
  std::string got(n, '\0');
  return write(lb.client, r.data(), n) == static_cast<ssize_t>(n) && wait_inq(lb.server, n) &&
         read(lb.server, got.data(), n) == static_cast<ssize_t>(n);
}

int store_scenario(Child& self) {
  Loopback lb;
  if (!open_store_loopback(self, lb)) return 10;
  const auto chunks = store_chunks(kStoreSeed);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if ((i == 0 || i == 4) && !store_request(lb, 50, 110 + static_cast<unsigned>(i))) return 11;
    const std::string& chunk = chunks[i];
    std::string got(kStoreReads[i], '\0');
    if (write(lb.server, chunk.data(), chunk.size()) != static_cast<ssize_t>(chunk.size()) ||
        !wait_inq(lb.client, chunk.size()) ||
        read(lb.client, got.data(), got.size()) != static_cast<ssize_t>(got.size()))
      return 12;
  }
  self.report(lb.client_port);
  self.wait_parent();
  return 0;
}

void run_store(Variant variant, std::uint16_t head_bytes,
               const std::vector<std::size_t>& captured) {
  fc::capture::Policy policy{4096, 4096, FC_ROLE_OBJECT_STORE, 16384, 256};
  policy.head_bytes = head_bytes;
  const auto reads = with_port_policy(variant, store_scenario, true, policy, FC_DIR_RECV);
  check_prefixes(reads, store_chunks(kStoreSeed), captured, FC_ROLE_OBJECT_STORE);
}

}  // namespace

TEST_CASE("an object store's response: its header's read up to head_bytes, its body length only") {
  SUBCASE("sock tracepoints") {
    run_store(Variant::kSockTracepoints, 2048, kStoreCaptured);
  }
  SUBCASE("syscall tracepoints") {
    run_store(Variant::kSyscallTracepoints, 2048, kStoreCaptured);
  }
  // head_bytes 0: the first read keeps the call cap.
  SUBCASE("head_bytes 0") {
    run_store(Variant::kSockTracepoints, 0, {3000, 0, 0, 0, 300});
  }
}

namespace {

// Object-body reads that leave bytes queued behind them are folded (every variant): the broker's
// object-store connection reads responses that arrived whole, in pieces (a JVM HTTP client's
// buffer). Each step: the request written first, the bytes the store then writes at once (as in
// `response_bytes`), the reads the client makes; then the client closes with bytes still unread.
struct StoreStep {
  std::size_t request;
  std::vector<std::size_t> reads;
};
const std::vector<StoreStep> kQueuedSteps = {
    // A GET: its header, five body reads with more queued (on the sock variant the first two in
    // step with the socket's counters set the CPU's body hint, which folds the next three), the
    // last read.
    {50, {3000, 5000, 200, 400, 400, 400, 3000}},
    {50, {300, 700}},  // a GET whose last 1,000 bytes are read after ...
    {50, {1000}},      // ... the next request went out (pipelined)
    // A GET whose reader closes with 1,000 bytes still queued, after a read its body hint folded
    // (sock variant): the close reports it.
    {50, {1000, 1000, 500, 500}},
};
constexpr std::size_t kQueuedUnread = 1000;
constexpr unsigned kQueuedSeed = 140;

constexpr std::uint64_t kQueuedByHint = 3 + 1;

int store_queued_scenario(Child& self) {
  // One CPU: a body hint is the CPU's, and the reads it folds are counted exactly.
  if (!pin_to_this_cpu()) return 9;
  Loopback lb;
  if (!open_store_loopback(self, lb)) return 10;
  unsigned seed = kQueuedSeed;
  // What the store writes at each step, whole before the reads, so they find more queued.
  std::vector<std::size_t> response_bytes = {12400, 2000, 0, 3000 + kQueuedUnread};
  for (std::size_t i = 0; i < kQueuedSteps.size(); ++i) {
    const auto& step = kQueuedSteps[i];
    if (!store_request(lb, step.request, seed++)) return 11;
    if (response_bytes[i] != 0) {
      const std::string body = pattern(response_bytes[i], seed++);
      if (write(lb.server, body.data(), body.size()) != static_cast<ssize_t>(body.size()) ||
          !wait_inq(lb.client, body.size()))
        return 12;
    }
    for (std::size_t n : step.reads) {
      std::string got(n, '\0');
      if (read(lb.client, got.data(), n) != static_cast<ssize_t>(n)) return 13;
    }
  }
  close(lb.client);  // 1,000 bytes unread: the last read's fold is reported by the close
  self.report(lb.client_port);
  self.wait_parent();
  return 0;
}

// What the capture hands on, in stream order: (length, captured, folded).
struct Piece {
  std::size_t length, captured;
  bool folded;
};

void run_store_queued(Variant variant) {
  fc::capture::Policy policy{4096, 4096, FC_ROLE_OBJECT_STORE, 16384, 256};
  const auto run = run_target(variant, kDefault, store_queued_scenario, &policy, true);
  auto reads = side_calls(run, false, FC_DIR_RECV);
  CHECK(run.folded_by_hint == (variant == Variant::kSockTracepoints ? kQueuedByHint : 0));
  std::sort(reads.begin(), reads.end(),
            [](const Record& a, const Record& b) { return a.data.stream_pos < b.data.stream_pos; });
  // From the scenario's reads: a response's first read is its header (up to head_bytes, 2048
  // here), the rest body; a body read with bytes queued behind it is folded, joined with the
  // body reads folded right after it, into one piece handed on before the next.
  const std::vector<Piece> expected = {{3000, 2048, false}, {6400, 0, true}, {3000, 0, false},
                                       {300, 300, false},   {700, 0, true},  {1000, 1000, false},
                                       {1000, 1000, false}, {2000, 0, true}};
  REQUIRE(reads.size() == expected.size());
  std::size_t pos = 0;
  for (std::size_t i = 0; i < reads.size(); ++i) {
    INFO("piece " << i);
    CHECK(reads[i].data.stream_pos == pos);
    CHECK(reads[i].data.length == expected[i].length);
    CHECK(reads[i].data.captured == expected[i].captured);
    CHECK(reads[i].folded == expected[i].folded);
    CHECK(reads[i].data.source == FC_SRC_READ);
    CHECK(reads[i].common.role == FC_ROLE_OBJECT_STORE);
    pos += expected[i].length;
  }
}

// A reset by the store while a body hint folds the client's reads: the reset closes the
// connection (its record, its state gone), and what the client reads after it from the queue is a
// new connection's, as it is without hints, never folded into the closed one's state.
constexpr std::size_t kResetRead = 1000, kResetReadsBefore = 4, kResetReadsAfter = 4;

int store_reset_scenario(Child& self) {
  // One CPU: the hint set by the reads before the reset is the next read's.
  if (!pin_to_this_cpu()) return 9;
  Loopback lb;
  if (!open_store_loopback(self, lb)) return 10;
  if (!store_request(lb, 50, kQueuedSeed)) return 11;
  const std::size_t total = kResetRead * (kResetReadsBefore + kResetReadsAfter);
  const std::string body = pattern(total, kQueuedSeed + 1);
  if (write(lb.server, body.data(), total) != static_cast<ssize_t>(total) ||
      !wait_inq(lb.client, total))
    return 12;
  std::string got(kResetRead, '\0');
  for (std::size_t i = 0; i < kResetReadsBefore; ++i)
    if (read(lb.client, got.data(), kResetRead) != static_cast<ssize_t>(kResetRead)) return 13;
  const linger abort{1, 0};  // close with a reset
  if (setsockopt(lb.server, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort)) != 0) return 14;
  close(lb.server);
  lb.server = -1;
  tcp_info info{};
  socklen_t len = sizeof(info);
  for (int i = 0; i < 2000; ++i) {
    if (getsockopt(lb.client, IPPROTO_TCP, TCP_INFO, &info, &len) == 0 &&
        info.tcpi_state == TCP_CLOSE)
      break;
    usleep(1000);
  }
  if (info.tcpi_state != TCP_CLOSE) return 15;
  for (std::size_t i = 0; i < kResetReadsAfter; ++i)
    if (read(lb.client, got.data(), kResetRead) != static_cast<ssize_t>(kResetRead)) return 16;
  self.report(lb.client_port);
  self.wait_parent();
  return 0;
}

void run_store_reset(Variant variant) {
  fc::capture::Policy policy{4096, 4096, FC_ROLE_OBJECT_STORE, 16384, 256};
  const auto run = run_target(variant, kDefault, store_reset_scenario, &policy, true);
  // The client socket's receives before its close record, folded pieces included, and every
  // receive after it: the store's socket is gone by then, and the syscall variant gives the
  // reads after the close a connection of their own (its addresses unknown).
  const auto reads = side_calls(run, false, FC_DIR_RECV);
  REQUIRE(!reads.empty());
  const fc_u64 client = reads.front().common.conn_id;
  std::size_t before = 0, after = 0;
  bool closed = false;
  for (const auto& r : run.records) {
    if (r.common.kind == FC_EVENT_CLOSE && r.common.conn_id == client) closed = true;
    if (r.common.kind == FC_EVENT_DATA && r.data.direction == FC_DIR_RECV &&
        (closed || r.common.conn_id == client))
      (closed ? after : before) += r.data.length;
  }
  CHECK(closed);
  // Sock variant: the fourth read before the reset folded by the hint; none after it (the socket
  // is closed, whatever hint a new connection's state sets).
  CHECK(run.folded_by_hint == (variant == Variant::kSockTracepoints ? 1u : 0u));
  CHECK(before == kResetRead * kResetReadsBefore);
  CHECK(after == kResetRead * kResetReadsAfter);
}

}  // namespace

TEST_CASE("an object body's reads with more queued behind them are folded into the next record") {
  SUBCASE("sock tracepoints") {
    run_store_queued(Variant::kSockTracepoints);
  }
  SUBCASE("syscall tracepoints") {
    run_store_queued(Variant::kSyscallTracepoints);
  }
  SUBCASE("syscall entry-exit pairs") {
    run_store_queued(Variant::kSyscallEntryExit);
  }
}

TEST_CASE("an object body's reads after the store reset the connection are a new connection's") {
  SUBCASE("sock tracepoints") {
    run_store_reset(Variant::kSockTracepoints);
  }
  SUBCASE("syscall tracepoints") {
    run_store_reset(Variant::kSyscallTracepoints);
  }
}
