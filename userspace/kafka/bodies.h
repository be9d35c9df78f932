// Internal: decoders for the request and response bodies Kafka's framing hands over whole
// (everything but the Fetch response, which is decoded as it streams). Each takes a Reader placed
// after the header's fixed part (for requests: after client_id) and fills the Exchange. They
// return false when the bytes ran out or made no sense; what was decoded until then stays.
#pragma once

#include "kafka/kafka.h"
#include "kafka/wire.h"

namespace fc::kafka::bodies {

// Highest version of each API this build understands; others are skipped by length.
bool decodes(std::int16_t api_key, std::int16_t version);
// Whether the request/response body is decoded (versus skipped by length) for a decodable API.
bool decodes_request_body(std::int16_t api_key, std::int16_t version);
bool decodes_response_body(std::int16_t api_key, std::int16_t version);
// Flexible versions use request header v2 / response header v1 (tagged fields in the header).
bool request_is_flexible(std::int16_t api_key, std::int16_t version);
bool response_header_is_flexible(std::int16_t api_key, std::int16_t version);
// A plausible (api key, version) pair for resynchronisation: known key, version not far beyond
// the newest Kafka defines.
bool plausible_api(std::int16_t api_key, std::int16_t version);
// Stricter, for frames resync cannot verify by decoding: not a version Kafka 4 removed (e.g.
// Produce v0–2, which no current client sends).
bool current_api(std::int16_t api_key, std::int16_t version);

bool fetch_request(wire::Reader& r, std::int16_t version, FetchExchange& fetch);
bool group_request(wire::Reader& r, std::int16_t api_key, std::int16_t version, Exchange& ex);
bool api_versions_request(wire::Reader& r, std::int16_t version, Exchange& ex);

// Response readers start after the correlation id (and the header's tagged fields).
bool group_response(wire::Reader& r, std::int16_t api_key, std::int16_t version, Exchange& ex);
bool api_versions_response(wire::Reader& r, Exchange& ex);
// Calls learn(id, name) for every topic with both.
template <typename Learn>
bool metadata_response(wire::Reader& r, std::int16_t version, Exchange& ex, Learn&& learn);

}  // namespace fc::kafka::bodies

#include "kafka/bodies_metadata.inl"
