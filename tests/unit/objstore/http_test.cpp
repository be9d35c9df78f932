#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "objstore/objstore.h"

using fc::objstore::Direction;
using fc::objstore::HttpConnection;
using fc::objstore::ObjectGet;

namespace {

std::string read_fixture(const std::string& name) {
  std::ifstream in(std::string(FC_OBJSTORE_FIXTURES) + "/" + name, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "missing fixture " << name);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

struct Expected {
  std::string method;
  int status;
  std::uint64_t bytes;
};

// curl's own report of each request (record.sh): the independent ground truth.
std::vector<Expected> read_expected(const std::string& name) {
  std::istringstream in(read_fixture(name));
  std::vector<Expected> out;
  Expected e;
  while (in >> e.method >> e.status >> e.bytes) out.push_back(e);
  return out;
}

std::span<const std::uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// Feeds one direction as pieces of `piece` bytes of which the first `captured` are copied.
void feed(HttpConnection& connection, Direction direction, std::string_view data, std::size_t piece,
          std::size_t captured, std::uint64_t timestamp_ns = 0, std::uint32_t thread_id = 0) {
  for (std::size_t position = 0; position < data.size(); position += piece) {
    const std::string_view chunk = data.substr(position, piece);
    connection.on_piece(direction, position, chunk.size(),
                        bytes(chunk.substr(0, std::min(captured, chunk.size()))), timestamp_ns,
                        thread_id);
  }
}

struct Collected {
  std::vector<ObjectGet> gets;
  fc::objstore::ObjectGetCallback callback() {
    return [this](const ObjectGet& get) { gets.push_back(get); };
  }
};

const fc::objstore::AivenLayout kAiven;

void check_against_curl(const std::vector<ObjectGet>& gets, const std::vector<Expected>& expected) {
  REQUIRE(gets.size() == expected.size());
  for (std::size_t i = 0; i < gets.size(); ++i) {
    INFO("exchange " << i);
    CHECK(gets[i].http_method == expected[i].method);
    CHECK(gets[i].status == expected[i].status);
    CHECK(gets[i].body_bytes == expected[i].bytes);
    CHECK(gets[i].complete);
  }
}

constexpr const char* kChunkedResponse =
    "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
    "4\r\nWiki\r\n5;name=value\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-Trailer: 1\r\n\r\n"
    "HTTP/1.1 503 Slow Down\r\nContent-Length: 5\r\n\r\nslow!";

}  // namespace

TEST_CASE("s3rver keep-alive connection: every exchange matches curl's own report") {
  const std::string request = read_fixture("s3rver-keepalive.request");
  const std::string response = read_fixture("s3rver-keepalive.response");
  const auto expected = read_expected("s3rver-keepalive.expected");
  Collected out;
  HttpConnection connection(42, &kAiven, {}, out.callback());
  // All requests before any response: the pipelined order.
  feed(connection, Direction::kRequest, request, 1 << 20, 1 << 20, 1000, 7);
  feed(connection, Direction::kResponse, response, 1 << 20, 1 << 20, 2000, 7);
  check_against_curl(out.gets, expected);
  const ObjectGet& first = out.gets[0];
  CHECK(first.connection == 42);
  CHECK(first.thread_id == 7);
  CHECK(first.target.provider == fc::objstore::Provider::kS3PathStyle);
  CHECK(first.target.bucket == "tiered");
  REQUIRE(first.key_fields.parsed);
  CHECK(first.key_fields.topic == "click-stream-v2");
  CHECK(first.key_fields.topic_id == "gT5bX0YqRkOyQ3uLm9a_Aw");
  CHECK(first.key_fields.partition == 3);
  CHECK(first.key_fields.base_offset == 4096);
  REQUIRE(first.range);
  CHECK(first.range->first == 0u);
  CHECK(first.range->last == 65535u);
  CHECK(first.content_length == 65536u);
  CHECK(first.billable_bytes() == 65536);
  // 404 and 416 are requests and errors, never bytes.
  CHECK(out.gets[4].billable_bytes() == 0);
  CHECK(out.gets[5].billable_bytes() == 0);
  CHECK_FALSE(out.gets[4].succeeded());
  CHECK(connection.stats().resyncs == 0);
}

TEST_CASE("s3rver bytes in 16 KiB reads with only a prefix captured: nothing is invented") {
  const std::string request = read_fixture("s3rver-keepalive.request");
  const std::string response = read_fixture("s3rver-keepalive.response");
  const auto expected = read_expected("s3rver-keepalive.expected");
  for (std::size_t capture : {512u, 4096u}) {
    INFO("capture " << capture << " bytes of each 16 KiB read");
    Collected out;
    HttpConnection connection(1, &kAiven, {}, out.callback());
    feed(connection, Direction::kRequest, request, 1 << 20, 1 << 20);
    // Heads that fall inside an uncaptured part are lost; the parser resyncs on the next
    // captured status line and pairs 206s by Content-Range, so what it reports stays true.
    feed(connection, Direction::kResponse, response, 16384, capture);
    connection.close(0);
    CHECK(out.gets.size() == expected.size());  // every request is reported once
    for (std::size_t i = 0; i < out.gets.size() && i < expected.size(); ++i) {
      const auto& get = out.gets[i];
      INFO("exchange " << i);
      CHECK(get.http_method == expected[i].method);
      if (get.status != 0 && get.complete) {
        CHECK(get.status == expected[i].status);
        CHECK(get.body_bytes == expected[i].bytes);
      }
    }
    std::size_t exact = 0;
    for (std::size_t i = 0; i < out.gets.size() && i < expected.size(); ++i) {
      exact += out.gets[i].complete && out.gets[i].status == expected[i].status &&
               out.gets[i].body_bytes == expected[i].bytes;
    }
    MESSAGE("capture " << capture << ": " << exact << " of " << expected.size()
                       << " exchanges decoded exactly, resyncs " << connection.stats().resyncs);
    CHECK(out.gets[0].body_bytes == expected[0].bytes);  // the first head starts a read
  }
}

TEST_CASE("holes only in bodies: every exchange still matches curl") {
  const std::string request = read_fixture("s3rver-keepalive.request");
  const std::string response = read_fixture("s3rver-keepalive.response");
  const auto expected = read_expected("s3rver-keepalive.expected");
  // Pieces that follow message boundaries: each head captured, each body only 10 bytes.
  Collected out;
  HttpConnection connection(1, &kAiven, {}, out.callback());
  feed(connection, Direction::kRequest, request, 1 << 20, 1 << 20);
  std::size_t position = 0;
  for (const auto& e : expected) {
    const std::size_t head_end = response.find("\r\n\r\n", position) + 4;
    connection.on_piece(Direction::kResponse, position, head_end - position,
                        bytes(std::string_view(response).substr(position, head_end - position)), 10,
                        1);
    position = head_end;
    if (e.bytes > 0) {
      connection.on_piece(Direction::kResponse, position, e.bytes,
                          bytes(std::string_view(response).substr(position, 10)), 20, 1);
      position += e.bytes;
    }
  }
  REQUIRE(position == response.size());
  check_against_curl(out.gets, expected);
  CHECK(out.gets[0].response_start_ns == 10);
  CHECK(out.gets[0].response_end_ns == 20);
}

TEST_CASE("split at every byte boundary: same exchanges") {
  const std::string request = read_fixture("s3rver-keepalive.request");
  const std::string response_all = read_fixture("s3rver-keepalive.response");
  const auto expected_all = read_expected("s3rver-keepalive.expected");
  // The last four exchanges (HEAD, 404, 416, a 100-byte range) keep this quadratic test small;
  // their offsets come from curl's sizes and the end of each head.
  std::size_t response_start = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    response_start = response_all.find("\r\n\r\n", response_start) + 4 + expected_all[i].bytes;
  }
  std::size_t request_start = 0;
  for (std::size_t i = 0; i < 3; ++i) request_start = request.find("\r\n\r\n", request_start) + 4;
  const std::string_view requests = std::string_view(request).substr(request_start);
  const std::string_view responses = std::string_view(response_all).substr(response_start);
  const std::vector<Expected> expected(expected_all.begin() + 3, expected_all.end());
  for (std::size_t split = 1; split < responses.size(); ++split) {
    Collected out;
    HttpConnection connection(1, &kAiven, {}, out.callback());
    const std::size_t request_split = std::min(split, requests.size() - 1);
    connection.on_piece(Direction::kRequest, 0, request_split,
                        bytes(requests.substr(0, request_split)), 0, 0);
    connection.on_piece(Direction::kResponse, 0, split, bytes(responses.substr(0, split)), 0, 0);
    connection.on_piece(Direction::kRequest, request_split, requests.size() - request_split,
                        bytes(requests.substr(request_split)), 0, 0);
    connection.on_piece(Direction::kResponse, split, responses.size() - split,
                        bytes(responses.substr(split)), 0, 0);
    INFO("split at " << split);
    REQUIRE(out.gets.size() == expected.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      CHECK(out.gets[i].status == expected[i].status);
      CHECK(out.gets[i].body_bytes == expected[i].bytes);
    }
  }
  // And one byte at a time, alternating directions.
  Collected out;
  HttpConnection connection(1, &kAiven, {}, out.callback());
  for (std::size_t i = 0; i < std::max(requests.size(), responses.size()); ++i) {
    if (i < requests.size())
      connection.on_piece(Direction::kRequest, i, 1, bytes(requests.substr(i, 1)), 0, 0);
    if (i < responses.size())
      connection.on_piece(Direction::kResponse, i, 1, bytes(responses.substr(i, 1)), 0, 0);
  }
  check_against_curl(out.gets, expected);
}

