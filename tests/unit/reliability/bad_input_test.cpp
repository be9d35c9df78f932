// Bad input through the real decoders, the pipeline and the sensor table: truncated frames,
// absurd sizes (2 GiB frames, a million partitions, 2^63-byte bodies), invalid UTF-8 and 32 KiB
// client-ids. Nothing may crash, allocate by a size read off the wire, or reach a label
// unsanitized.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "daemon/config.h"
#include "export/export.h"
#include "kafka/kafka.h"
#include "objstore/objstore.h"
#include "pipeline/pipeline.h"
#include "pipeline_feeder.h"
#include "sensors/sensors.h"

using namespace fc;

namespace {

// A big-endian Kafka frame writer (only what the tests need; independent of the decoder).
struct Frame {
  std::vector<std::uint8_t> b;
  void i8(int v) { b.push_back(static_cast<std::uint8_t>(v)); }
  void i16(int v) {
    i8(v >> 8);
    i8(v);
  }
  void i32(std::int64_t v) {
    for (int s = 24; s >= 0; s -= 8) i8(static_cast<int>(v >> s));
  }
  void i64(std::int64_t v) {
    for (int s = 56; s >= 0; s -= 8) i8(static_cast<int>(v >> s));
  }
  void str(std::string_view s) {
    i16(static_cast<int>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }
  // Prefixes the 4-byte size.
  std::vector<std::uint8_t> framed() const {
    Frame f;
    f.i32(static_cast<std::int64_t>(b.size()));
    f.b.insert(f.b.end(), b.begin(), b.end());
    return f.b;
  }
};

// Fetch v4 request: one topic, `partitions` partitions (the count written is `claimed`).
std::vector<std::uint8_t> fetch_v4(std::string_view client_id, std::string_view topic,
                                   std::int32_t corr, std::int64_t offset, int partitions = 1,
                                   std::int64_t claimed = -1) {
  Frame f;
  f.i16(1);
  f.i16(4);
  f.i32(corr);
  f.str(client_id);
  f.i32(-1);       // replica
  f.i32(500);      // max wait
  f.i32(1);        // min bytes
  f.i32(1 << 20);  // max bytes
  f.i8(0);
  f.i32(1);
  f.str(topic);
  f.i32(claimed >= 0 ? claimed : partitions);
  for (int p = 0; p < partitions; ++p) {
    f.i32(p);
    f.i64(offset);
    f.i32(1 << 20);
  }
  return f.framed();
}

std::vector<std::uint8_t> fetch_v4_response(std::int32_t corr, std::string_view topic,
                                            std::int32_t records) {
  Frame f;
  f.i32(corr);
  f.i32(0);  // throttle
  f.i32(1);
  f.str(topic);
  f.i32(1);
  f.i32(0);  // partition
  f.i16(0);
  f.i64(1000);
  f.i64(1000);
  f.i32(0);  // aborted transactions
  f.i32(records);
  for (int i = 0; i < records; ++i) f.i8('r');
  return f.framed();
}

struct Collect : kafka::Sink {
  std::vector<kafka::Exchange> exchanges;
  void on_exchange(const kafka::Exchange& e) override { exchanges.push_back(e); }
};

std::span<const std::uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

bool valid_utf8_without_controls(std::string_view s) {
  return sensors::sanitize_label(s, 1 << 20) == s;
}

using Feeder = testing::PipelineFeeder;

}  // namespace

TEST_CASE(
    "a 2 GiB frame size is no frame: the decoder resynchronises, allocates nothing, goes on") {
  Collect sink;
  kafka::Decoder decoder(sink);
  decoder.open(1, 0);
  // A frame header announcing 2 GiB - 1, then a few bytes; then a valid Fetch.
  std::vector<std::uint8_t> junk = {0x7f, 0xff, 0xff, 0xff, 0, 1, 0, 4, 0, 0, 0, 1};
  std::uint64_t pos = 0;
  decoder.data(1, kafka::Direction::kRequest, 1, pos, junk.size(), junk);
  pos += junk.size();
  const auto good = fetch_v4("after-junk", "scan", 7, 5);
  decoder.data(1, kafka::Direction::kRequest, 2, pos, good.size(), good);
  decoder.close(1, 3);
  CHECK(decoder.counters().resyncs >= 1);
  // The valid request after the junk is found again (resync scans for a plausible header).
  bool found = false;
  for (const auto& e : sink.exchanges) found |= e.client_id == "after-junk";
  CHECK(found);
}

TEST_CASE("a negative frame size and a 2 GiB response size are survived") {
  Collect sink;
  kafka::Decoder decoder(sink);
  decoder.open(1, 0);
  const auto req = fetch_v4("c", "scan", 1, 0);
  decoder.data(1, kafka::Direction::kRequest, 1, 0, req.size(), req);
  std::vector<std::uint8_t> resp = {0x80, 0, 0, 0, 0, 0, 0, 1};  // size -2^31
  decoder.data(1, kafka::Direction::kResponse, 2, 0, resp.size(), resp);
  std::vector<std::uint8_t> big = {0x7f, 0xff, 0xff, 0xfe, 0, 0, 0, 1};
  decoder.data(1, kafka::Direction::kResponse, 3, resp.size(), big.size(), big);
  decoder.close(1, 4);
  CHECK(sink.exchanges.size() == 1);
}

TEST_CASE("a million partitions claimed in a small frame is a parse error, not an allocation") {
  Collect sink;
  kafka::Decoder decoder(sink);
  decoder.open(1, 0);
  const auto req = fetch_v4("liar", "scan", 1, 0, 1, 1'000'000);
  decoder.data(1, kafka::Direction::kRequest, 1, 0, req.size(), req);
  decoder.close(1, 2);
  CHECK(decoder.counters().parse_errors == 1);
  REQUIRE(sink.exchanges.size() == 1);
  CHECK(sink.exchanges[0].fetch.partitions.size() <= 1);
}

TEST_CASE("a real million-partition fetch (16 MB) is skipped by length; 60,000 are decoded") {
  Collect sink;
  kafka::Decoder decoder(sink);
  decoder.open(1, 0);
  const auto huge = fetch_v4("huge", "scan", 1, 0, 1'000'000);
  const auto many = fetch_v4("many", "scan", 2, 0, 60'000);
  decoder.data(1, kafka::Direction::kRequest, 1, 0, huge.size(), huge);
  decoder.data(1, kafka::Direction::kRequest, 2, huge.size(), many.size(), many);
  decoder.close(1, 3);
  CHECK(decoder.counters().frames_too_large == 1);
  REQUIRE(sink.exchanges.size() == 2);
  CHECK(sink.exchanges[0].client_id == "huge");
  CHECK_FALSE(sink.exchanges[0].body_decoded);
  CHECK(sink.exchanges[1].fetch.partitions.size() == 60'000);
}

TEST_CASE("every truncation of a request and a response is survived") {
  const auto req = fetch_v4("trunc", "scan", 9, 3);
  const auto resp = fetch_v4_response(9, "scan", 100);
  for (std::size_t cut = 0; cut <= req.size(); ++cut) {
    Collect sink;
    kafka::Decoder decoder(sink);
    decoder.open(1, 0);
    decoder.data(1, kafka::Direction::kRequest, 1, 0, cut,
                 std::span<const std::uint8_t>(req.data(), cut));
    decoder.close(1, 2);
  }
  for (std::size_t cut = 0; cut <= resp.size(); ++cut) {
    Collect sink;
    kafka::Decoder decoder(sink);
    decoder.open(1, 0);
    decoder.data(1, kafka::Direction::kRequest, 1, 0, req.size(), req);
    decoder.data(1, kafka::Direction::kResponse, 2, 0, cut,
                 std::span<const std::uint8_t>(resp.data(), cut));
    decoder.close(1, 3);
    // One exchange whatever the cut (a response cut short still started: response_seen).
    CHECK(sink.exchanges.size() == 1);
  }
}

TEST_CASE("a 32 KiB client-id of invalid UTF-8 reaches the label sanitized, capped and counted") {
  // Kafka's client_id is an INT16-length string: 32767 bytes at most. Invalid UTF-8, control
  // characters, quotes, backslashes and newlines, all in one.
  std::string client(32767, 'x');
  for (std::size_t i = 0; i < client.size(); i += 7) client[i] = static_cast<char>(0xff);
  for (std::size_t i = 3; i < client.size(); i += 11) client[i] = '\n';
  client.replace(1, 3, "\"\\\x01");
  // The decoder hands the client-id over whole: sanitizing is the sensor table's job.
  Collect sink;
  kafka::Decoder decoder(sink);
  decoder.open(1, 0);
  const auto req = fetch_v4(client, "scan", 1, 0);
  decoder.data(1, kafka::Direction::kRequest, 1, 0, req.size(), req);
  decoder.close(1, 2);
  REQUIRE(sink.exchanges.size() == 1);
  CHECK(sink.exchanges[0].client_id.size() == 32767);

  sensors::SensorTable table;
  sensors::Observation o;
  o.client_id = client;
  o.topic = "scan\xc3\x28";  // invalid 2-byte sequence
  o.remote_bytes = 10;
  o.requests = 1;
  o.now_ns = 1;
  table.record(o);
  int n = 0;
  table.for_each([&](const sensors::SensorView& s) {
    ++n;
    CHECK(s.client_id.size() <= sensors::kMaxLabelBytes);
    CHECK(valid_utf8_without_controls(s.client_id));
    CHECK(s.client_id.find('\n') == std::string_view::npos);
    CHECK(valid_utf8_without_controls(s.topic));
    CHECK(s.counters.remote_bytes == 10);
  });
  CHECK(n == 1);
  CHECK(table.stats().sanitized_labels == 2);
  // …and the count is a metric.
  const std::string text = exporter::render_prometheus(table, {}, {});
  CHECK(text.find("fetchcost_sanitized_labels_total 2") != std::string::npos);
  // The escaped quote and backslash of the label value survive in the text format.
  // (byte 0 is 0xff → '?', then the quote, the backslash and \x01 → '_').
  CHECK(text.find("client_id=\"?\\\"\\\\_") != std::string::npos);
}

TEST_CASE("the pipeline: a 32 KiB client-id's remote read is counted under its sanitized label") {
  sensors::SensorTable table;
  pipeline::PipelineConfig config;
  config.kafka_ports = {9092};
  config.object_store_ports = {9000};
  auto pipe =
      pipeline::Pipeline::create(config, cost::PriceTable{}, table, nullptr, nullptr, nullptr);
  REQUIRE(pipe);
  pipeline::Pipeline& p = **pipe;
  std::string client(32767, 'c');
  client[100] = static_cast<char>(0xc0);  // overlong lead byte: invalid
  p.open(1, 1, 9092, 50000, "127.0.0.1");
  p.open(2, 1, 40000, 9000, "127.0.0.1");
  Feeder kafka_conn{p, 1}, store{p, 2};
  const auto req = fetch_v4(client, "scan", 1, 5);
  kafka_conn.call(true, req, 10, 100, "data-plane-kafk");
  const std::string get =
      "GET /tiered/scan-AAAAAAAAAAAAAAAAAAAAAA/0/00000000000000000000-BBBBBBBBBBBBBBBBBBBBBB.log "
      "HTTP/1.1\r\nHost: s3\r\nRange: bytes=0-9\r\n\r\n";
  const std::string answer =
      "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-9/100\r\nContent-Length: "
      "10\r\n\r\n0123456789";
  store.call(false, bytes_of(get), 20, 200, "remote-log-read");
  store.call(true, bytes_of(answer), 30, 200, "remote-log-read");
  const auto resp = fetch_v4_response(1, "scan", 10);
  kafka_conn.call(false, resp, 40, 100, "data-plane-kafk");
  p.finish(100);
  std::uint64_t bytes = 0;
  table.for_each([&](const sensors::SensorView& s) {
    CHECK(s.client_id.size() <= sensors::kMaxLabelBytes);
    CHECK(valid_utf8_without_controls(s.client_id));
    if (s.client_id != sensors::kUnattributedClient) bytes += s.counters.remote_bytes;
  });
  CHECK(bytes == 10);
  CHECK(table.stats().sanitized_labels >= 1);
}

TEST_CASE("HTTP: absurd Content-Length, huge headers and garbage are survived; no bytes invented") {
  objstore::AivenLayout layout;
  std::vector<objstore::ObjectGet> gets;
  objstore::HttpConnection http(1, &layout, {},
                                [&](const objstore::ObjectGet& g) { gets.push_back(g); });
  std::uint64_t req_pos = 0, resp_pos = 0;
  auto request = [&](const std::string& s, std::uint64_t t) {
    http.on_piece(objstore::Direction::kRequest, req_pos, s.size(), bytes_of(s), t, 1);
    req_pos += s.size();
  };
  auto response = [&](const std::string& s, std::uint64_t t, std::uint64_t length = 0) {
    const std::uint64_t n = length ? length : s.size();
    http.on_piece(objstore::Direction::kResponse, resp_pos, n, bytes_of(s), t, 1);
    resp_pos += n;
  };
  request("GET /b/k HTTP/1.1\r\nHost: s3\r\n\r\n", 1);
  // Content-Length beyond 2^64 and a 2 GiB chunk size: a malformed head, never a huge count.
  response("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\nabc", 2);
  request("GET /b/k2 HTTP/1.1\r\nHost: s3\r\n\r\n", 3);
  response("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n80000000\r\nabc", 4);
  // A header block over the 32 KiB limit.
  request("GET /b/k3 HTTP/1.1\r\nHost: s3\r\nX-Big: " + std::string(40000, 'h') + "\r\n\r\n", 5);
  response(std::string(64, '\xff') + "\r\n\r\n", 6);
  // A 2 GiB body announced and only its first bytes seen (the rest a hole): counted as declared
  // only when it arrives; closing mid-body leaves it incomplete.
  request("GET /b/k4 HTTP/1.1\r\nHost: s3\r\n\r\n", 7);
  response("HTTP/1.1 200 OK\r\nContent-Length: 2147483648\r\n\r\n", 8);
  response("", 9, 1 << 20);  // 1 MiB of body in a hole
  http.close(10);
  std::uint64_t total = 0;
  for (const auto& g : gets) total += g.billable_bytes();
  // At most what was really moved on the connection can be counted.
  CHECK(total <= resp_pos);
  for (const auto& g : gets)
    if (g.target.key == "k4") CHECK_FALSE(g.complete);
}

TEST_CASE("sanitize_label: every cap and encoding edge") {
  CHECK(sensors::sanitize_label(std::string(300, 'a')).size() == 255);
  // A 4-byte character straddling the cap is dropped whole, never split.
  std::string s(253, 'a');
  s += "\xf0\x9f\x98\x80";
  CHECK(sensors::sanitize_label(s) == std::string(253, 'a'));
  CHECK(sensors::sanitize_label("\xed\xa0\x80") == "???");   // a UTF-16 surrogate
  CHECK(sensors::sanitize_label("a\x7f\xc2\x85") == "a__");  // DEL and C1 NEL
  CHECK(sensors::sanitize_label("") == "");
}

TEST_CASE("mangled configs never crash: every byte flip is accepted or refused naming a field") {
  const std::string good = R"({"listen": "127.0.0.1:9464", "targets": {"pids": [1]},
    "kafka_ports": [9092], "object_store": {"ports": [443], "cidrs": ["10.0.0.0/8"]},
    "sensors": {"max_sensors": 100, "idle_expiry_seconds": 60},
    "capture": {"ring_kib_per_cpu": 64, "capture_bytes": 4096},
    "audit_log": {"path": "/tmp/a", "max_bytes": 100000, "keep": 2},
    "budgets": {"limits": [{"client_id": "x", "per_hour": 1}], "window_seconds": 60}})";
  REQUIRE(daemon::parse_config(good));
  int refused = 0;
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (char flip : {'\0', '"', '-', '9', '{', 'x'}) {
      std::string bad = good;
      bad[i] = flip;
      auto r = daemon::parse_config(bad);
      if (r) continue;
      ++refused;
      const std::string& m = r.error().message;
      CHECK_MESSAGE(
          (m.rfind("config field \"", 0) == 0 || m.rfind("config is not valid JSON", 0) == 0), m);
    }
  }
  CHECK(refused > 0);
}

