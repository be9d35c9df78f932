#include "pipeline/capture_feed.h"

#include <arpa/inet.h>
#include <sys/socket.h>

#include <cstring>

namespace fc::pipeline {
namespace {

std::string address_text(std::uint16_t family, const std::uint8_t* addr) {
  char text[INET6_ADDRSTRLEN] = {};
  // An IPv4 client of a dual-stack listener shows as ::ffff:a.b.c.d: its address is a.b.c.d (the
  // pod IP that kube_pod_info knows).
  static constexpr std::uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (family == AF_INET6 && std::memcmp(addr, kMapped, sizeof(kMapped)) == 0)
    inet_ntop(AF_INET, addr + 12, text, sizeof(text));
  else if (family == AF_INET6)
    inet_ntop(AF_INET6, addr, text, sizeof(text));
  else
    inet_ntop(AF_INET, addr, text, sizeof(text));
  return text;
}

}  // namespace

void CaptureFeed::on_event(const capture::EventView& event) {
  const fc_event_common& c = event.common;
  if (event.conn) {
    const fc_conn_event& e = *event.conn;
    if (c.kind == FC_EVENT_CLOSE) {
      pipeline_.close(c.conn_id, c.timestamp_ns);
      pipeline_.close(c.conn_id | kTlsStreamBit, c.timestamp_ns);
      endpoints_.erase(c.conn_id);
      return;
    }
    if (c.conn_id == 0) return;  // found in /proc before any traffic: its first data names it
    Endpoint ep{e.local_port, e.peer_port, address_text(e.family, e.peer_addr)};
    // A connection seen from accept/connect starts in frame; one first seen through data (or
    // found running) starts anywhere and the decoders resynchronise.
    if (e.origin == FC_ORIGIN_ACCEPT || e.origin == FC_ORIGIN_CONNECT)
      pipeline_.open(c.conn_id, c.timestamp_ns, ep.local_port, ep.peer_port, ep.peer_ip);
    else
      pipeline_.describe(c.conn_id, ep.local_port, ep.peer_port, ep.peer_ip);
    endpoints_[c.conn_id] = std::move(ep);
    return;
  }
  if (!event.data) return;
  const fc_data_event& d = *event.data;
  if (c.flags & FC_FLAG_TLS_CIPHERTEXT) return;  // its plaintext comes as TLS_DATA
  std::uint64_t id = c.conn_id;
  if (c.kind == FC_EVENT_TLS_DATA) {
    if (c.conn_id == 0) return;  // not tied to a socket yet: nothing to attribute it to
    id = c.conn_id | kTlsStreamBit;
    if (auto ep = endpoints_.find(c.conn_id); ep != endpoints_.end() && !tls_described_.count(id)) {
      pipeline_.describe(id, ep->second.local_port, ep->second.peer_port, ep->second.peer_ip);
      tls_described_.insert(id);
    }
  }
  segments_.clear();
  std::size_t offset = 0;
  for (const fc_segment& s : event.segments) {
    if (offset + s.length > event.payload.size()) break;
    segments_.push_back({d.stream_pos + s.offset, event.payload.subspan(offset, s.length)});
    offset += s.length;
  }
  Piece p;
  p.connection = id;
  p.process = c.tgid;
  p.to_target = d.direction == FC_DIR_RECV;
  p.time_ns = c.timestamp_ns;
  p.thread_id = c.tid;
  p.thread_name = std::string_view(c.comm, strnlen(c.comm, FC_COMM_LEN));
  p.position = d.stream_pos;
  p.length = d.length;
  p.captured = segments_;
  p.whole_messages = event.skipped;
  pipeline_.piece(p);
}

}  // namespace fc::pipeline