TEST_CASE("chunked bodies are counted decoded, at every split, and with holes in chunk data") {
  const std::string_view requests =
      "GET /b/k1 HTTP/1.1\r\nHost: s3.amazonaws.com\r\n\r\n"
      "GET /b/k2 HTTP/1.1\r\nHost: s3.amazonaws.com\r\n\r\n";
  const std::string_view responses = kChunkedResponse;
  for (std::size_t split = 0; split <= responses.size(); ++split) {
    Collected out;
    HttpConnection connection(1, nullptr, {}, out.callback());
    connection.on_piece(Direction::kRequest, 0, requests.size(), bytes(requests), 0, 0);
    if (split > 0)
      connection.on_piece(Direction::kResponse, 0, split, bytes(responses.substr(0, split)), 0, 0);
    if (split < responses.size()) {
      connection.on_piece(Direction::kResponse, split, responses.size() - split,
                          bytes(responses.substr(split)), 0, 0);
    }
    INFO("split at " << split);
    REQUIRE(out.gets.size() == 2);
    CHECK(out.gets[0].status == 200);
    CHECK(out.gets[0].body_bytes == 4 + 5 + 14);
    CHECK(out.gets[0].complete);
    CHECK(out.gets[0].target.key == "k1");
    CHECK(out.gets[1].status == 503);
    CHECK(out.gets[1].body_bytes == 5);
    CHECK(out.gets[1].billable_bytes() == 0);
  }
  // A 1 MiB chunk of which 100 bytes were captured.
  const std::string head =
      "HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n";
  Collected out;
  HttpConnection connection(1, nullptr, {}, out.callback());
  connection.on_piece(Direction::kRequest, 0, requests.size() / 2,
                      bytes(requests.substr(0, requests.size() / 2)), 0, 0);
  std::string piece = head + std::string(100, 'x');
  connection.on_piece(Direction::kResponse, 0, head.size() + 0x100000, bytes(piece), 0, 0);
  const std::string tail = "\r\n0\r\n\r\n";
  connection.on_piece(Direction::kResponse, head.size() + 0x100000, tail.size(), bytes(tail), 0, 0);
  REQUIRE(out.gets.size() == 1);
  CHECK(out.gets[0].body_bytes == 0x100000);
  CHECK(out.gets[0].complete);
}