TEST_CASE("a connection first seen mid-stream: UTF-8 and invalid client-ids are found again") {
  // With the sock tracepoints every connection is first seen through data, so the decoder
  // resynchronises on the first plausible header. Non-ASCII client ids must not make it
  // implausible.
  for (std::string client : {std::string("ünï€😀-client"), std::string("bad\xff\xfe\xc0\x80utf8"),
                             std::string("plain")}) {
    Collect sink;
    kafka::Decoder decoder(sink);  // no open(): mid-stream
    const auto req = fetch_v4(client, "scan", 3, 5);
    decoder.data(1, kafka::Direction::kRequest, 1, 0, req.size(), req);
    decoder.close(1, 2);
    REQUIRE(sink.exchanges.size() == 1);
    CHECK(sink.exchanges[0].client_id == client);
  }
  // Control characters stay implausible there (a resync must not lock onto random bytes): such a
  // request is skipped, its reads go to __unattributed__.
  Collect sink;
  kafka::Decoder decoder(sink);
  const auto req = fetch_v4("line1\nline2", "scan", 3, 5);
  decoder.data(1, kafka::Direction::kRequest, 1, 0, req.size(), req);
  decoder.close(1, 2);
  CHECK(sink.exchanges.empty());
}

TEST_CASE("ledger and audit log: invalid UTF-8 and 32 KiB client-ids are stored sanitized") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("fc_rel_ledger_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto ledger = exporter::Ledger::open(dir.string());
  REQUIRE(ledger);
  std::string client = "bad\xff" + std::string(32767, 'c');
  exporter::LedgerKey key{0, client, "g\x01", "scan", "exact"};
  (*ledger)->add(3600 * 10, key, {10, 1, 0, 0.1, 0});
  (*ledger)->add(3600 * 10, key, {5, 1, 1, 0.1, 0});
  REQUIRE((*ledger)->save());  // threw on invalid UTF-8 before: fetchcostd died at the next save
  auto again = exporter::Ledger::open(dir.string());
  REQUIRE(again);
  const auto rows = (*again)->query(0, 1LL << 40);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].first.client_id == sensors::sanitize_label(client));
  CHECK(rows[0].first.group_id == "g_");
  CHECK(rows[0].second.bytes == 15);
  CHECK(rows[0].second.errors == 1);

  auto audit = exporter::AuditLog::open((dir / "audit.jsonl").string(), 1 << 20, 1);
  REQUIRE(audit);
  exporter::AuditRecord r;
  r.client_id = client;
  r.topic = "scan";
  r.method = "exact";
  (*audit)->write(r);
  const auto recent = (*audit)->recent("", 10);
  REQUIRE(recent.size() == 1);
  CHECK(recent[0].client_id.size() <= sensors::kMaxLabelBytes);
  CHECK(recent[0].client_id == sensors::sanitize_label(client));
  std::filesystem::remove_all(dir);
}
