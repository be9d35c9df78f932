#include "stream/stream.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

using fc::stream::ByteStream;
using fc::stream::Limits;

namespace {

std::span<const std::uint8_t> bytes(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// Reads everything resolved, rendering holes as '#'.
std::string drain(ByteStream& s) {
  std::string out;
  for (;;) {
    auto v = s.view();
    if (v.hole) {
      out.append(v.hole, '#');
      s.advance(v.hole);
    } else if (!v.data.empty()) {
      out.append(reinterpret_cast<const char*>(v.data.data()), v.data.size());
      s.advance(v.data.size());
    } else {
      return out;
    }
  }
}

}  // namespace

TEST_CASE("in-order pieces with uncaptured tails become data and holes") {
  ByteStream s;
  s.add(100, 5, bytes("hello"));
  s.add(105, 6, bytes("wo"));  // 4 bytes not captured (e.g. past the capture cap)
  s.add(111, 3, {});           // sendfile: length only
  s.add(114, 2, bytes("!!"));
  CHECK(s.position() == 100);
  CHECK(s.resolved_end() == 116);
  auto v = s.view();
  CHECK(v.data.size() == 7);
  CHECK(v.more_follows);
  CHECK(drain(s) == "hellowo#######!!");
  CHECK(s.stats().bytes_hole == 7);
  CHECK(s.buffered_bytes() == 0);
}

TEST_CASE("out-of-order pieces wait for the gap; retransmissions are trimmed") {
  ByteStream s;
  s.set_start(0);
  s.add(6, 4, bytes("ghij"));
  CHECK(s.view().data.empty());
  CHECK(s.view().hole == 0);
  s.add(0, 4, bytes("abcd"));
  s.add(2, 6, bytes("cdefgh"));  // overlaps both sides
  s.add(0, 4, bytes("abcd"));    // pure duplicate
  CHECK(drain(s) == "abcdefghij");
  CHECK(s.stats().bytes_duplicate == 4 + 2 + 2);
}

TEST_CASE("a gap that never fills becomes a hole when closed or over budget") {
  ByteStream s;
  s.set_start(0);
  s.add(0, 2, bytes("ab"));
  s.add(5, 2, bytes("fg"));
  CHECK(drain(s) == "ab");
  s.close_gaps();
  CHECK(drain(s) == "###fg");
  CHECK(s.stats().gaps_closed == 1);

  Limits tight;
  tight.max_out_of_order_pieces = 2;
  ByteStream t(tight);
  t.set_start(0);
  t.add(10, 1, bytes("k"));
  t.add(12, 1, bytes("m"));
  t.add(14, 1, bytes("o"));  // third piece ahead of the gap: the first gap is given up
  CHECK(drain(t) == "##########k");
}

TEST_CASE("advancing past unseen bytes drops them on arrival") {
  ByteStream s;
  s.set_start(0);
  s.add(0, 3, bytes("abc"));
  s.advance_to(8);  // e.g. skipping a record set we never want to hold
  s.add(3, 4, bytes("defg"));
  s.add(7, 4, bytes("hijk"));
  CHECK(s.position() == 8);
  CHECK(drain(s) == "ijk");
  CHECK(s.buffered_bytes() == 0);
}

TEST_CASE("buffered bytes are bounded") {
  Limits limits;
  limits.max_buffered_bytes = 8;
  ByteStream s(limits);
  s.add(0, 12, bytes("abcdefghijkl"));
  CHECK(s.buffered_bytes() == 8);
  CHECK(drain(s) == "abcdefgh####");
  CHECK(s.stats().bytes_over_limit == 4);
}

TEST_CASE("random splits, captures, reordering and duplicates reproduce the original") {
  std::mt19937_64 rng(42);
  for (int round = 0; round < 200; ++round) {
    std::string original(1 + rng() % 3000, '\0');
    for (auto& c : original) c = static_cast<char>('a' + rng() % 26);
    std::string expected = original;
    struct Piece {
      std::uint64_t pos, len, cap;
    };
    std::vector<Piece> pieces;
    for (std::uint64_t pos = 0; pos < original.size();) {
      std::uint64_t len = std::min<std::uint64_t>(1 + rng() % 64, original.size() - pos);
      std::uint64_t cap = rng() % 4 == 0 ? rng() % (len + 1) : len;
      for (std::uint64_t i = cap; i < len; ++i) expected[pos + i] = '#';
      pieces.push_back({pos, len, cap});
      pos += len;
    }
    // Local reordering (within a window of 8) plus duplicates of some pieces.
    for (std::size_t i = 0; i + 1 < pieces.size(); ++i) {
      std::size_t j = i + rng() % std::min<std::size_t>(8, pieces.size() - i);
      std::swap(pieces[i], pieces[j]);
    }
    std::vector<Piece> with_dups;
    for (auto& p : pieces) {
      with_dups.push_back(p);
      if (rng() % 10 == 0) with_dups.push_back(p);
    }
    ByteStream s;
    s.set_start(0);
    std::string out;
    for (auto& p : with_dups) {
      s.add(p.pos, p.len, bytes(original).subspan(p.pos, p.cap));
      out += drain(s);
    }
    CHECK(s.resolved_end() == original.size());
    CHECK(out == expected);
    CHECK(s.buffered_bytes() == 0);
  }
}
