// Internal: bounds-checked big-endian reader for Kafka's wire types. A read past the end sets
// ok = false and returns zero, so decoders check once per unit instead of per field.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#include "kafka/kafka.h"

namespace fc::kafka::wire {

struct Reader {
  const std::uint8_t* p;
  const std::uint8_t* end;
  bool ok = true;

  Reader(const std::uint8_t* begin, const std::uint8_t* stop) : p(begin), end(stop) {}

  std::size_t remaining() const { return static_cast<std::size_t>(end - p); }
  bool need(std::size_t n) {
    if (static_cast<std::size_t>(end - p) >= n) return true;
    ok = false;
    p = end;
    return false;
  }
  void skip(std::size_t n) {
    if (need(n)) p += n;
  }
  std::int8_t i8() { return need(1) ? static_cast<std::int8_t>(*p++) : 0; }
  std::int16_t i16() {
    if (!need(2)) return 0;
    std::uint16_t v;
    std::memcpy(&v, p, 2);
    p += 2;
    return static_cast<std::int16_t>(__builtin_bswap16(v));
  }
  std::int32_t i32() {
    if (!need(4)) return 0;
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    p += 4;
    return static_cast<std::int32_t>(__builtin_bswap32(v));
  }
  std::int64_t i64() {
    if (!need(8)) return 0;
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    p += 8;
    return static_cast<std::int64_t>(__builtin_bswap64(v));
  }
  std::uint32_t uvarint() {
    std::uint32_t value = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
      if (!need(1)) return 0;
      std::uint8_t b = *p++;
      value |= static_cast<std::uint32_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return value;
    }
    ok = false;  // longer than 5 bytes: not a varint Kafka writes
    p = end;
    return 0;
  }
  Uuid uuid() {
    Uuid id;
    if (need(16)) {
      std::memcpy(id.bytes.data(), p, 16);
      p += 16;
    }
    return id;
  }
  // STRING / NULLABLE_STRING (int16 length) or COMPACT_(NULLABLE_)STRING (uvarint length + 1).
  // Null reads as empty with *is_null set.
  std::string_view string(bool compact, bool* is_null = nullptr) {
    std::int64_t len;
    if (compact) {
      len = static_cast<std::int64_t>(uvarint()) - 1;
    } else {
      len = i16();
    }
    if (is_null) *is_null = len < 0;
    if (len < 0 || !ok) {
      if (len < -1) fail();
      return {};
    }
    if (!need(static_cast<std::size_t>(len))) return {};
    std::string_view s(reinterpret_cast<const char*>(p), static_cast<std::size_t>(len));
    p += len;
    return s;
  }
  // ARRAY (int32 count) or COMPACT_ARRAY (uvarint count + 1); null reads as 0. A count that the
  // remaining bytes cannot hold (min_element_size each) fails, so hostile counts cost nothing.
  std::uint32_t array(bool compact, std::size_t min_element_size) {
    std::int64_t n = compact ? static_cast<std::int64_t>(uvarint()) - 1 : i32();
    if (!ok) return 0;
    if (n < 0) {
      if (n < -1) fail();
      return 0;
    }
    if (min_element_size && static_cast<std::uint64_t>(n) > remaining() / min_element_size) {
      // Not enough bytes *here*; the caller decides whether that means "wait" or "malformed".
      ok = false;
      p = end;
      return 0;
    }
    return static_cast<std::uint32_t>(n);
  }
  // BYTES / COMPACT_BYTES / RECORDS length; -1 = null.
  std::int64_t bytes_length(bool compact) {
    return compact ? static_cast<std::int64_t>(uvarint()) - 1 : i32();
  }
  void skip_tagged_fields() {
    std::uint32_t n = uvarint();
    for (std::uint32_t i = 0; i < n && ok; ++i) {
      uvarint();  // tag
      skip(uvarint());
    }
  }
  void fail() {
    ok = false;
    p = end;
  }
};

inline std::uint32_t load_be32(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return __builtin_bswap32(v);
}
inline std::uint64_t load_be64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return __builtin_bswap64(v);
}
inline std::uint16_t load_be16(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return __builtin_bswap16(v);
}

}  // namespace fc::kafka::wire
