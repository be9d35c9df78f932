// The process's heap in use, for tests and benches that bound or print a component's memory:
// glibc's small allocations plus its mmap'd ones (a large vector is one of those, and
// mallinfo2's uordblks alone does not count it).
#pragma once

#include <malloc.h>

#include <cstddef>

namespace fc::testing {

inline std::size_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

// Growth since `before`, 0 if the heap shrank.
inline std::size_t heap_growth(std::size_t before) {
  const std::size_t now = heap_in_use();
  return now > before ? now - before : 0;
}

}  // namespace fc::testing
