#include "pcap_source.h"

#include <arpa/inet.h>
#include <pcap/pcap.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <tuple>
#include <vector>

namespace fc::tools {

namespace {

struct Endpoint {
  std::array<std::uint8_t, 16> addr{};
  bool v6 = false;
  std::uint16_t port = 0;
  auto tie() const { return std::tie(addr, v6, port); }
  bool operator<(const Endpoint& o) const { return tie() < o.tie(); }
  bool operator==(const Endpoint& o) const { return tie() == o.tie(); }
  std::string str() const {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(v6 ? AF_INET6 : AF_INET, addr.data(), buf, sizeof buf);
    return v6 ? "[" + std::string(buf) + "]:" + std::to_string(port)
              : std::string(buf) + ":" + std::to_string(port);
  }
};

// One direction's mapping from 32-bit sequence numbers to 64-bit stream positions.
struct SeqMap {
  bool based = false;
  std::uint32_t last_seq = 0;
  std::uint64_t last_pos = 0;
  void base(std::uint32_t first_byte_seq) {
    based = true;
    last_seq = first_byte_seq;
    last_pos = 0;
  }
  // Position of `seq`, or false for bytes before the stream's start.
  bool position(std::uint32_t seq, std::uint64_t* pos) {
    auto delta = static_cast<std::int32_t>(seq - last_seq);  // handles wrap-around
    if (delta < 0 && static_cast<std::uint64_t>(-static_cast<std::int64_t>(delta)) > last_pos) {
      return false;
    }
    *pos = last_pos + delta;
    if (delta > 0) {
      last_seq = seq;
      last_pos = *pos;
    }
    return true;
  }
};

struct Flow {
  std::uint64_t connection = 0;
  SeqMap requests, responses;
  bool fin_from_client = false, fin_from_broker = false;  // a retransmitted FIN counts once
  bool closed = false;
};

struct Packet {
  Endpoint src, dst;
  std::uint32_t seq = 0;
  std::uint8_t flags = 0;
  const std::uint8_t* payload = nullptr;
  std::size_t captured = 0;  // payload bytes in the capture
  std::size_t length = 0;    // payload bytes on the wire
};

constexpr std::uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kAck = 0x10;

// Parses link, IP and TCP headers; false for anything else.
bool parse(int linktype, const pcap_pkthdr& h, const std::uint8_t* data, Packet* out) {
  const std::uint8_t* p = data;
  const std::uint8_t* end = data + h.caplen;
  std::uint16_t ethertype = 0;
  auto need = [&](std::size_t n) { return static_cast<std::size_t>(end - p) >= n; };
  switch (linktype) {
    case DLT_EN10MB:
      if (!need(14)) return false;
      ethertype = static_cast<std::uint16_t>(p[12] << 8 | p[13]);
      p += 14;
      while (ethertype == 0x8100 && need(4)) {  // VLAN tags
        ethertype = static_cast<std::uint16_t>(p[2] << 8 | p[3]);
        p += 4;
      }
      break;
    case DLT_LINUX_SLL:
      if (!need(16)) return false;
      ethertype = static_cast<std::uint16_t>(p[14] << 8 | p[15]);
      p += 16;
      break;
    case DLT_LINUX_SLL2:
      if (!need(20)) return false;
      ethertype = static_cast<std::uint16_t>(p[0] << 8 | p[1]);
      p += 20;
      break;
    case DLT_NULL:
    case DLT_LOOP: {
      if (!need(4)) return false;
      std::uint32_t family;
      std::memcpy(&family, p, 4);
      if (linktype == DLT_LOOP) family = ntohl(family);
      ethertype = family == 2 ? 0x0800 : 0x86dd;
      p += 4;
      break;
    }
    case DLT_RAW:
      if (!need(1)) return false;
      ethertype = (p[0] >> 4) == 6 ? 0x86dd : 0x0800;
      break;
    default:
      return false;
  }
  std::size_t ip_payload_len = 0;
  if (ethertype == 0x0800) {
    if (!need(20) || (p[0] >> 4) != 4 || p[9] != 6) return false;
    std::size_t ihl = (p[0] & 0x0f) * 4u;
    std::size_t total = static_cast<std::size_t>(p[2] << 8 | p[3]);
    if (ihl < 20 || total < ihl || !need(ihl)) return false;
    if ((p[6] & 0x3f) || p[7]) return false;  // fragments are not reassembled
    std::memcpy(out->src.addr.data(), p + 12, 4);
    std::memcpy(out->dst.addr.data(), p + 16, 4);
    ip_payload_len = total - ihl;
    p += ihl;
  } else if (ethertype == 0x86dd) {
    if (!need(40) || p[6] != 6) return false;  // no extension headers
    out->src.v6 = out->dst.v6 = true;
    std::memcpy(out->src.addr.data(), p + 8, 16);
    std::memcpy(out->dst.addr.data(), p + 24, 16);
    ip_payload_len = static_cast<std::size_t>(p[4] << 8 | p[5]);
    p += 40;
  } else {
    return false;
  }
  if (!need(20)) return false;
  out->src.port = static_cast<std::uint16_t>(p[0] << 8 | p[1]);
  out->dst.port = static_cast<std::uint16_t>(p[2] << 8 | p[3]);
  out->seq = static_cast<std::uint32_t>(p[4]) << 24 | p[5] << 16 | p[6] << 8 | p[7];
  std::size_t doff = (p[12] >> 4) * 4u;
  out->flags = p[13];
  if (doff < 20 || doff > ip_payload_len) return false;
  out->length = ip_payload_len - doff;
  const std::uint8_t* payload = p + doff;
  out->payload = payload;
  out->captured = payload <= end ? std::min<std::size_t>(end - payload, out->length) : 0;
  return true;
}

}  // namespace

struct PcapSource::Impl {
  PcapOptions options;
  std::map<std::pair<Endpoint, Endpoint>, Flow> flows;  // (client, broker)
  std::vector<std::string> names{""};                   // by connection id
  std::uint64_t next_connection = 1;
};

PcapSource::PcapSource(PcapOptions options) : impl_(new Impl{std::move(options)}) {}
PcapSource::~PcapSource() {
  delete impl_;
}

std::string PcapSource::describe(std::uint64_t connection) const {
  return connection < impl_->names.size() ? impl_->names[connection] : "";
}

namespace {

// The Kafka decoder as a flow sink: clients send requests, the broker answers.
class DecoderSink : public FlowSink {
 public:
  explicit DecoderSink(kafka::Decoder& decoder) : decoder_(decoder) {}
  void open(std::uint64_t connection, std::uint64_t ns, const FlowEnds&, bool from_start) override {
    if (from_start) decoder_.open(connection, ns);
  }
  void data(std::uint64_t connection, bool from_client, std::uint64_t ns, std::uint64_t pos,
            std::uint64_t length, std::span<const std::uint8_t> captured) override {
    decoder_.data(connection,
                  from_client ? kafka::Direction::kRequest : kafka::Direction::kResponse, ns, pos,
                  length, captured);
  }
  void close(std::uint64_t connection, std::uint64_t ns) override {
    decoder_.close(connection, ns);
  }
  void end(std::uint64_t ns) override { decoder_.close_all(ns); }

