// Minimal Kafka wire-format primitives for the simulator. Deliberately independent of
// userspace/kafka (fetchcost's decoder): the simulator is the ground truth it is tested against.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tb {

using Uuid = std::array<uint8_t, 16>;

struct WireError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Reads a request body. `flexible` switches strings/arrays/bytes to their compact forms.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size, bool flexible = false)
      : p_(data), end_(data + size), flexible_(flexible) {}
  void set_flexible(bool f) { flexible_ = f; }
  bool flexible() const { return flexible_; }
  size_t remaining() const { return end_ - p_; }

  int8_t i8() { return static_cast<int8_t>(take(1)[0]); }
  int16_t i16() { return static_cast<int16_t>(be(2)); }
  int32_t i32() { return static_cast<int32_t>(be(4)); }
  int64_t i64() { return static_cast<int64_t>(be(8)); }
  bool boolean() { return i8() != 0; }
  Uuid uuid() {
    Uuid u;
    std::memcpy(u.data(), take(16), 16);
    return u;
  }
  uint64_t uvarint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b = take(1)[0];
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw WireError("varint too long");
  }
  // Nullable string: nullopt for null.
  std::optional<std::string> nstring() {
    int64_t len = flexible_ ? int64_t(uvarint()) - 1 : i16();
    if (len < 0) return std::nullopt;
    const uint8_t* s = take(len);
    return std::string(reinterpret_cast<const char*>(s), len);
  }
  std::string string() { return nstring().value_or(""); }
  // Legacy (never compact) nullable string, used by the request header's client_id.
  std::optional<std::string> legacy_nstring() {
    int16_t len = i16();
    if (len < 0) return std::nullopt;
    const uint8_t* s = take(len);
    return std::string(reinterpret_cast<const char*>(s), len);
  }
  std::optional<std::string> nbytes() {
    int64_t len = flexible_ ? int64_t(uvarint()) - 1 : i32();
    if (len < 0) return std::nullopt;
    const uint8_t* s = take(len);
    return std::string(reinterpret_cast<const char*>(s), len);
  }
  std::string bytes() { return nbytes().value_or(""); }
  // Array length; -1 for a null array.
  int32_t array_len() {
    int64_t n = flexible_ ? int64_t(uvarint()) - 1 : i32();
    if (n > int64_t(remaining())) throw WireError("array length exceeds frame");
    return static_cast<int32_t>(n);
  }
  // Skips a tagged-field section (only present in flexible versions).
  void tags() {
    if (!flexible_) return;
    uint64_t n = uvarint();
    for (uint64_t i = 0; i < n; ++i) {
      uvarint();
      take(uvarint());
    }
  }
  const uint8_t* take(size_t n) {
    if (n > remaining()) throw WireError("truncated request");
    const uint8_t* r = p_;
    p_ += n;
    return r;
  }

 private:
  uint64_t be(int n) {
    const uint8_t* b = take(n);
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v = (v << 8) | b[i];
    return v;
  }
  const uint8_t* p_;
  const uint8_t* end_;
  bool flexible_;
};

class Writer {
 public:
  explicit Writer(bool flexible = false) : flexible_(flexible) {}
  void set_flexible(bool f) { flexible_ = f; }
  bool flexible() const { return flexible_; }
  std::string& buf() { return buf_; }
  size_t size() const { return buf_.size(); }

  void i8(int8_t v) { buf_.push_back(static_cast<char>(v)); }
  void boolean(bool v) { i8(v ? 1 : 0); }
  void i16(int16_t v) { be(uint16_t(v), 2); }
  void i32(int32_t v) { be(uint32_t(v), 4); }
  void i64(int64_t v) { be(uint64_t(v), 8); }
  void uuid(const Uuid& u) { buf_.append(reinterpret_cast<const char*>(u.data()), 16); }
  void uvarint(uint64_t v) {
    while (v >= 0x80) {
      buf_.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    buf_.push_back(static_cast<char>(v));
  }
  void varint(int64_t v) { uvarint((uint64_t(v) << 1) ^ uint64_t(v >> 63)); }
  void string(std::string_view s) {
    if (flexible_)
      uvarint(s.size() + 1);
    else
      i16(static_cast<int16_t>(s.size()));
    buf_.append(s);
  }
  void nstring(const std::optional<std::string>& s) {
    if (s) return string(*s);
    if (flexible_)
      uvarint(0);
    else
      i16(-1);
  }
  void bytes(std::string_view s) {
    if (flexible_)
      uvarint(s.size() + 1);
    else
      i32(static_cast<int32_t>(s.size()));
    buf_.append(s);
  }
  // Length prefix for `bytes` whose content is written separately (e.g. records by sendfile).
  void bytes_len(int64_t n) {
    if (flexible_)
      uvarint(n < 0 ? 0 : uint64_t(n) + 1);
    else
      i32(static_cast<int32_t>(n));
  }
  void array_len(int32_t n) {
    if (flexible_)
      uvarint(n < 0 ? 0 : uint64_t(n) + 1);
    else
      i32(n);
  }
  void tags() {
    if (flexible_) uvarint(0);
  }
  void raw(std::string_view s) { buf_.append(s); }
  void put_i32_at(size_t pos, int32_t v) {
    for (int i = 0; i < 4; ++i)
      buf_[pos + i] = static_cast<char>((uint32_t(v) >> (24 - 8 * i)) & 0xff);
  }

 private:
  void be(uint64_t v, int n) {
    for (int i = n - 1; i >= 0; --i) buf_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string buf_;
  bool flexible_;
};

std::string base64url(const uint8_t* data, size_t n);  // no padding
inline std::string base64url(const Uuid& u) {
  return base64url(u.data(), u.size());
}

}  // namespace tb
