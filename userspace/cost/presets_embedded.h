// Internal: the preset JSON texts embedded by the build (see CMakeLists.txt).
#pragma once

#include <string_view>
#include <vector>

namespace fc::cost::internal {

struct EmbeddedPreset {
  std::string_view name;
  std::string_view json;
};

const std::vector<EmbeddedPreset>& embedded_presets();

}  // namespace fc::cost::internal
