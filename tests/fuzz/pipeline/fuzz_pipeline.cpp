// libFuzzer: random capture streams → pipeline::Pipeline (Kafka decoder, object-store HTTP and
// TLS estimation, attribution, cost, sensors) the way fetchcostd feeds it.
// Input: [flags u8][Kafka request len u16][Kafka response len u16][HTTP request len u16]
//        [Kafka requests][Kafka responses][HTTP requests][HTTP responses]
// Four streams on two connections (a client's Kafka connection, an object-store connection that
// is plain HTTP or, with flag 1, opaque TLS), cut into pieces with holes and interleaved in the
// order a remote fetch happens: request, GET, answer, response. Then connections close, time
// jumps (expiry), and the totals must reconcile: the sensors hold exactly what attribution saw.
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>

#include "pipeline/pipeline.h"

namespace {

struct Stream {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t at = 0;
  std::uint64_t pos = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 7) return 0;
  const std::uint8_t flags = data[0];
  std::size_t lens[3] = {static_cast<std::size_t>(data[1]) << 8 | data[2],
                         static_cast<std::size_t>(data[3]) << 8 | data[4],
                         static_cast<std::size_t>(data[5]) << 8 | data[6]};
  data += 7;
  size -= 7;
  Stream s[4];
  std::size_t off = 0;
  for (int i = 0; i < 3; ++i) {
    const std::size_t n = std::min(lens[i], size - off);
    s[i] = {data + off, n};
    off += n;
  }
  s[3] = {data + off, size - off};

  fc::sensors::SensorTable sensors(fc::sensors::Config{.max_sensors = 8});
  fc::pipeline::PipelineConfig config;
  config.kafka_ports = {9092};
  config.object_store_ports = {(flags & 1) ? std::uint16_t{443} : std::uint16_t{9000}};
  auto created = fc::pipeline::Pipeline::create(config, fc::cost::PriceTable{}, sensors, nullptr,
                                                nullptr, nullptr);
  if (!created) __builtin_trap();
  fc::pipeline::Pipeline& p = **created;
  std::minstd_rand rng(flags * 7919u + static_cast<unsigned>(size));
  std::uint64_t time = 1'000'000;
  const std::uint64_t kafka = 1, store = 2;
  if (!(flags & 2)) {
    p.open(kafka, time, 9092, 50000, "127.0.0.1");
    p.open(store, time, 40000, config.object_store_ports[0], "127.0.0.1");
  } else {  // found running: first seen mid-stream
    p.describe(kafka, 9092, 50000, "127.0.0.1");
    p.describe(store, 40000, config.object_store_ports[0], "127.0.0.1");
  }
  // stream index → (connection, towards the broker, thread)
  const std::uint64_t conn_of[4] = {kafka, kafka, store, store};
  const bool to_broker[4] = {true, false, false, true};
  const char* thread_name[4] = {"data-plane-kafk", "data-plane-kafk", "remote-log-read",
                                "remote-log-read"};
  auto deliver = [&](int i) {
    Stream& st = s[i];
    if (st.at >= st.size) return false;
    const std::size_t max = (flags & 4) ? 8 : 32 + rng() % 1500;
    const std::size_t len = std::min<std::size_t>(st.size - st.at, 1 + rng() % max);
    const std::size_t captured = (rng() % 8 == 0) ? rng() % (len + 1) : len;
    const fc::pipeline::Segment seg{st.pos,
                                    std::span<const std::uint8_t>(st.data + st.at, captured)};
    fc::pipeline::Piece piece;
    piece.connection = conn_of[i];
    piece.to_target = to_broker[i];
    piece.time_ns = time;
    time += 1 + rng() % 2'000'000;
    piece.thread_id = i < 2 ? 10 : 20 + (flags & 8 ? rng() % 2 : 0);
    piece.thread_name = thread_name[i];
    piece.position = st.pos;
    piece.length = len;
    piece.captured = std::span<const fc::pipeline::Segment>(&seg, captured ? 1 : 0);
    p.piece(piece);
    st.pos += len;
    st.at += len;
    return true;
  };
  bool more = true;
  while (more) {
    more = false;
    for (int i = 0; i < 4; ++i) more |= deliver(i);
    if (rng() % 32 == 0) p.tick(time);
    if ((flags & 16) && rng() % 64 == 0) {
      p.close(store, time);
      p.open(store, time, 40001, config.object_store_ports[0], "127.0.0.1");
      s[2].pos = s[3].pos = 0;  // a new connection starts at 0
    }
  }
  p.close(kafka, time);
  p.close(store, time);
  p.tick(time + 600'000'000'000ull);
  p.finish(time + 600'000'000'001ull);
  // Every attributed or unattributed read is in the sensors (live or folded into __other__).
  const auto& a = p.attribution_counters();
  const auto totals = sensors.totals();
  if (totals.requests < a.reads_exact + a.reads_estimated + a.reads_unattributed) {
    // Reads count GETs; a read may carry several requests but never fewer than one.
    __builtin_trap();
  }
  if (totals.errors > totals.requests) __builtin_trap();
  return 0;
}