TEST_CASE("a hole over a response head: that exchange is lost, the next ones resync") {
  const std::string_view requests =
      "GET /b/a HTTP/1.1\r\nHost: h\r\n\r\nGET /b/b HTTP/1.1\r\nHost: h\r\n\r\n"
      "GET /b/c HTTP/1.1\r\nHost: h\r\n\r\n";
  const std::string r1 = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc";
  const std::string r2 = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcd";
  const std::string r3 = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabcde";
  Collected out;
  HttpConnection connection(1, nullptr, {}, out.callback());
  connection.on_piece(Direction::kRequest, 0, requests.size(), bytes(requests), 0, 0);
  connection.on_piece(Direction::kResponse, 0, r1.size(), bytes(r1), 0, 0);
  connection.on_piece(Direction::kResponse, r1.size(), r2.size(), {}, 0, 0);  // lost event
  connection.on_piece(Direction::kResponse, r1.size() + r2.size(), r3.size(), bytes(r3), 0, 0);
  REQUIRE(out.gets.size() == 2);
  CHECK(out.gets[0].body_bytes == 3);
  CHECK(out.gets[1].status == 200);
  CHECK(out.gets[1].body_bytes == 5);
  CHECK(connection.stats().resyncs == 1);
}

TEST_CASE("GCS JSON and Azure requests, pipelined, with x-ms-range") {
  const std::string_view requests =
      "GET /download/storage/v1/b/bkt/o/p%2Ft-AAAAAAAAAAAAAAAAAAAAAA%2F1%2F00000000000000000100-"
      "BBBBBBBBBBBBBBBBBBBBBB.log?alt=media HTTP/1.1\r\nHost: storage.googleapis.com\r\n"
      "Range: bytes=0-9\r\n\r\n"
      "GET /cont/t-AAAAAAAAAAAAAAAAAAAAAA/2/00000000000000000200-BBBBBBBBBBBBBBBBBBBBBB.log "
      "HTTP/1.1\r\nHost: acct.blob.core.windows.net\r\nx-ms-range: bytes=10-19\r\n"
      "Range: bytes=0-0\r\nx-ms-version: 2021-08-06\r\n\r\n";
  const std::string_view responses =
      "HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\n0123456789"
      "HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\n0123456789";
  Collected out;
  HttpConnection connection(1, &kAiven, {}, out.callback());
  connection.on_piece(Direction::kRequest, 0, requests.size(), bytes(requests), 5, 11);
  connection.on_piece(Direction::kResponse, 0, responses.size(), bytes(responses), 6, 12);
  REQUIRE(out.gets.size() == 2);
  CHECK(out.gets[0].target.provider == fc::objstore::Provider::kGcsJson);
  CHECK(out.gets[0].key_fields.partition == 1);
  CHECK(out.gets[0].key_fields.base_offset == 100);
  CHECK(out.gets[0].range->last == 9u);
  CHECK(out.gets[1].target.provider == fc::objstore::Provider::kAzureBlob);
  CHECK(out.gets[1].target.bucket == "cont");
  CHECK(out.gets[1].key_fields.partition == 2);
  CHECK(out.gets[1].range->first == 10u);  // x-ms-range wins
  CHECK(out.gets[1].thread_id == 11);
  CHECK(out.gets[1].request_ns == 5);
  CHECK(out.gets[1].response_end_ns == 6);
}

