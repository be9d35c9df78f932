#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cost/cost.h"
#include "cost/presets_embedded.h"

namespace fc::cost {
namespace {

using nlohmann::json;

const char* json_type_name(const json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return "a boolean";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "an array";
  return "an object";
}

Error field_error(const std::string& field, const std::string& what) {
  return make_error("price table: field '" + field + "' " + what);
}

// A finite, non-negative number; anything else is an error naming the field.
Result<double> read_rate(const json& value, const std::string& field) {
  if (!value.is_number()) {
    return field_error(field, std::string("must be a number, got ") + json_type_name(value));
  }
  double rate = value.get<double>();
  if (!std::isfinite(rate) || rate < 0) {
    return field_error(field, "must be a finite number >= 0, got " + value.dump());
  }
  return rate;
}

Result<std::vector<EgressTier>> read_egress(const json& value) {
  const std::string field = "egress_usd_per_gb";
  std::vector<EgressTier> tiers;
  if (value.is_number()) {
    auto rate = read_rate(value, field);
    if (!rate) return rate.error();
    tiers.push_back(EgressTier{std::numeric_limits<double>::infinity(), *rate});
    return tiers;
  }
  if (!value.is_array()) {
    return field_error(field, std::string("must be a number (flat rate) or an array of tiers "
                                          "[{\"up_to_gb\": N, \"usd_per_gb\": R}], got ") +
                                  json_type_name(value));
  }
  if (value.empty()) return field_error(field, "must have at least one tier");
  double previous_bound = 0;
  for (std::size_t i = 0; i < value.size(); ++i) {
    const json& tier = value[i];
    const std::string tier_field = field + "[" + std::to_string(i) + "]";
    if (!tier.is_object()) {
      return field_error(tier_field, std::string("must be an object {\"up_to_gb\": N, "
                                                 "\"usd_per_gb\": R}, got ") +
                                         json_type_name(tier));
    }
    for (const auto& [key, unused] : tier.items()) {
      if (key != "up_to_gb" && key != "usd_per_gb") {
        return field_error(tier_field + "." + key,
                           "is not a known key (expected 'up_to_gb' and 'usd_per_gb')");
      }
    }
    if (!tier.contains("usd_per_gb")) return field_error(tier_field + ".usd_per_gb", "is missing");
    auto rate = read_rate(tier["usd_per_gb"], tier_field + ".usd_per_gb");
    if (!rate) return rate.error();
    EgressTier parsed{std::numeric_limits<double>::infinity(), *rate};
    const bool last = i + 1 == value.size();
    if (tier.contains("up_to_gb") && !tier["up_to_gb"].is_null()) {
      auto bound = read_rate(tier["up_to_gb"], tier_field + ".up_to_gb");
      if (!bound) return bound.error();
      if (*bound <= previous_bound) {
        return field_error(tier_field + ".up_to_gb",
                           "must be greater than the previous tier's bound (" +
                               json(previous_bound).dump() + "), got " + tier["up_to_gb"].dump());
      }
      if (last) {
        return field_error(tier_field + ".up_to_gb",
                           "must be null or absent: the last tier has no upper bound (otherwise "
                           "bytes beyond it would have no price)");
      }
      parsed.up_to_gb = *bound;
      previous_bound = *bound;
    } else if (!last) {
      return field_error(tier_field + ".up_to_gb",
                         "is missing: only the last tier may be unbounded");
    }
    tiers.push_back(parsed);
  }
  return tiers;
}

Result<PriceTable> from_json(const json& root) {
  if (!root.is_object()) {
    return make_error(std::string("price table: must be a JSON object, got ") +
                      json_type_name(root));
  }
  static const char* const kKnownKeys[] = {"name",
                                           "currency",
                                           "source",
                                           "notes",
                                           "bytes_per_gb",
                                           "egress_usd_per_gb",
                                           "get_usd_per_1000_requests"};
  for (const auto& [key, unused] : root.items()) {
    if (std::find(std::begin(kKnownKeys), std::end(kKnownKeys), key) == std::end(kKnownKeys)) {
      return field_error(key,
                         "is not a known key (expected name, currency, "
                         "get_usd_per_1000_requests, egress_usd_per_gb, bytes_per_gb, "
                         "source, notes)");
    }
  }
  PriceTable table;
  for (const char* text_key : {"name", "currency", "source", "notes"}) {
    if (!root.contains(text_key)) continue;
    if (!root[text_key].is_string()) {
      return field_error(text_key,
                         std::string("must be a string, got ") + json_type_name(root[text_key]));
    }
  }
  if (root.contains("name")) table.name = root["name"].get<std::string>();
  if (root.contains("source")) table.source = root["source"].get<std::string>();
  if (root.contains("notes")) table.notes = root["notes"].get<std::string>();
  if (root.contains("currency")) {
    table.currency = root["currency"].get<std::string>();
    const bool iso_like =
        table.currency.size() == 3 && std::all_of(table.currency.begin(), table.currency.end(),
                                                  [](char c) { return c >= 'A' && c <= 'Z'; });
    if (!iso_like) {
      return field_error("currency",
                         "must be a 3-letter upper-case ISO 4217 code such as "
                         "\"USD\", got \"" +
                             table.currency + "\"");
    }
  }
  if (!root.contains("get_usd_per_1000_requests")) {
    return field_error("get_usd_per_1000_requests",
                       "is missing (price of 1000 GET requests, e.g. 0.0004 for S3 Standard)");
  }
  auto get_rate = read_rate(root["get_usd_per_1000_requests"], "get_usd_per_1000_requests");
  if (!get_rate) return get_rate.error();
  table.get_usd_per_1000_requests = *get_rate;
  if (!root.contains("egress_usd_per_gb")) {
    return field_error(
        "egress_usd_per_gb",
        "is missing (0 when reads stay in the bucket's region, else a rate or tiers)");
  }
  auto tiers = read_egress(root["egress_usd_per_gb"]);
  if (!tiers) return tiers.error();
  table.egress_tiers = std::move(*tiers);
  if (root.contains("bytes_per_gb")) {
    auto bytes_per_gb = read_rate(root["bytes_per_gb"], "bytes_per_gb");
    if (!bytes_per_gb) return bytes_per_gb.error();
    if (*bytes_per_gb < 1) return field_error("bytes_per_gb", "must be >= 1");
    table.bytes_per_gb = *bytes_per_gb;
  }
  return table;
}

}  // namespace

Result<PriceTable> parse_price_table(std::string_view json_text) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {
    // parse_error and out_of_range (a number too large for a double, e.g. 1e999)
    return make_error(std::string("price table: not valid JSON: ") + e.what());
  }
  return from_json(root);
}

