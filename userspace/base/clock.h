// The clock of the records' timestamps: CLOCK_MONOTONIC, which bpf_ktime_get_ns() reads, so a
// time taken here compares with a record's.
#pragma once

#include <time.h>

#include <cstdint>

namespace fc {
inline std::uint64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}
}  // namespace fc
