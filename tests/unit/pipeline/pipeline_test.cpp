// The pipeline on hand-built capture pieces: roles and what opaque object-store cycles count as.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "pipeline/pipeline.h"
#include "pipeline_feeder.h"

using namespace fc;

namespace {

const std::uint8_t kHandshake[] = {0x16, 0x03, 0x01, 0x02, 0x00};
const std::uint8_t kAppData[] = {0x17, 0x03, 0x03, 0x40, 0x00};

using Feeder = testing::PipelineFeeder;

struct Totals {
  std::uint64_t bytes = 0, requests = 0, errors = 0;
};

Totals totals_of(const sensors::SensorTable& sensors, std::string_view client) {
  Totals t;
  sensors.for_each([&](const sensors::SensorView& s) {
    if (s.client_id != client) return;
    t.bytes += s.counters.remote_bytes;
    t.requests += s.counters.requests;
    t.errors += s.counters.errors;
  });
  return t;
}

}  // namespace

TEST_CASE(
    "opaque object store: uploads on non-reader threads are no reads; small answers no errors") {
  sensors::SensorTable sensors;
  pipeline::PipelineConfig config;
  config.kafka_ports = {9092};
  config.object_store_ports = {9000};
  auto pipe =
      pipeline::Pipeline::create(config, cost::PriceTable{}, sensors, nullptr, nullptr, nullptr);
  REQUIRE(pipe);
  pipeline::Pipeline& p = **pipe;
  p.open(7, 1, 40000, 9000, "127.0.0.1");
  Feeder f{p, 7};
  const std::string_view reader = "remote-log-read";  // "remote-log-reader3", cut at 15 bytes
  // Handshake (not a GET), then a PUT of an index object by an upload thread (looks like a GET
  // from outside), then two GETs by a reader: a 64 KiB chunk and a ~100-byte index object.
  f.call(false, 517, kHandshake, 10, 1, reader);
  f.call(true, 4000, kHandshake, 20, 1, reader);
  f.call(false, 700, kAppData, 30, 2, "kafka-rlm-threa");
  f.call(true, 300, kAppData, 40, 2, "kafka-rlm-threa");
  f.call(false, 250, kAppData, 50, 1, reader);
  f.call(true, 16413, kAppData, 60, 1, reader);
  f.call(true, 16413, kAppData, 61, 1, reader);
  f.call(true, 16413, kAppData, 62, 1, reader);
  f.call(true, 16413, kAppData, 63, 1, reader);
  f.call(true, 450 + 29, kAppData, 64, 1, reader);  // 64 KiB + a 450-byte head in 5 records
  f.call(false, 250, kAppData, 70, 1, reader);
  f.call(true, 400, kAppData, 80, 1, reader);
  p.finish(100);
  CHECK(p.stats().opaque_connections == 1);
  CHECK(p.stats().object_reads == 2);
  CHECK(p.stats().opaque_cycles_not_reads == 1);
  const Totals t = totals_of(sensors, "__unattributed__");  // no Kafka traffic: no fetch to match
  CHECK(t.requests == 2);
  CHECK(t.errors == 0);  // the status cannot be seen: small answers are not guessed as failures
  CHECK(t.bytes == 65536);
}

TEST_CASE("opaque object store: without thread names every cycle counts") {
  sensors::SensorTable sensors;
  pipeline::PipelineConfig config;
  config.object_store_ports = {9000};
  auto pipe =
      pipeline::Pipeline::create(config, cost::PriceTable{}, sensors, nullptr, nullptr, nullptr);
  REQUIRE(pipe);
  pipeline::Pipeline& p = **pipe;
  p.open(7, 1, 40000, 9000, "127.0.0.1");
  Feeder f{p, 7};
  f.call(false, 250, kAppData, 50, 1, "");
  f.call(true, 2000, kAppData, 60, 1, "");
  f.call(false, 250, kAppData, 70, 2, "");
  f.call(true, 2000, kAppData, 80, 2, "");
  p.finish(100);
  CHECK(p.stats().object_reads == 2);
  CHECK(totals_of(sensors, "__unattributed__").requests == 2);
}

namespace {

std::span<const std::uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

}  // namespace

