#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "cost/cost.h"

namespace {

constexpr double kGiB = 1073741824.0;

std::string error_of(std::string_view json) {
  auto table = fc::cost::parse_price_table(json);
  REQUIRE_FALSE(table.ok());
  return table.error().message;
}

}  // namespace

TEST_CASE("every preset parses and carries its source") {
  const auto names = fc::cost::preset_names();
  CHECK(names.size() == 7);
  for (const auto& name : names) {
    auto table = fc::cost::preset(name);
    REQUIRE_MESSAGE(table.ok(), name);
    CHECK(table->name == name);
    CHECK(table->currency == "USD");
    CHECK(table->source.find("https://") != std::string::npos);
    CHECK(std::isinf(table->egress_tiers.back().up_to_gb));
  }
}

TEST_CASE("S3 standard same region: GETs cost $0.0004 per 1000, egress is free") {
  auto table = fc::cost::preset("aws-s3-standard-same-region");
  REQUIRE(table.ok());
  fc::cost::CostMeter meter(*table);
  // 2,500 GETs of 4 MiB chunks.
  auto cost = meter.add(2500ull * 4 * 1024 * 1024, 2500);
  CHECK(cost.api == doctest::Approx(0.001));
  CHECK(cost.egress == 0.0);
  CHECK(cost.total() == doctest::Approx(0.001));
}

TEST_CASE("cross region is a flat $0.02/GB") {
  auto table = fc::cost::preset("aws-s3-standard-cross-region");
  REQUIRE(table.ok());
  CHECK(fc::cost::egress_cost(*table, 0, 50 * static_cast<std::uint64_t>(kGiB)) ==
        doctest::Approx(1.0));
}

TEST_CASE("internet egress tiers apply to the running total of the period") {
  auto table = fc::cost::preset("aws-s3-standard-internet");
  REQUIRE(table.ok());
  const std::uint64_t gb = static_cast<std::uint64_t>(kGiB);
  // 15 TB in one go: 10240 GB at 0.09 + 5120 GB at 0.085.
  CHECK(fc::cost::egress_cost(*table, 0, 15360 * gb) == doctest::Approx(921.6 + 435.2));
  // The same bytes in three reads that straddle the tier boundary cost the same.
  fc::cost::CostMeter meter(*table);
  double total = 0;
  total += meter.add(10000 * gb, 0).egress;
  CHECK(total == doctest::Approx(900.0));
  total += meter.add(1000 * gb, 0).egress;  // 240 GB at 0.09 + 760 GB at 0.085
  CHECK(total == doctest::Approx(900.0 + 21.6 + 64.6));
  total += meter.add(4360 * gb, 0).egress;
  CHECK(total == doctest::Approx(921.6 + 435.2));
  CHECK(meter.period_bytes() == 15360 * gb);
  meter.start_new_period();
  CHECK(meter.add(gb, 0).egress == doctest::Approx(0.09));
}

TEST_CASE("Azure internet: the first 100 GB are free") {
  auto table = fc::cost::preset("azure-blob-hot-internet");
  REQUIRE(table.ok());
  const std::uint64_t gb = static_cast<std::uint64_t>(kGiB);
  CHECK(fc::cost::egress_cost(*table, 0, 100 * gb) == 0.0);
  CHECK(fc::cost::egress_cost(*table, 0, 200 * gb) == doctest::Approx(8.7));
}

