// TCP reassembly in `fetchcost decode`: the committed capture of real client traffic, rewritten
// with retransmitted, reordered and split segments (libpcap's own writer), must decode to exactly
// the same exchanges as the original.
#include <doctest/doctest.h>
#include <pcap/pcap.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kafka/kafka.h"
#include "pcap_source.h"

namespace {

struct Packet {
  pcap_pkthdr header;
  std::vector<std::uint8_t> data;
};

std::vector<Packet> read_all(const std::string& path, int* linktype) {
  char err[PCAP_ERRBUF_SIZE];
  pcap_t* p = pcap_open_offline(path.c_str(), err);
  REQUIRE_MESSAGE(p, err);
  *linktype = pcap_datalink(p);
  std::vector<Packet> out;
  pcap_pkthdr* h;
  const u_char* d;
  while (pcap_next_ex(p, &h, &d) == 1) out.push_back({*h, {d, d + h->caplen}});
  pcap_close(p);
  return out;
}

void write_all(const std::string& path, int linktype, const std::vector<Packet>& packets) {
  pcap_t* dead = pcap_open_dead(linktype, 262144);
  pcap_dumper_t* dump = pcap_dump_open(dead, path.c_str());
  REQUIRE(dump);
  for (const auto& pkt : packets) {
    pcap_dump(reinterpret_cast<u_char*>(dump), &pkt.header, pkt.data.data());
  }
  pcap_dump_close(dump);
  pcap_close(dead);
}

// Ethernet + IPv4 + TCP offsets of the payload, or 0 when not a TCP segment with payload.
std::size_t payload_offset(const Packet& p) {
  if (p.data.size() < 54 || p.data[12] != 0x08 || p.data[13] != 0x00 || p.data[23] != 6) return 0;
  std::size_t ihl = (p.data[14] & 0x0f) * 4u;
  std::size_t doff = (p.data[14 + ihl + 12] >> 4) * 4u;
  std::size_t off = 14 + ihl + doff;
  return off < p.data.size() ? off : 0;
}

// Splits a segment's payload in two segments (adjusting IP length and TCP sequence number).
std::pair<Packet, Packet> split(const Packet& p, std::size_t at) {
  std::size_t off = payload_offset(p);
  std::size_t ihl = (p.data[14] & 0x0f) * 4u;
  Packet a = p, b = p;
  a.data.resize(off + at);
  b.data.erase(b.data.begin() + static_cast<std::ptrdiff_t>(off),
               b.data.begin() + static_cast<std::ptrdiff_t>(off + at));
  auto set_ip_len = [&](Packet& q) {
    std::uint16_t len = static_cast<std::uint16_t>(q.data.size() - 14);
    q.data[16] = static_cast<std::uint8_t>(len >> 8);
    q.data[17] = static_cast<std::uint8_t>(len);
    q.header.caplen = q.header.len = static_cast<bpf_u_int32>(q.data.size());
  };
  set_ip_len(a);
  set_ip_len(b);
  std::uint8_t* seq = b.data.data() + 14 + ihl + 4;
  std::uint32_t s = static_cast<std::uint32_t>(seq[0]) << 24 | seq[1] << 16 | seq[2] << 8 | seq[3];
  s += static_cast<std::uint32_t>(at);
  seq[0] = static_cast<std::uint8_t>(s >> 24), seq[1] = static_cast<std::uint8_t>(s >> 16);
  seq[2] = static_cast<std::uint8_t>(s >> 8), seq[3] = static_cast<std::uint8_t>(s);
  return {a, b};
}

struct Summary : fc::kafka::Sink {
  std::vector<std::string> lines;
  void on_exchange(const fc::kafka::Exchange& ex) override {
    std::string s = ex.client_id + " " + std::to_string(ex.api_key) + "v" +
                    std::to_string(ex.api_version) + " #" + std::to_string(ex.correlation_id) +
                    (ex.response_seen ? " answered" : " unanswered") + " err" +
                    std::to_string(ex.response_error_code) + " " + ex.group_id;
    for (const auto& p : ex.fetch.partitions) {
      s += " " + ex.fetch.topics[p.topic_index].name + "/" + std::to_string(p.partition) + "@" +
           std::to_string(p.fetch_offset) + ":" + std::to_string(p.records_size);
    }
    lines.push_back(s);
  }
};

std::vector<std::string> decode(const std::string& path, std::uint16_t port) {
  Summary sink;
  fc::kafka::Decoder decoder(sink);
  fc::tools::PcapSource source({path, port});
  auto stats = source.run(decoder);
  REQUIRE_MESSAGE(stats.ok(), (stats.ok() ? "" : stats.error().message));
  CHECK(decoder.counters().resyncs == 0);
  CHECK(decoder.counters().parse_errors == 0);
  std::sort(sink.lines.begin(), sink.lines.end());
  return sink.lines;
}

}  // namespace

