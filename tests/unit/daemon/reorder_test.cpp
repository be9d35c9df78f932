#include "daemon/reorder.h"

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

namespace {

using fc::capture::EventView;

// What a delivered record said, copied out of the window's memory.
struct Seen {
  std::uint64_t time_ns = 0;
  std::uint16_t kind = 0;
  std::uint64_t conn_id = 0;
  bool folded = false;
  std::string payload;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> segments;
  std::uint16_t local_port = 0;
};

fc_data_event data_record(std::uint64_t time_ns, std::uint64_t conn_id) {
  fc_data_event d{};
  d.c.timestamp_ns = time_ns;
  d.c.kind = FC_EVENT_DATA;
  d.c.conn_id = conn_id;
  return d;
}

std::vector<Seen> release(fc::daemon::ReorderWindow& w, std::uint64_t before_ns) {
  std::vector<Seen> out;
  w.release(before_ns, [&](const EventView& v) {
    Seen s;
    s.time_ns = v.common.timestamp_ns;
    s.kind = v.common.kind;
    s.conn_id = v.common.conn_id;
    s.folded = v.folded;
    s.payload.assign(v.payload.begin(), v.payload.end());
    for (const auto& seg : v.segments) s.segments.emplace_back(seg.offset, seg.length);
    if (v.conn) s.local_port = v.conn->local_port;
    CHECK(((v.data != nullptr) != (v.conn != nullptr)));
    out.push_back(s);
  });
  return out;
}

}  // namespace

TEST_CASE("records come out by timestamp, ties in arrival order, only once they are due") {
  fc::daemon::ReorderWindow w;
  // Two CPU rings interleaved: times 30, 10, 20, 10 (the second 10 arrived later).
  const std::uint64_t times[] = {30, 10, 20, 10};
  for (std::size_t i = 0; i < 4; ++i) {
    fc_data_event d = data_record(times[i], 100 + i);
    const std::string payload = "payload-" + std::to_string(i);
    d.captured = static_cast<fc_u32>(payload.size());
    d.nsegs = 1;
    d.segs[0] = {0, d.captured};
    EventView v{d.c};
    v.data = &d;
    v.payload = {reinterpret_cast<const std::uint8_t*>(payload.data()), payload.size()};
    v.segments = {d.segs, 1};
    w.hold(v);  // the caller's memory is reused right after (as the ring's is)
  }
  fc_conn_event c{};
  c.c.timestamp_ns = 15;
  c.c.kind = FC_EVENT_CONNECT;
  c.local_port = 9092;
  EventView cv{c.c};
  cv.conn = &c;
  w.hold(cv);
  EventView nothing{c.c};  // neither data nor a connection: not held
  w.hold(nothing);
  CHECK(w.held() == 5);

  auto first = release(w, 20);  // due: strictly before 20
  REQUIRE(first.size() == 3);
  CHECK(first[0].conn_id == 101);
  CHECK(first[1].conn_id == 103);
  CHECK(first[2].kind == FC_EVENT_CONNECT);
  CHECK(first[2].local_port == 9092);
  CHECK(first[0].payload == "payload-1");
  CHECK(first[1].payload == "payload-3");
  CHECK(first[0].segments == std::vector<std::pair<std::uint32_t, std::uint32_t>>{{0, 9}});
  CHECK(w.held() == 2);

  // A late record older than what is held still goes before it.
  fc_data_event late = data_record(25, 200);
  late.length = 7;
  EventView lv{late.c};
  lv.data = &late;
  lv.folded = true;
  w.hold(lv);
  auto rest = release(w, ~0ull);
  REQUIRE(rest.size() == 3);
  CHECK(rest[0].conn_id == 102);
  CHECK(rest[1].conn_id == 200);
  CHECK(rest[1].folded);
  CHECK(rest[1].payload.empty());
  CHECK(rest[2].conn_id == 100);
  CHECK(w.held() == 0);
}

