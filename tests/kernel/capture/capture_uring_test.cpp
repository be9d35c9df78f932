// Kernel test: a send submitted through io_uring reaches the socket without the syscall's
// registers. It must be reported with its exact length and stream position and no payload
// (FC_SRC_IO_URING, length only), and must not confuse the positions of later ordinary calls.
// Sock-tracepoint variant only: the syscall fallback cannot see io_uring I/O at all.
#include <arpa/inet.h>
#include <linux/io_uring.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <atomic>

#include "harness.h"
#include "testing.h"

using namespace fc::capture_test;

namespace {

// One IORING_OP_SEND through a minimal ring (no liburing); returns the CQE result.
int uring_send(int fd, const void* buf, unsigned len) {
  io_uring_params p{};
  const int ring = static_cast<int>(syscall(__NR_io_uring_setup, 4, &p));
  if (ring < 0) return -1000;
  const std::size_t sq_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
  const std::size_t cq_size = p.cq_off.cqes + p.cq_entries * sizeof(io_uring_cqe);
  auto* sq = static_cast<char*>(mmap(nullptr, sq_size, PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQ_RING));
  auto* cq = static_cast<char*>(mmap(nullptr, cq_size, PROT_READ | PROT_WRITE,
                                     MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_CQ_RING));
  auto* sqes = static_cast<io_uring_sqe*>(mmap(nullptr, p.sq_entries * sizeof(io_uring_sqe),
                                               PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                                               ring, IORING_OFF_SQES));
  if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) return -1001;
  auto* tail = reinterpret_cast<std::atomic<unsigned>*>(sq + p.sq_off.tail);
  const unsigned mask = *reinterpret_cast<unsigned*>(sq + p.sq_off.ring_mask);
  auto* array = reinterpret_cast<unsigned*>(sq + p.sq_off.array);
  const unsigned t = tail->load();
  io_uring_sqe& sqe = sqes[t & mask];
  sqe = {};
  sqe.opcode = IORING_OP_SEND;
  sqe.fd = fd;
  sqe.addr = reinterpret_cast<unsigned long>(buf);
  sqe.len = len;
  array[t & mask] = t & mask;
  tail->store(t + 1);
  if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, nullptr, 0) < 0)
    return -1002;
  auto* cq_head = reinterpret_cast<std::atomic<unsigned>*>(cq + p.cq_off.head);
  auto* cqes = reinterpret_cast<io_uring_cqe*>(cq + p.cq_off.cqes);
  const unsigned cq_mask = *reinterpret_cast<unsigned*>(cq + p.cq_off.ring_mask);
  const int res = cqes[cq_head->load() & cq_mask].res;
  close(ring);
  return res;
}

int uring_scenario(Child& self) {
  int l = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (bind(l, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(l, 1) != 0) return 10;
  getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
  int c = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(c, reinterpret_cast<sockaddr*>(&a), len) != 0) return 11;
  int s = accept(l, nullptr, nullptr);
  const std::string first = pattern(300, 1), second = pattern(200, 2);
  if (uring_send(c, first.data(), 300) != 300) return 12;
  if (write(c, second.data(), second.size()) != 200) return 13;
  std::string got(500, '\0');
  std::size_t n = 0;
  while (n < got.size()) {
    ssize_t r = read(s, got.data() + n, got.size() - n);
    if (r <= 0) return 14;
    n += static_cast<std::size_t>(r);
  }
  if (got != first + second) return 15;
  self.report(1);
  self.wait_parent();
  return 0;
}

}  // namespace

TEST_CASE("io_uring sends are reported length-only with exact positions") {
  fc::testing::require_root("loading BPF programs");
  REQUIRE(fc::capture::check_environment().ok());
  Collector col({.ring_bytes_per_cpu = 1 << 20,
                 .default_policy = {4096, 4096, FC_ROLE_OTHER},
                 .variant = fc::capture::Variant::kSockTracepoints});
  Child target(uring_scenario);
  REQUIRE(col.capture->add_target(target.pid()).ok());
  target.go();
  CHECK(target.receive() == 1);
  col.drain(5);
  target.nod();
  CHECK(target.wait() == 0);

  std::vector<Record> sends;
  for (const auto& r : col.of(target.pid(), FC_EVENT_DATA))
    if (r.data.direction == FC_DIR_SEND) sends.push_back(r);
  REQUIRE(sends.size() == 2);
  const Record& uring = sends[0].data.stream_pos == 0 ? sends[0] : sends[1];
  const Record& plain = sends[0].data.stream_pos == 0 ? sends[1] : sends[0];
  CHECK(uring.data.source == FC_SRC_IO_URING);
  CHECK(uring.data.length == 300);
  CHECK(uring.data.captured == 0);
  CHECK(uring.data.nsegs == 0);
  CHECK(uring.common.fd == -1);
  CHECK(plain.data.source == FC_SRC_WRITE);
  CHECK(plain.data.stream_pos == 300);
  CHECK(plain.data.length == 200);
  CHECK((plain.payload == pattern(200, 2)));
  CHECK(plain.common.conn_id == uring.common.conn_id);
  CHECK(plain.common.fd >= 0);  // learned from the first call that has registers
  CHECK(plain.common.generation == 1);
}
