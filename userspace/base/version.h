// The release every binary reports (--version, /api/v1/status): the CMake project's version.
#pragma once

namespace fc {
inline constexpr const char* kVersion = FETCHCOST_VERSION;
}  // namespace fc