TEST_CASE("a custom table round-trips through JSON") {
  auto table = fc::cost::parse_price_table(R"({
    "name": "minio-onprem", "currency": "EUR", "get_usd_per_1000_requests": 0.001,
    "egress_usd_per_gb": [{"up_to_gb": 1, "usd_per_gb": 1.5}, {"usd_per_gb": 0.5}],
    "bytes_per_gb": 1000000000})");
  REQUIRE(table.ok());
  CHECK(table->currency == "EUR");
  CHECK(fc::cost::egress_cost(*table, 0, 3'000'000'000ull) == doctest::Approx(1.5 + 1.0));
  auto again = fc::cost::parse_price_table(fc::cost::to_json(*table));
  REQUIRE(again.ok());
  CHECK(again->egress_tiers.size() == 2);
  CHECK(again->egress_tiers[0].up_to_gb == 1.0);
  CHECK(std::isinf(again->egress_tiers[1].up_to_gb));
  CHECK(again->bytes_per_gb == 1e9);
}

TEST_CASE("validation errors name the field and what is wrong") {
  CHECK(error_of("{").find("not valid JSON") != std::string::npos);
  CHECK(error_of("[]").find("must be a JSON object") != std::string::npos);
  CHECK(error_of(R"({"egress_usd_per_gb": 0})").find("'get_usd_per_1000_requests' is missing") !=
        std::string::npos);
  CHECK(
      error_of(R"({"get_usd_per_1000_requests": 0.0004})").find("'egress_usd_per_gb' is missing") !=
      std::string::npos);
  CHECK(error_of(R"({"get_usd_per_1000_requests": "0.0004", "egress_usd_per_gb": 0})")
            .find("'get_usd_per_1000_requests' must be a number, got a string") !=
        std::string::npos);
  CHECK(error_of(R"({"get_usd_per_1000_requests": -1, "egress_usd_per_gb": 0})")
            .find("must be a finite number >= 0, got -1") != std::string::npos);
  CHECK(error_of(R"({"get_usd_per_1000_request": 1, "egress_usd_per_gb": 0})")
            .find("'get_usd_per_1000_request' is not a known key") != std::string::npos);
  CHECK(error_of(R"({"get_usd_per_1000_requests": 1, "egress_usd_per_gb": 0, "currency": "usd"})")
            .find("'currency' must be a 3-letter") != std::string::npos);
  CHECK(error_of(R"({"get_usd_per_1000_requests": 1, "egress_usd_per_gb": []})")
            .find("'egress_usd_per_gb' must have at least one tier") != std::string::npos);
  CHECK(error_of(R"({"get_usd_per_1000_requests": 1, "egress_usd_per_gb":
                     [{"up_to_gb": 10, "usd_per_gb": 1}, {"up_to_gb": 5, "usd_per_gb": 1},
                      {"usd_per_gb": 1}]})")
            .find("'egress_usd_per_gb[1].up_to_gb' must be greater than the previous tier's "
                  "bound (10.0), got 5") != std::string::npos);
  CHECK(error_of(R"({"get_usd_per_1000_requests": 1, "egress_usd_per_gb":
                     [{"up_to_gb": 10, "usd_per_gb": 1}]})")
            .find("'egress_usd_per_gb[0].up_to_gb' must be null or absent") != std::string::npos);
  CHECK(error_of(R"({"get_usd_per_1000_requests": 1, "egress_usd_per_gb":
                     [{"usd_per_gb": 1}, {"usd_per_gb": 2}]})")
            .find("'egress_usd_per_gb[0].up_to_gb' is missing") != std::string::npos);
  CHECK(error_of(R"({"get_usd_per_1000_requests": 1, "egress_usd_per_gb":
                     [{"up_to_gb": 1, "usd_per_gb": 1, "usd_per_tb": 3}, {"usd_per_gb": 2}]})")
            .find("'egress_usd_per_gb[0].usd_per_tb' is not a known key") != std::string::npos);
  CHECK(error_of(R"({"get_usd_per_1000_requests": 1, "egress_usd_per_gb": [{"up_to_gb": null}]})")
            .find("'egress_usd_per_gb[0].usd_per_gb' is missing") != std::string::npos);
  CHECK(error_of(R"({"get_usd_per_1000_requests": 1e999, "egress_usd_per_gb": 0})")
            .find("number overflow") != std::string::npos);
}

TEST_CASE("unknown preset and missing file explain what to do") {
  auto missing = fc::cost::preset("aws-glacier");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().message.find("aws-s3-standard-internet") != std::string::npos);
  auto no_file = fc::cost::load_price_table("/nonexistent/prices.json");
  REQUIRE_FALSE(no_file.ok());
  CHECK(no_file.error().message.find("cannot open '/nonexistent/prices.json'") !=
        std::string::npos);
}

TEST_CASE("load_price_table reads a user's file") {
  const auto path = std::filesystem::temp_directory_path() / "fc_cost_test_prices.json";
  {
    std::ofstream out(path);
    out << R"({"get_usd_per_1000_requests": 0.005, "egress_usd_per_gb": 0.01})";
  }
  auto table = fc::cost::load_price_table(path.string());
  std::filesystem::remove(path);
  REQUIRE(table.ok());
  CHECK(fc::cost::api_cost(*table, 2000) == doctest::Approx(0.01));
}

TEST_CASE("mangled price tables never crash: every byte flip is parsed or rejected") {
  for (const auto& name : fc::cost::preset_names()) {
    const std::string original = fc::cost::to_json(*fc::cost::preset(name));
    std::uint32_t state = 2463534242u;
    for (int i = 0; i < 2000; ++i) {
      std::string mangled = original;
      for (int flips = 0; flips < 3; ++flips) {
        state ^= state << 13, state ^= state >> 17, state ^= state << 5;
        mangled[state % mangled.size()] = static_cast<char>(state >> 24);
      }
      auto table = fc::cost::parse_price_table(mangled);
      if (table.ok()) {
        CHECK(table->egress_tiers.size() >= 1);
        CHECK(std::isinf(table->egress_tiers.back().up_to_gb));
        CHECK(fc::cost::egress_cost(*table, 0, 1ull << 40) >= 0);
      } else {
        CHECK_FALSE(table.error().message.empty());
      }
    }
  }
}