TEST_CASE("retransmitted, reordered and split segments decode like the clean capture") {
  const std::string original = PCAP_FILE;
  auto expected = decode(original, BROKER_PORT);
  REQUIRE(expected.size() >= 20);
  CHECK(decode(original, 0) == expected);  // any port: the broker side taken from SYNs

  int linktype = 0;
  auto packets = read_all(original, &linktype);
  std::mt19937 rng(7);
  for (int round = 0; round < 5; ++round) {
    std::vector<Packet> mangled;
    for (const auto& p : packets) {
      std::size_t off = payload_offset(p);
      std::size_t payload = off ? p.data.size() - off : 0;
      if (payload >= 2 && rng() % 3 == 0) {
        auto [a, b] = split(p, 1 + rng() % (payload - 1));
        if (rng() % 2) {
          mangled.push_back(b);  // out of order
          mangled.push_back(a);
        } else {
          mangled.push_back(a);
          mangled.push_back(b);
        }
        if (rng() % 2) mangled.push_back(p);  // and the whole segment again, overlapping both
      } else {
        mangled.push_back(p);
        if (payload && rng() % 4 == 0) mangled.push_back(p);  // plain retransmission
      }
    }
    std::string path = "pcap_reassembly_" + std::to_string(round) + ".pcap";
    write_all(path, linktype, mangled);
    INFO("round " << round);
    CHECK(decode(path, BROKER_PORT) == expected);
    std::remove(path.c_str());
  }
}

TEST_CASE("a capture that starts mid-connection decodes from the next whole request") {
  const std::string original = PCAP_FILE;
  auto expected = decode(original, BROKER_PORT);
  int linktype = 0;
  auto packets = read_all(original, &linktype);
  for (std::size_t drop : {3ul, 13ul, 17ul, 29ul}) {
    INFO("first " << drop << " packets dropped");
    std::vector<Packet> tail(packets.begin() + static_cast<std::ptrdiff_t>(drop), packets.end());
    std::string path = "pcap_midstream_" + std::to_string(drop) + ".pcap";
    write_all(path, linktype, tail);
    Summary sink;
    fc::kafka::Decoder decoder(sink);
    fc::tools::PcapSource source({path, BROKER_PORT});
    REQUIRE(source.run(decoder).ok());
    std::remove(path.c_str());
    // Everything decoded is real (in the full decode), and at most the exchanges cut by the
    // start of the capture are missing.
    std::size_t found = 0;
    for (const auto& line : sink.lines) {
      found += std::count(expected.begin(), expected.end(), line) > 0;
    }
    CHECK(found == sink.lines.size());
    // Each request lost to the cut had at least one data packet towards the broker in the
    // dropped prefix; plus the one cut in half.
    std::size_t dropped_requests = 0;
    for (std::size_t i = 0; i < drop; ++i) {
      const Packet& p = packets[i];
      if (!payload_offset(p)) continue;
      std::size_t ihl = (p.data[14] & 0x0f) * 4u;
      if ((p.data[14 + ihl + 2] << 8 | p.data[14 + ihl + 3]) == BROKER_PORT) ++dropped_requests;
    }
    CHECK(sink.lines.size() + dropped_requests + 1 >= expected.size());
    CHECK(decoder.counters().parse_errors == 0);
  }
}