TEST_CASE("close: a body delimited by close completes; unanswered requests count as failed") {
  const std::string_view requests =
      "GET /b/k HTTP/1.0\r\nHost: h\r\n\r\nGET /b/k2 HTTP/1.1\r\nHost: h\r\n\r\n";
  const std::string_view response = "HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nhello world";
  Collected out;
  HttpConnection connection(1, nullptr, {}, out.callback());
  connection.on_piece(Direction::kRequest, 0, requests.size(), bytes(requests), 1, 2);
  connection.on_piece(Direction::kResponse, 0, response.size(), bytes(response), 3, 2);
  CHECK(out.gets.empty());
  connection.close(9);
  REQUIRE(out.gets.size() == 2);
  CHECK(out.gets[0].complete);
  CHECK(out.gets[0].body_bytes == 11);
  CHECK(out.gets[1].status == 0);
  CHECK_FALSE(out.gets[1].complete);
  CHECK(out.gets[1].target.key == "k2");
  CHECK(out.gets[1].billable_bytes() == 0);
}

TEST_CASE("100-continue, HEAD, 204 and a response without a request") {
  const std::string_view requests = "HEAD /b/k HTTP/1.1\r\nHost: h\r\n\r\n";
  const std::string_view responses =
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n"
      "HTTP/1.1 204 No Content\r\n\r\n";
  Collected out;
  HttpConnection connection(1, nullptr, {}, out.callback());
  connection.on_piece(Direction::kRequest, 0, requests.size(), bytes(requests), 0, 0);
  connection.on_piece(Direction::kResponse, 0, responses.size(), bytes(responses), 0, 0);
  REQUIRE(out.gets.size() == 2);
  CHECK(out.gets[0].http_method == "HEAD");
  CHECK(out.gets[0].body_bytes == 0);
  CHECK(out.gets[0].content_length == 5000u);
  CHECK(out.gets[1].http_method.empty());  // capture began after its request
  CHECK(out.gets[1].status == 204);
  CHECK(connection.stats().orphan_responses == 1);
}