TEST_CASE("the window's memory is reused once its records are handed on") {
  fc::daemon::ReorderWindow w;
  std::vector<std::uint8_t> big(FC_MAX_CAPTURE, 0x5a);
  std::uint64_t t = 0;
  std::size_t delivered = 0;
  std::size_t max_chunks = 0;
  // 200 rounds of 40 full-size records (~650 KiB), each round released but for the last 10.
  for (int round = 0; round < 200; ++round) {
    for (int i = 0; i < 40; ++i) {
      fc_data_event d = data_record(++t, 1);
      d.captured = FC_MAX_CAPTURE;
      d.nsegs = 1;
      d.segs[0] = {0, FC_MAX_CAPTURE};
      EventView v{d.c};
      v.data = &d;
      v.payload = big;
      v.segments = {d.segs, 1};
      w.hold(v);
    }
    w.release(t - 9, [&](const EventView& v) {
      CHECK(v.payload.size() == FC_MAX_CAPTURE);
      CHECK(v.payload[FC_MAX_CAPTURE - 1] == 0x5a);
      ++delivered;
    });
    max_chunks = std::max(max_chunks, w.chunks());
  }
  CHECK(w.held() == 10);
  CHECK(delivered == 200 * 40 - 10);
  // ~850 KiB held at most: a handful of 256 KiB chunks, not one per round.
  CHECK(max_chunks <= 8);
}

TEST_CASE("a release of at most N records goes on where it stopped, in order") {
  fc::daemon::ReorderWindow w;
  // 10 records at times 10..1 (reverse arrival) plus one not due yet.
  for (std::uint64_t t = 10; t >= 1; --t) {
    fc_data_event d = data_record(t, 1000 + t);
    EventView v{d.c};
    v.data = &d;
    w.hold(v);
  }
  fc_data_event later = data_record(50, 2000);
  EventView lv{later.c};
  lv.data = &later;
  w.hold(lv);

  std::vector<std::uint64_t> order;
  const auto take = [&](const EventView& v) { order.push_back(v.common.timestamp_ns); };
  CHECK(w.release(20, take, 4));  // 4 handed on, 6 still due
  CHECK(order == std::vector<std::uint64_t>{1, 2, 3, 4});
  // A record that arrives in between and is older than what is still held goes first.
  fc_data_event late = data_record(5, 3000);
  EventView late_view{late.c};
  late_view.data = &late;
  w.hold(late_view);
  CHECK(w.release(20, take, 4));
  CHECK_FALSE(w.release(20, take, 4));  // the last 3 due: nothing due is left
  CHECK(order == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 10});
  CHECK(w.held() == 1);  // the record at 50
  CHECK_FALSE(w.release(20, take));
  CHECK(w.held() == 1);
}

TEST_CASE("rings read in bursts, released in slices: one stable sort of every record") {
  // Four CPU rings, each in time order, read in bursts of random length and order, released in
  // slices of random size up to what no ring can still undercut (the oldest ring's last time):
  // what comes out is every record sorted by time, ties in arrival order.
  fc::daemon::ReorderWindow w;
  std::uint64_t seed = 12345;
  const auto next = [&seed](std::uint64_t n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return (seed >> 33) % n;
  };
  std::uint64_t ring_time[4] = {0, 0, 0, 0};
  std::vector<std::pair<std::uint64_t, std::uint64_t>> held;  // (time, arrival)
  std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
  const auto take = [&](const EventView& v) {
    out.emplace_back(v.common.timestamp_ns, v.common.conn_id);
  };
  std::uint64_t arrival = 0;
  for (int round = 0; round < 2000; ++round) {
    const std::size_t ring = next(4);
    for (std::uint64_t n = next(12); n > 0; --n) {
      ring_time[ring] += next(3);  // ties within and across rings
      fc_data_event d = data_record(ring_time[ring], arrival);
      EventView v{d.c};
      v.data = &d;
      w.hold(v);
      held.emplace_back(ring_time[ring], arrival++);
    }
    w.release(*std::min_element(ring_time, ring_time + 4), take, 1 + next(8));
  }
  w.release(~0ull, take);
  std::stable_sort(held.begin(), held.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  REQUIRE(held.size() > 10'000);
  CHECK(out == held);
}
