// Label sanitizing: client ids come straight off the wire, so they may be any bytes.
#include "sensors/sensors.h"

namespace fc::sensors {
namespace {

// Length of the valid UTF-8 sequence starting at s[i] (RFC 3629, no overlongs, no surrogates),
// or 0 when the byte there does not start one.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  const std::size_t left = s.size() - i;
  const auto cont = [&](std::size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return k < left && byte(i + k) >= lo && byte(i + k) <= hi;
  };
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
  if (b0 == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (b0 == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (b0 == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (b0 >= 0xF1 && b0 <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (b0 == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

bool is_clean_ascii(std::string_view raw, std::size_t max_bytes) {
  if (raw.size() > max_bytes) return false;
  for (char c : raw) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7F) return false;
  }
  return true;
}

void sanitize_to(std::string_view raw, std::size_t max_bytes, std::string& out) {
  out.clear();
  std::size_t i = 0;
  while (i < raw.size()) {
    const std::size_t length = utf8_sequence_length(raw, i);
    const auto b0 = static_cast<unsigned char>(raw[i]);
    if (length == 0) {
      if (out.size() + 1 > max_bytes) break;
      out.push_back('?');
      i += 1;
      continue;
    }
    const bool c0_or_del = length == 1 && (b0 < 0x20 || b0 == 0x7F);
    const bool c1 = length == 2 && b0 == 0xC2 && static_cast<unsigned char>(raw[i + 1]) < 0xA0;
    if (c0_or_del || c1) {
      if (out.size() + 1 > max_bytes) break;
      out.push_back('_');
    } else {
      if (out.size() + length > max_bytes) break;
      out.append(raw.substr(i, length));
    }
    i += length;
  }
}

}  // namespace

std::string sanitize_label(std::string_view raw, std::size_t max_bytes) {
  std::string out;
  sanitize_to(raw, max_bytes, out);
  return out;
}

std::string_view sanitize_label_into(std::string_view raw, std::string& scratch,
                                     std::size_t max_bytes) {
  if (is_clean_ascii(raw, max_bytes)) return raw;
  sanitize_to(raw, max_bytes, scratch);
  return scratch;
}

}  // namespace fc::sensors