TEST_CASE("garbage never crashes and never yields bytes") {
  std::string noise;
  std::uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1103515245 + 12345;
    noise.push_back(static_cast<char>(state >> 16));
    if (i % 997 == 0) noise += "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n";
  }
  Collected out;
  HttpConnection connection(1, nullptr, {}, out.callback());
  feed(connection, Direction::kRequest, noise, 1000, 700);
  feed(connection, Direction::kResponse, noise, 1000, 700);
  connection.close(0);
  std::uint64_t body = 0;
  for (const auto& get : out.gets) body += get.body_bytes;
  CHECK(body <= noise.size());  // never more than what moved
  CHECK(connection.stats().requests == 0);
  CHECK(connection.stats().resyncs > 0);
}

TEST_CASE("206 responses pair with their request by Content-Range") {
  // Capture began after the first request was written: its 206 must not take the second
  // request's identity.
  const std::string_view requests =
      "GET /b/k HTTP/1.1\r\nHost: h\r\nRange: bytes=4194304-8388607\r\n\r\n";
  const std::string_view responses =
      "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 0-4/9000000\r\nContent-Length: 5\r\n"
      "\r\nabcde"
      "HTTP/1.1 206 Partial Content\r\nContent-Range: bytes 4194304-4194309/4194310\r\n"
      "Content-Length: 6\r\n\r\nabcdef";
  Collected out;
  HttpConnection connection(1, nullptr, {}, out.callback());
  connection.on_piece(Direction::kRequest, 0, requests.size(), bytes(requests), 0, 0);
  connection.on_piece(Direction::kResponse, 0, responses.size(), bytes(responses), 0, 0);
  REQUIRE(out.gets.size() == 2);
  CHECK(out.gets[0].http_method.empty());  // unpaired: its request was not seen
  CHECK(out.gets[0].body_bytes == 5);
  CHECK(out.gets[1].http_method == "GET");  // shortened at the object's end, still its answer
  CHECK(out.gets[1].body_bytes == 6);
  CHECK(connection.stats().orphan_responses == 1);
}

TEST_CASE("full s3rver fixture split at every byte of every head and around every body edge") {
  const std::string request = read_fixture("s3rver-keepalive.request");
  const std::string response = read_fixture("s3rver-keepalive.response");
  const auto expected = read_expected("s3rver-keepalive.expected");
  // Split points: every byte of each response head and the 8 bytes around each body's end,
  // located from curl's sizes (independent of the parser).
  std::vector<std::size_t> splits;
  std::size_t position = 0;
  for (const auto& e : expected) {
    const std::size_t head_end = response.find("\r\n\r\n", position) + 4;
    for (std::size_t p = position; p <= head_end; ++p) splits.push_back(p);
    position = head_end + e.bytes;
    for (std::size_t p = position - std::min<std::size_t>(position, 4); p < position + 4; ++p) {
      splits.push_back(p);
    }
  }
  REQUIRE(position == response.size());
  for (std::size_t split : splits) {
    if (split == 0 || split >= response.size()) continue;
    Collected out;
    HttpConnection connection(1, &kAiven, {}, out.callback());
    connection.on_piece(Direction::kRequest, 0, request.size(), bytes(request), 0, 0);
    const std::string_view all = response;
    connection.on_piece(Direction::kResponse, 0, split, bytes(all.substr(0, split)), 0, 0);
    connection.on_piece(Direction::kResponse, split, all.size() - split, bytes(all.substr(split)),
                        0, 0);
    INFO("split at " << split);
    check_against_curl(out.gets, expected);
  }
}

