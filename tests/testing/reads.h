// One object-store read as the attribution stage receives it, for the attribution unit tests:
// the fields every test sets; each test adds what it is about (key, range, method).
#pragma once

#include <cstdint>

#include "attribution/attribution.h"

namespace fc::testing {

inline attribution::ObjectRead object_read(std::uint64_t connection, std::uint32_t tid,
                                           std::uint64_t start_ns, std::uint64_t end_ns, int status,
                                           std::uint64_t body_bytes) {
  attribution::ObjectRead r;
  r.connection = connection;
  r.thread_id = tid;
  r.start_ns = start_ns;
  r.end_ns = end_ns;
  r.status = status;
  r.body_bytes = body_bytes;
  return r;
}

}  // namespace fc::testing
