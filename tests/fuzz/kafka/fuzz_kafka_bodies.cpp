// libFuzzer: the body decoders directly, every version. Input: [selector u8][body].
#include <cstddef>
#include <cstdint>

#include "kafka/bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t selector = data[0];
  fc::kafka::wire::Reader r(data + 1, data + size);
  fc::kafka::Exchange ex;
  const auto version = static_cast<std::int16_t>(selector % 18);
  switch ((selector / 18) % 6) {
    case 0:
      fc::kafka::bodies::fetch_request(r, version, ex.fetch);
      break;
    case 1:
      fc::kafka::bodies::metadata_response(r, static_cast<std::int16_t>(version % 14), ex,
                                           [](const fc::kafka::Uuid&, std::string_view) {});
      break;
    case 2:
      fc::kafka::bodies::group_request(r, static_cast<std::int16_t>(8 + version % 7),
                                       static_cast<std::int16_t>(version % 10), ex);
      break;
    case 3:
      fc::kafka::bodies::group_response(r, static_cast<std::int16_t>(11 + version % 4),
                                        static_cast<std::int16_t>(version % 10), ex);
      break;
    case 4:
      fc::kafka::bodies::api_versions_request(r, static_cast<std::int16_t>(version % 5), ex);
      break;
    default:
      fc::kafka::bodies::api_versions_response(r, ex);
      break;
  }
  if (r.p > r.end) __builtin_trap();
  return 0;
}