TEST_CASE("HTTP: a request retried on another connection is not a failed GET") {
  // A kept-alive connection the store closed while idle: the client writes its request, reads
  // EOF, and sends it again on a new connection. The store served one GET. The first attempt
  // stays unanswered on the old connection (its close may not even be seen before shutdown).
  sensors::SensorTable sensors;
  pipeline::PipelineConfig config;
  config.object_store_ports = {9000};
  auto pipe =
      pipeline::Pipeline::create(config, cost::PriceTable{}, sensors, nullptr, nullptr, nullptr);
  REQUIRE(pipe);
  pipeline::Pipeline& p = **pipe;
  p.open(7, 1, 40000, 9000, "127.0.0.1");
  p.open(8, 1, 40001, 9000, "127.0.0.1");
  Feeder stale{p, 7}, fresh{p, 8};
  const std::string get_a = "GET /b/a HTTP/1.1\r\nHost: s3\r\nRange: bytes=0-9\r\n\r\n";
  const std::string get_b = "GET /b/b HTTP/1.1\r\nHost: s3\r\nRange: bytes=0-9\r\n\r\n";
  const std::string answer =
      "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\nContent-Length: "
      "10\r\n\r\n0123456789";
  const std::string_view reader = "remote-log-read";
  stale.call(false, get_a.size(), bytes_of(get_a), 10, 5, reader);
  fresh.call(false, get_a.size(), bytes_of(get_a), 20, 5, reader);  // the retry
  fresh.call(true, answer.size(), bytes_of(answer), 30, 5, reader);
  // Another thread's request that was never answered nor retried: a failed GET.
  stale.call(false, get_b.size(), bytes_of(get_b), 40, 6, reader);
  p.finish(100);
  // The counts outlive the connections: all three requests, one answer, one never answered.
  const objstore::HttpStats http = p.stats().http;
  CHECK(http.requests == 3);
  CHECK(http.responses == 1);
  CHECK(http.retried_requests == 1);
  CHECK(http.unanswered == 1);
  const Totals t = totals_of(sensors, "__unattributed__");
  CHECK(t.requests == 2);
  CHECK(t.errors == 1);
  CHECK(t.bytes == 10);
}

TEST_CASE(
    "HTTP: a reader that moves on gives up its request; a closed connection's retried request") {
  sensors::SensorTable sensors;
  pipeline::PipelineConfig config;
  config.object_store_ports = {9000};
  auto pipe =
      pipeline::Pipeline::create(config, cost::PriceTable{}, sensors, nullptr, nullptr, nullptr);
  REQUIRE(pipe);
  pipeline::Pipeline& p = **pipe;
  p.open(7, 1, 40000, 9000, "127.0.0.1");
  p.open(8, 1, 40001, 9000, "127.0.0.1");
  p.open(9, 1, 40002, 9000, "127.0.0.1");
  Feeder a{p, 7}, b{p, 8}, c{p, 9};
  auto get = [](std::string key) {
    return "GET /b/" + key + " HTTP/1.1\r\nHost: s3\r\nRange: bytes=0-9\r\n\r\n";
  };
  const std::string answer =
      "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\nContent-Length: "
      "10\r\n\r\n0123456789";
  const std::string_view reader = "remote-log-read";
  // Thread 5 gives up on x (no retry) and reads y elsewhere: x is a failed GET, seen now.
  const std::string x = get("x"), y = get("y"), z = get("z");
  a.call(false, x.size(), bytes_of(x), 10, 5, reader);
  b.call(false, y.size(), bytes_of(y), 20, 5, reader);
  b.call(true, answer.size(), bytes_of(answer), 30, 5, reader);
  Totals t = totals_of(sensors, "__unattributed__");
  CHECK(t.requests == 2);
  CHECK(t.errors == 1);
  // Thread 6 writes z on a connection that then closes unanswered, and retries z on another one:
  // one GET, answered.
  c.call(false, z.size(), bytes_of(z), 40, 6, reader);
  p.close(9, 50);
  b.call(false, z.size(), bytes_of(z), 60, 6, reader);
  b.call(true, answer.size(), bytes_of(answer), 70, 6, reader);
  p.finish(100);
  CHECK(p.stats().http.retried_requests == 1);
  t = totals_of(sensors, "__unattributed__");
  CHECK(t.requests == 3);
  CHECK(t.errors == 1);
  CHECK(t.bytes == 20);
}