Result<PriceTable> load_price_table_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("price table: cannot open '" + path + "': check the path");
  std::ostringstream text;
  text << in.rdbuf();
  auto table = parse_price_table(text.str());
  if (!table) return make_error(path + ": " + table.error().message);
  return table;
}

std::string to_json(const PriceTable& table) {
  json tiers = json::array();
  for (const EgressTier& tier : table.egress_tiers) {
    json entry;
    entry["up_to_gb"] = std::isinf(tier.up_to_gb) ? json(nullptr) : json(tier.up_to_gb);
    entry["usd_per_gb"] = tier.usd_per_gb;
    tiers.push_back(entry);
  }
  json root = {{"name", table.name},
               {"currency", table.currency},
               {"get_usd_per_1000_requests", table.get_usd_per_1000_requests},
               {"egress_usd_per_gb", tiers},
               {"bytes_per_gb", table.bytes_per_gb}};
  if (!table.source.empty()) root["source"] = table.source;
  if (!table.notes.empty()) root["notes"] = table.notes;
  return root.dump(2);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& preset : internal::embedded_presets()) names.emplace_back(preset.name);
  return names;
}

Result<PriceTable> preset(std::string_view name) {
  for (const auto& embedded : internal::embedded_presets()) {
    if (embedded.name != name) continue;
    auto table = parse_price_table(embedded.json);
    if (table && table->name.empty()) table->name = std::string(name);
    return table;
  }
  std::string known;
  for (const auto& embedded : internal::embedded_presets()) {
    known += (known.empty() ? "" : ", ") + std::string(embedded.name);
  }
  return make_error("price table: no preset named '" + std::string(name) + "' (presets: " + known +
                    "; or give a path to a JSON file)");
}

Result<PriceTable> load_price_table(std::string_view preset_or_path) {
  for (const auto& embedded : internal::embedded_presets()) {
    if (embedded.name == preset_or_path) return preset(preset_or_path);
  }
  if (preset_or_path.find('/') != std::string_view::npos || preset_or_path.ends_with(".json")) {
    return load_price_table_file(std::string(preset_or_path));
  }
  return preset(preset_or_path);
}

double api_cost(const PriceTable& table, std::uint64_t get_requests) {
  return static_cast<double>(get_requests) * table.get_usd_per_1000_requests / 1000.0;
}

double egress_cost(const PriceTable& table, std::uint64_t period_bytes_before,
                   std::uint64_t bytes) {
  // Integrate the tiered rate over [before, before + bytes) in GB.
  const double start_gb = static_cast<double>(period_bytes_before) / table.bytes_per_gb;
  const double end_gb = start_gb + static_cast<double>(bytes) / table.bytes_per_gb;
  double cost = 0;
  double tier_start = 0;
  for (const EgressTier& tier : table.egress_tiers) {
    const double lo = std::max(start_gb, tier_start);
    const double hi = std::min(end_gb, tier.up_to_gb);
    if (hi > lo) cost += (hi - lo) * tier.usd_per_gb;
    if (end_gb <= tier.up_to_gb) break;
    tier_start = tier.up_to_gb;
  }
  return cost;
}

Cost CostMeter::add(std::uint64_t egress_bytes, std::uint64_t get_requests) {
  Cost cost;
  cost.api = api_cost(table_, get_requests);
  cost.egress = egress_cost(table_, period_bytes_, egress_bytes);
  period_bytes_ += egress_bytes;
  return cost;
}

}  // namespace fc::cost
