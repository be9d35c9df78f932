#include "records.h"

#include <array>

#include "wire.h"

namespace tb {
namespace {

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}

}  // namespace

uint32_t crc32c(const uint8_t* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ data[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

std::string message_key(const std::string& topic, int partition, int64_t offset) {
  return topic + "/" + std::to_string(partition) + "/" + std::to_string(offset);
}

namespace {
std::string& record_marker() {
  static std::string marker;
  return marker;
}
}  // namespace

void set_record_marker(std::string marker) {
  record_marker() = std::move(marker);
}

std::string message_value(const std::string& topic, int partition, int64_t offset,
                          size_t value_size) {
  std::string v = message_key(topic, partition, offset) + "/" + record_marker();
  if (v.size() < value_size) v.append(value_size - v.size(), char('a' + offset % 26));
  return v;
}

std::string encode_batch(const std::string& topic, int partition, int64_t base_offset, int count,
                         size_t value_size, int64_t base_timestamp_ms) {
  Writer records;
  for (int i = 0; i < count; ++i) {
    int64_t offset = base_offset + i;
    std::string key = message_key(topic, partition, offset);
    std::string value = message_value(topic, partition, offset, value_size);
    Writer r;
    r.i8(0);      // attributes
    r.varint(i);  // timestamp delta (one millisecond per record)
    r.varint(i);  // offset delta
    r.varint(int64_t(key.size()));
    r.raw(key);
    r.varint(int64_t(value.size()));
    r.raw(value);
    r.varint(0);  // headers
    records.varint(int64_t(r.size()));
    records.raw(r.buf());
  }
  // Everything from attributes on is covered by the CRC.
  Writer tail;
  tail.i16(0);                              // attributes: no compression, not transactional
  tail.i32(count - 1);                      // last offset delta
  tail.i64(base_timestamp_ms);              // base timestamp
  tail.i64(base_timestamp_ms + count - 1);  // max timestamp
  tail.i64(-1);                             // producer id
  tail.i16(-1);                             // producer epoch
  tail.i32(-1);                             // base sequence
  tail.i32(count);
  tail.raw(records.buf());
  uint32_t crc = crc32c(reinterpret_cast<const uint8_t*>(tail.buf().data()), tail.size());

  Writer batch;
  batch.i64(base_offset);
  batch.i32(int32_t(4 + 1 + 4 + tail.size()));  // leader epoch + magic + crc + tail
  batch.i32(0);                                 // partition leader epoch
  batch.i8(2);                                  // magic
  batch.i32(int32_t(crc));
  batch.raw(tail.buf());
  return std::move(batch.buf());
}

std::string base64url(const uint8_t* data, size_t n) {
  static const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  size_t i = 0;
  for (; i + 2 < n; i += 3) {
    uint32_t v = (data[i] << 16) | (data[i + 1] << 8) | data[i + 2];
    for (int k = 3; k >= 0; --k) out.push_back(alphabet[(v >> (6 * k)) & 63]);
  }
  if (n - i == 1) {
    uint32_t v = data[i] << 16;
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
  } else if (n - i == 2) {
    uint32_t v = (data[i] << 16) | (data[i + 1] << 8);
    out.push_back(alphabet[(v >> 18) & 63]);
    out.push_back(alphabet[(v >> 12) & 63]);
    out.push_back(alphabet[(v >> 6) & 63]);
  }
  return out;
}

}  // namespace tb
