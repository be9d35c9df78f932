// Deterministic test bytes, shared by the kernel tests and the helper programs they run (which
// cannot link the test harness): stream `seed` byte i is the same everywhere.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace fc::capture_test {

inline std::string pattern(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (auto& c : s) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 16);
  }
  return s;
}

}  // namespace fc::capture_test
