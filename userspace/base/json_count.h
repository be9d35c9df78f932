// A count read from JSON (a config field, a ledger's bytes): only from a JSON integer that fits
// T. nlohmann's get<T>() wraps a whole number into a narrower or unsigned T (2^32 bytes become
// 0, -1 becomes 2^64 - 1) and cuts a float (2.5 becomes 2; 1e300 is undefined behaviour).
// For the readers of JSON files, which link nlohmann_json themselves.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

namespace fc {

template <typename T>
std::optional<T> json_count(const nlohmann::json& v) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if (v.is_number_unsigned()) {
    if (const auto n = v.get<std::uint64_t>(); std::in_range<T>(n)) return static_cast<T>(n);
  } else if (v.is_number_integer()) {
    if (const auto n = v.get<std::int64_t>(); std::in_range<T>(n)) return static_cast<T>(n);
  }
  return std::nullopt;
}

// " (MIN to MAX)": the range json_count<T> takes, for error messages.
template <typename T>
std::string json_count_range() {
  return " (" + std::to_string(std::numeric_limits<T>::min()) + " to " +
         std::to_string(std::numeric_limits<T>::max()) + ")";
}

// obj[key] as a count, for readers that report a bad file from one catch: throws
// std::runtime_error naming the key (and nlohmann's out_of_range when it is missing).
template <typename T>
T json_count_at(const nlohmann::json& obj, const char* key) {
  const nlohmann::json& v = obj.at(key);
  if (const auto n = json_count<T>(v)) return *n;
  throw std::runtime_error(std::string("\"") + key + "\" is not a whole number" +
                           json_count_range<T>() + ": " + v.dump());
}

}  // namespace fc
