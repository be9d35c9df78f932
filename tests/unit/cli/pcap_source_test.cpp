// PcapSource orientation: which end of a TCP flow is the server decides which bytes are requests.
// Packets are written with libpcap itself (DLT_RAW IPv4), so the reader is checked against the
// library's own file format.
#include <doctest/doctest.h>
#include <pcap/pcap.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "pcap_source.h"

namespace {

struct TcpPacket {
  std::uint16_t src_port = 0, dst_port = 0;
  std::uint32_t seq = 0;
  std::uint8_t flags = 0x18;  // PSH|ACK
  std::string payload;
};

std::vector<std::uint8_t> raw_ipv4(const TcpPacket& t) {
  std::vector<std::uint8_t> b(40 + t.payload.size(), 0);
  const std::size_t total = b.size();
  b[0] = 0x45;  // IPv4, 20-byte header
  b[2] = static_cast<std::uint8_t>(total >> 8);
  b[3] = static_cast<std::uint8_t>(total);
  b[8] = 64;
  b[9] = 6;                // TCP
  b[12] = 127, b[15] = 1;  // 127.0.0.1 → 127.0.0.1
  b[16] = 127, b[19] = 1;
  std::uint8_t* tcp = b.data() + 20;
  tcp[0] = static_cast<std::uint8_t>(t.src_port >> 8),
  tcp[1] = static_cast<std::uint8_t>(t.src_port);
  tcp[2] = static_cast<std::uint8_t>(t.dst_port >> 8),
  tcp[3] = static_cast<std::uint8_t>(t.dst_port);
  for (int i = 0; i < 4; ++i) tcp[4 + i] = static_cast<std::uint8_t>(t.seq >> (24 - 8 * i));
  tcp[12] = 5 << 4;  // 20-byte header
  tcp[13] = t.flags;
  std::copy(t.payload.begin(), t.payload.end(), b.begin() + 40);
  return b;
}

std::string write_pcap(const std::vector<TcpPacket>& packets) {
  char path[] = "/tmp/fc-pcap-test-XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  pcap_t* dead = pcap_open_dead(DLT_RAW, 65535);
  pcap_dumper_t* dumper = pcap_dump_open(dead, path);
  REQUIRE(dumper != nullptr);
  long usec = 0;
  for (const auto& p : packets) {
    const auto bytes = raw_ipv4(p);
    pcap_pkthdr h{};
    h.ts.tv_sec = 1'700'000'000;
    h.ts.tv_usec = usec += 100;
    h.caplen = h.len = static_cast<bpf_u_int32>(bytes.size());
    pcap_dump(reinterpret_cast<u_char*>(dumper), &h, bytes.data());
  }
  pcap_dump_close(dumper);
  pcap_close(dead);
  return path;
}

struct Recorder : fc::tools::FlowSink {
  fc::tools::FlowEnds ends;
  bool from_start = true;
  std::string client_bytes, server_bytes;
  void open(std::uint64_t, std::uint64_t, const fc::tools::FlowEnds& e, bool start) override {
    ends = e;
    from_start = start;
  }
  void data(std::uint64_t, bool from_client, std::uint64_t, std::uint64_t, std::uint64_t,
            std::span<const std::uint8_t> captured) override {
    (from_client ? client_bytes : server_bytes).append(captured.begin(), captured.end());
  }
  void close(std::uint64_t, std::uint64_t) override {}
  void end(std::uint64_t) override {}
};

// A pooled connection the broker opened before the capture began: no SYN, and the broker's
// ephemeral port (40000) is lower than the object store's (44521).
const std::vector<TcpPacket> kMidStream = {
    {40000, 44521, 1000, 0x18, "GET /bucket/key HTTP/1.1\r\n\r\n"},
    {44521, 40000, 9000, 0x18, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"},
};

}  // namespace

TEST_CASE("a flow joined mid-stream takes its server side from the known server ports") {
  const std::string path = write_pcap(kMidStream);
  Recorder sink;
  fc::tools::PcapSource source({.path = path, .broker_port = 0, .server_ports = {44521}});
  auto stats = source.run(sink);
  std::remove(path.c_str());
  REQUIRE(stats);
  CHECK(stats->packets == 2);
  CHECK_FALSE(sink.from_start);
  CHECK(sink.ends.server_port == 44521);
  CHECK(sink.ends.client_port == 40000);
  CHECK(sink.client_bytes.rfind("GET ", 0) == 0);
  CHECK(sink.server_bytes.rfind("HTTP/1.1 200", 0) == 0);
}

TEST_CASE("without known server ports a flow joined mid-stream falls back to the lower port") {
  const std::string path = write_pcap(kMidStream);
  Recorder sink;
  fc::tools::PcapSource source({.path = path, .broker_port = 0});
  auto stats = source.run(sink);
  std::remove(path.c_str());
  REQUIRE(stats);
  CHECK(sink.ends.server_port == 40000);
}