TEST_CASE("forget_retried: only unanswered requests of the same thread, object and range") {
  using fc::objstore::ByteRange;
  using fc::objstore::Direction;
  using fc::objstore::HttpConnection;
  using fc::objstore::ObjectGet;
  std::vector<ObjectGet> gets;
  HttpConnection conn(1, nullptr, {}, [&](const ObjectGet& g) { gets.push_back(g); });
  const std::string requests =
      "GET /b/k HTTP/1.1\r\nHost: s3\r\nRange: bytes=0-9\r\n\r\n"
      "GET /b/k HTTP/1.1\r\nHost: s3\r\nRange: bytes=10-19\r\n\r\n";
  conn.on_piece(Direction::kRequest, 0, requests.size(),
                {reinterpret_cast<const std::uint8_t*>(requests.data()), requests.size()}, 10, 5);
  ObjectGet retry;
  retry.status = 206;
  retry.http_method = "GET";
  retry.thread_id = 5;
  retry.request_ns = 20;
  retry.target.bucket = "b";
  retry.target.key = "k";
  retry.range = ByteRange{0, 9, std::nullopt};
  ObjectGet other_thread = retry;
  other_thread.thread_id = 6;
  CHECK(conn.forget_retried(other_thread) == 0);
  ObjectGet earlier = retry;
  earlier.request_ns = 5;  // written before the request: not a retry of it
  CHECK(conn.forget_retried(earlier) == 0);
  CHECK(conn.forget_retried(retry) == 1);
  CHECK(conn.stats().retried_requests == 1);
  conn.close(30);
  REQUIRE(gets.size() == 1);  // only the 10-19 request is reported unanswered
  CHECK(gets[0].status == 0);
  CHECK(gets[0].range->first == 10u);
}

TEST_CASE("a request is announced when its head is read, with its key's fields, before its GET") {
  std::vector<std::string> order;
  std::vector<ObjectGet> announced;
  fc::objstore::AivenLayout layout;
  HttpConnection connection(
      7, &layout, {}, [&](const ObjectGet&) { order.push_back("get"); },
      [&](const ObjectGet& request) {
        order.push_back("request");
        announced.push_back(request);
      });
  const std::string request =
      "GET /bucket/orders-VEXPLK2UScKmEBdguDB90A/3/00000000000000001200-m6wceF6nCjpqGq8g8MgkxQ.log "
      "HTTP/1.1\r\nHost: s3:4568\r\nRange: bytes=0-99\r\n\r\n";
  feed(connection, Direction::kRequest, request.substr(0, 40), 40, 40, 100, 31);
  CHECK(announced.empty());  // the head is not complete yet
  connection.on_piece(Direction::kRequest, 40, request.size() - 40, bytes(request.substr(40)), 101,
                      31);
  REQUIRE(announced.size() == 1);
  CHECK(announced[0].connection == 7);
  CHECK(announced[0].http_method == "GET");
  CHECK(announced[0].request_ns == 100);
  CHECK(announced[0].thread_id == 31);
  CHECK(announced[0].status == 0);
  CHECK(announced[0].key_fields.parsed);
  CHECK(announced[0].key_fields.topic == "orders");
  CHECK(announced[0].key_fields.partition == 3);
  CHECK(announced[0].key_fields.base_offset == 1200);
  REQUIRE(announced[0].range);
  CHECK(*announced[0].range->first == 0);
  const std::string response =
      "HTTP/1.1 206 Partial Content\r\nContent-Length: 100\r\nContent-Range: bytes "
      "0-99/500\r\n\r\n" +
      std::string(100, 'x');
  feed(connection, Direction::kResponse, response, response.size(), response.size(), 200);
  CHECK(order == std::vector<std::string>{"request", "get"});
}
