// endpoints: which of the broker's outgoing connections go to the object store. A connection is
// an object-store connection when its peer port, peer address (CIDR) or TLS server name (SNI,
// read from the ClientHello the broker sends) matches the configuration.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace fc::pipeline {

struct Cidr {
  std::array<std::uint8_t, 16> address{};  // IPv4 as ::ffff:a.b.c.d
  int prefix_bits = 0;                     // of the 128-bit form
};
// "10.0.0.0/8", "2600:1f18::/32", "127.0.0.1" (a single address).
Result<Cidr> parse_cidr(std::string_view text);
// "203.0.113.7" or "2001:db8::1" → the 128-bit form; nullopt when not an address.
std::optional<std::array<std::uint8_t, 16>> parse_ip(std::string_view text);

// The server_name of a TLS ClientHello at the start of `bytes` (a TLS record), if complete.
std::optional<std::string> client_hello_server_name(std::span<const std::uint8_t> bytes);

struct ObjectStoreEndpoints {
  std::vector<std::uint16_t> ports;
  std::vector<Cidr> cidrs;
  // Host names: exact ("minio.internal") or a suffix starting with '.' (".amazonaws.com").
  std::vector<std::string> hosts;

  bool port_matches(std::uint16_t port) const;
  bool address_matches(std::string_view peer_ip) const;
  bool host_matches(std::string_view server_name) const;
  bool empty() const { return ports.empty() && cidrs.empty() && hosts.empty(); }
};

}  // namespace fc::pipeline