 private:
  kafka::Decoder& decoder_;
};

std::string ip_text(const Endpoint& e) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(e.v6 ? AF_INET6 : AF_INET, e.addr.data(), buf, sizeof buf);
  return buf;
}

}  // namespace

Result<PcapStats> PcapSource::run(kafka::Decoder& decoder) {
  DecoderSink sink(decoder);
  return run(sink);
}

Result<PcapStats> PcapSource::run(FlowSink& decoder) {
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  pcap_t* pcap = pcap_open_offline_with_tstamp_precision(impl_->options.path.c_str(),
                                                         PCAP_TSTAMP_PRECISION_NANO, errbuf);
  if (!pcap) {
    return make_error("cannot read pcap file " + impl_->options.path + ": " + errbuf +
                      " (is it a pcap or pcapng capture?)");
  }
  const int linktype = pcap_datalink(pcap);
  PcapStats stats;
  std::uint64_t last_ns = 0;
  pcap_pkthdr* header;
  const std::uint8_t* data;
  int rc;
  while ((rc = pcap_next_ex(pcap, &header, &data)) == 1) {
    ++stats.packets;
    const std::uint64_t ns = static_cast<std::uint64_t>(header->ts.tv_sec) * 1'000'000'000ull +
                             static_cast<std::uint64_t>(header->ts.tv_usec);  // nano precision
    last_ns = ns;
    Packet pkt;
    if (!parse(linktype, *header, data, &pkt)) {
      ++stats.skipped_packets;
      continue;
    }
    const std::uint16_t port = impl_->options.broker_port;
    const auto is_server_port = [&](std::uint16_t p) {
      const auto& known = impl_->options.server_ports;
      return std::find(known.begin(), known.end(), p) != known.end();
    };
    bool to_broker;
    if (port) {
      if (pkt.dst.port == port) {
        to_broker = true;
      } else if (pkt.src.port == port) {
        to_broker = false;
      } else {
        ++stats.skipped_packets;
        continue;
      }
    } else {
      // Any port: an existing flow decides; a SYN names its broker; else the lower port.
      auto it = impl_->flows.find({pkt.src, pkt.dst});
      if (it != impl_->flows.end()) {
        to_broker = true;
      } else if (impl_->flows.count({pkt.dst, pkt.src})) {
        to_broker = false;
      } else if ((pkt.flags & kSyn)) {
        to_broker = !(pkt.flags & kAck);
      } else if (is_server_port(pkt.dst.port) != is_server_port(pkt.src.port)) {
        to_broker = is_server_port(pkt.dst.port);
      } else {
        to_broker = pkt.dst.port < pkt.src.port;
      }
    }
    ++stats.tcp_segments;
    const Endpoint& client = to_broker ? pkt.src : pkt.dst;
    const Endpoint& broker = to_broker ? pkt.dst : pkt.src;
    auto key = std::make_pair(client, broker);
    auto it = impl_->flows.find(key);
    const bool syn = pkt.flags & kSyn;
    if (it == impl_->flows.end() ||
        (syn && to_broker && !(pkt.flags & kAck) && it->second.closed)) {
      // A new connection (first sight, or a new SYN on a reused 4-tuple).
      if (it != impl_->flows.end()) {
        if (!it->second.closed) decoder.close(it->second.connection, ns);
        impl_->flows.erase(it);
      }
      Flow flow;
      flow.connection = impl_->next_connection++;
      impl_->names.push_back(client.str() + "->" + broker.str());
      it = impl_->flows.emplace(key, flow).first;
      decoder.open(flow.connection, ns,
                   FlowEnds{ip_text(client), client.port, ip_text(broker), broker.port}, syn);
    }
    Flow& flow = it->second;
    SeqMap& seq = to_broker ? flow.requests : flow.responses;
    if (syn) {
      seq.base(pkt.seq + 1);
      continue;
    }
    if (flow.closed) continue;
    if (pkt.length) {
      if (!seq.based) seq.base(pkt.seq);
      std::uint64_t pos;
      if (seq.position(pkt.seq, &pos)) {
        if (pkt.captured < pkt.length) ++stats.truncated_segments;
        stats.payload_bytes += pkt.length;
        decoder.data(flow.connection, to_broker, ns, pos, pkt.length, {pkt.payload, pkt.captured});
      }
    }
    if (pkt.flags & kRst) {
      flow.closed = true;
      decoder.close(flow.connection, ns);
    } else if (pkt.flags & kFin) {
      (to_broker ? flow.fin_from_client : flow.fin_from_broker) = true;
      if (flow.fin_from_client && flow.fin_from_broker) {
        flow.closed = true;
        decoder.close(flow.connection, ns);
      }
    }
  }
  std::string error = rc == -1 ? pcap_geterr(pcap) : "";
  pcap_close(pcap);
  decoder.end(last_ns);
  if (!error.empty()) return make_error("error reading " + impl_->options.path + ": " + error);
  return stats;
}

}  // namespace fc::tools
