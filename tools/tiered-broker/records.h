// Record batches (magic v2, CRC-32C) with deterministic contents that tests can recompute.
#pragma once

#include <cstdint>
#include <string>

namespace tb {

uint32_t crc32c(const uint8_t* data, size_t n, uint32_t crc = 0);

// The deterministic message for (topic, partition, offset): clients check every byte.
//   key   = "<topic>/<partition>/<offset>"
//   value = key + "/" then the letter 'a' + offset % 26 repeated up to value_size bytes
//           (never shorter than key + "/").
std::string message_key(const std::string& topic, int partition, int64_t offset);
// --record-marker: a string put in every value after the key (tests search outputs for it);
// set before the log is seeded.
void set_record_marker(std::string marker);
std::string message_value(const std::string& topic, int partition, int64_t offset,
                          size_t value_size);

// Encodes `count` consecutive deterministic records starting at base_offset as one batch.
std::string encode_batch(const std::string& topic, int partition, int64_t base_offset, int count,
                         size_t value_size, int64_t base_timestamp_ms);

}  // namespace tb
