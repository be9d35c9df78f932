#include "pipeline/endpoints.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>

namespace fc::pipeline {

std::optional<std::array<std::uint8_t, 16>> parse_ip(std::string_view text) {
  std::string s(text);
  std::array<std::uint8_t, 16> out{};
  in_addr v4{};
  if (inet_pton(AF_INET, s.c_str(), &v4) == 1) {
    out[10] = out[11] = 0xff;
    std::memcpy(out.data() + 12, &v4, 4);
    return out;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, s.c_str(), &v6) == 1) {
    std::memcpy(out.data(), &v6, 16);
    return out;
  }
  return std::nullopt;
}

Result<Cidr> parse_cidr(std::string_view text) {
  const auto slash = text.find('/');
  const std::string_view addr = text.substr(0, slash);
  auto ip = parse_ip(addr);
  if (!ip) return make_error("\"" + std::string(text) + "\" is not an IP address or CIDR block");
  const bool v4 = addr.find(':') == std::string_view::npos;
  int bits = v4 ? 32 : 128;
  if (slash != std::string_view::npos) {
    const std::string_view p = text.substr(slash + 1);
    auto [end, ec] = std::from_chars(p.data(), p.data() + p.size(), bits);
    if (ec != std::errc() || end != p.data() + p.size() || bits < 0 || bits > (v4 ? 32 : 128))
      return make_error("\"" + std::string(text) + "\" has an invalid prefix length");
  }
  return Cidr{*ip, v4 ? bits + 96 : bits};
}

std::optional<std::string> client_hello_server_name(std::span<const std::uint8_t> b) {
  // TLS record: type 22 (handshake), version, length; handshake: type 1 (ClientHello), length.
  if (b.size() < 9 || b[0] != 22 || b[5] != 1) return std::nullopt;
  std::size_t i = 9 + 2 + 32;  // record (5) + handshake header (4) + client version + random
  auto need = [&](std::size_t n) { return i + n <= b.size(); };
  auto u16 = [&](std::size_t at) { return static_cast<std::size_t>(b[at] << 8 | b[at + 1]); };
  if (!need(1)) return std::nullopt;
  i += 1 + b[i];  // session id
  if (!need(2)) return std::nullopt;
  i += 2 + u16(i);  // cipher suites
  if (!need(1)) return std::nullopt;
  i += 1 + b[i];  // compression methods
  if (!need(2)) return std::nullopt;
  const std::size_t extensions_end = std::min(b.size(), i + 2 + u16(i));
  i += 2;
  while (i + 4 <= extensions_end) {
    const std::size_t type = u16(i), len = u16(i + 2);
    i += 4;
    if (i + len > extensions_end) return std::nullopt;
    if (type == 0 && len >= 5) {  // server_name: list length, name type 0, name length, name
      const std::size_t name_len = u16(i + 3);
      if (b[i + 2] != 0 || 5 + name_len > len) return std::nullopt;
      std::string name(reinterpret_cast<const char*>(b.data() + i + 5), name_len);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      return name;
    }
    i += len;
  }
  return std::nullopt;
}

bool ObjectStoreEndpoints::port_matches(std::uint16_t port) const {
  return port != 0 && std::find(ports.begin(), ports.end(), port) != ports.end();
}

bool ObjectStoreEndpoints::address_matches(std::string_view peer_ip) const {
  if (cidrs.empty()) return false;
  auto ip = parse_ip(peer_ip);
  if (!ip) return false;
  for (const Cidr& c : cidrs) {
    int bits = c.prefix_bits;
    std::size_t byte = 0;
    bool same = true;
    for (; bits >= 8 && same; bits -= 8, ++byte) same = (*ip)[byte] == c.address[byte];
    if (same && bits > 0) {
      const std::uint8_t mask = static_cast<std::uint8_t>(0xff << (8 - bits));
      same = ((*ip)[byte] & mask) == (c.address[byte] & mask);
    }
    if (same) return true;
  }
  return false;
}

bool ObjectStoreEndpoints::host_matches(std::string_view name) const {
  for (const std::string& h : hosts) {
    if (h.empty()) continue;
    if (h.front() == '.') {
      if (name.size() > h.size() && name.substr(name.size() - h.size()) == h) return true;
      if (name == std::string_view(h).substr(1)) return true;
    } else if (name == h) {
      return true;
    }
  }
  return false;
}

}  // namespace fc::pipeline
