// HTTP/1.1 exchanges on an object-store connection, from hole-aware byte streams.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <deque>

#include "objstore/objstore.h"
#include "stream/stream.h"

namespace fc::objstore {
namespace {

constexpr std::size_t kMaxChunkLine = 1024;
// How long a resync keeps looking at the tail of the data for a start line split across pieces.
constexpr std::size_t kResyncTail = 32;

std::string_view as_chars(std::span<const std::uint8_t> data) {
  return std::string_view(reinterpret_cast<const char*>(data.data()), data.size());
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

bool icontains_token(std::string_view value, std::string_view token) {
  // "gzip, chunked" contains "chunked"
  while (!value.empty()) {
    const auto comma = value.find(',');
    std::string_view item = value.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (iequals(item, token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  std::uint64_t value = 0;
  if (s.empty()) return std::nullopt;
  auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (error != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

bool is_token_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

// "GET /x HTTP/1.1" → method, target; false when it is not a request line.
bool split_request_line(std::string_view line, std::string_view& method, std::string_view& target) {
  const auto sp1 = line.find(' ');
  if (sp1 == std::string_view::npos || sp1 == 0) return false;
  const auto sp2 = line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || sp2 == sp1 + 1) return false;
  method = line.substr(0, sp1);
  if (!std::all_of(method.begin(), method.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) {
    return false;
  }
  target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  return version == "HTTP/1.1" || version == "HTTP/1.0";
}

// "HTTP/1.1 206 Partial Content" → 206; 0 when it is not a status line.
int parse_status_line(std::string_view line) {
  if (line.size() < 12 || line.substr(0, 7) != "HTTP/1." || line[8] != ' ') return 0;
  int status = 0;
  for (std::size_t i = 9; i < 12; ++i) {
    if (line[i] < '0' || line[i] > '9') return 0;
    status = status * 10 + (line[i] - '0');
  }
  if (line.size() > 12 && line[12] != ' ') return 0;
  return status;
}

// Header block (start line + fields), parsed in place; views into the stream's buffer.
struct Head {
  std::string_view start_line;
  std::size_t size = 0;  // bytes including the final CRLFCRLF
  std::string_view host, range, ms_range, content_length, content_range, transfer_encoding,
      connection;
  bool malformed = false;
};

Head parse_head(std::string_view block) {
  Head head;
  head.size = block.size();
  std::string_view rest = block.substr(0, block.size() - 2);  // keep the last line's CRLF
  const auto first_eol = rest.find("\r\n");
  head.start_line = rest.substr(0, first_eol);
  rest.remove_prefix(first_eol + 2);
  while (!rest.empty()) {
    const auto eol = rest.find("\r\n");
    const std::string_view line = rest.substr(0, eol);
    rest.remove_prefix(eol == std::string_view::npos ? rest.size() : eol + 2);
    const auto colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      head.malformed = true;
      continue;
    }
    const std::string_view name = line.substr(0, colon);
    if (!std::all_of(name.begin(), name.end(), is_token_char)) {
      head.malformed = true;
      continue;
    }
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (iequals(name, "host"))
      head.host = value;
    else if (iequals(name, "range"))
      head.range = value;
    else if (iequals(name, "x-ms-range"))
      head.ms_range = value;
    else if (iequals(name, "content-length"))
      head.content_length = value;
    else if (iequals(name, "content-range"))
      head.content_range = value;
    else if (iequals(name, "transfer-encoding"))
      head.transfer_encoding = value;
    else if (iequals(name, "connection"))
      head.connection = value;
  }
  return head;
}

// "bytes 0-65535/200000" → first and last as a ByteRange.
std::optional<ByteRange> parse_content_range(std::string_view value) {
  if (!value.starts_with("bytes ")) return std::nullopt;
  value.remove_prefix(6);
  const auto slash = value.find('/');
  std::string as_range = "bytes=" + std::string(value.substr(0, slash));
  auto range = parse_range(as_range);
  if (!range || !range->first || !range->last) return std::nullopt;
  return range;
}

enum class Progress { kNeedMore, kDone, kDesync };

// A message body: fixed length, chunked, or delimited by the connection's close. Consumes
// captured bytes and holes alike (holes have known lengths), counting decoded body bytes.
struct BodyReader {
  enum class Mode { kNone, kLength, kChunked, kUntilClose } mode = Mode::kNone;
  enum class Chunk { kSizeLine, kData, kDataCrlf, kTrailer } chunk = Chunk::kSizeLine;
  std::uint64_t remaining = 0;
  std::uint64_t body_bytes = 0;
  std::uint64_t end_position = 0;  // stream position after the last byte consumed

  Progress consume(stream::ByteStream& s) {
    if (mode == Mode::kNone) return Progress::kDone;
    for (;;) {
      if (mode == Mode::kLength && remaining == 0) return Progress::kDone;
      const stream::View v = s.view();
      if (v.data.empty() && v.hole == 0) return Progress::kNeedMore;
      const std::uint64_t available = v.hole > 0 ? v.hole : v.data.size();
      if (mode == Mode::kLength || mode == Mode::kUntilClose ||
          (mode == Mode::kChunked && chunk == Chunk::kData)) {
        const std::uint64_t n =
            mode == Mode::kUntilClose ? available : std::min(available, remaining);
        s.advance(n);
        body_bytes += n;
        if (mode != Mode::kUntilClose) remaining -= n;
        end_position = s.position();
        if (mode == Mode::kChunked && remaining == 0) {
          chunk = Chunk::kDataCrlf;
          remaining = 2;
        }
        continue;
      }
      // Chunked framing.
      if (chunk == Chunk::kDataCrlf) {
        const std::uint64_t n = std::min(available, remaining);
        s.advance(n);
        remaining -= n;
        end_position = s.position();
        if (remaining == 0) chunk = Chunk::kSizeLine;
        continue;
      }
      if (v.hole > 0) return Progress::kDesync;  // a chunk-size line we cannot read
      const std::string_view data = as_chars(v.data);
      const auto eol = data.substr(0, kMaxChunkLine).find("\r\n");
      if (eol == std::string_view::npos) {
        return v.more_follows || data.size() >= kMaxChunkLine ? Progress::kDesync
                                                              : Progress::kNeedMore;
      }
      const std::string_view line = data.substr(0, eol);
      if (chunk == Chunk::kTrailer) {
        s.advance(eol + 2);
        end_position = s.position();
        if (line.empty()) return Progress::kDone;
        continue;
      }
      std::string_view size_text = line.substr(0, line.find(';'));
      while (!size_text.empty() && (size_text.back() == ' ' || size_text.back() == '\t')) {
        size_text.remove_suffix(1);
      }
      std::uint64_t size = 0;
      auto [end, error] =
          std::from_chars(size_text.data(), size_text.data() + size_text.size(), size, 16);
      if (size_text.empty() || error != std::errc() || end != size_text.data() + size_text.size()) {
        return Progress::kDesync;
      }
      s.advance(eol + 2);
      end_position = s.position();
      if (size == 0) {
        chunk = Chunk::kTrailer;
      } else {
        chunk = Chunk::kData;
        remaining = size;
      }
    }
  }
};

struct PieceTime {
  std::uint64_t begin;
  std::uint64_t end;
  std::uint64_t timestamp_ns;
  std::uint32_t thread_id;
};

// One direction: its byte stream plus when (and by which thread) each piece moved.
struct Side {
  stream::ByteStream stream;
  std::deque<PieceTime> pieces;
  bool resync = false;

  void add(std::uint64_t position, std::uint64_t length, std::span<const std::uint8_t> captured,
           std::uint64_t timestamp_ns, std::uint32_t thread_id) {
    if (length == 0) return;
    pieces.push_back(PieceTime{position, position + length, timestamp_ns, thread_id});
    stream.add(position, length, captured);
    // Forget pieces wholly behind the reader; keep the deque bounded regardless.
    const std::uint64_t read = stream.position();
    while (pieces.size() > 1 && (pieces.front().end <= read || pieces.size() > 4096)) {
      pieces.pop_front();
    }
  }

  // The most recent piece that covered `position` (or the nearest one before it).
  const PieceTime* at(std::uint64_t position) const {
    const PieceTime* best = nullptr;
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
      if (it->begin <= position && position < it->end) return &*it;
      if (it->begin <= position && (best == nullptr || it->end > best->end)) best = &*it;
    }
    return best != nullptr ? best : (pieces.empty() ? nullptr : &pieces.front());
  }
  std::uint64_t time_at(std::uint64_t position) const {
    const PieceTime* piece = at(position);
    return piece != nullptr ? piece->timestamp_ns : 0;
  }

  // Head at the read position: kDone with `head` filled, kNeedMore, or kDesync.
  Progress read_head(std::size_t max_header_bytes, std::string_view& block) {
    const stream::View v = stream.view();
    if (v.hole > 0) return Progress::kDesync;
    if (v.data.empty()) return Progress::kNeedMore;
    const std::string_view data = as_chars(v.data);
    const auto end = data.substr(0, max_header_bytes).find("\r\n\r\n");
    if (end == std::string_view::npos) {
      return v.more_follows || data.size() >= max_header_bytes ? Progress::kDesync
                                                               : Progress::kNeedMore;
    }
    block = data.substr(0, end + 4);
    return Progress::kDone;
  }

  // Skips to the next plausible start line; true when positioned on one.
  template <typename IsStartLine>
  bool seek_start_line(IsStartLine is_start_line) {
    for (;;) {
      const stream::View v = stream.view();
      if (v.hole > 0) {
        stream.advance(v.hole);
        continue;
      }
      if (v.data.empty()) return false;
      const std::string_view data = as_chars(v.data);
      for (std::size_t line = 0; line < data.size();) {
        const auto eol = data.find("\r\n", line);
        if (eol == std::string_view::npos) {
          // An incomplete last line may be a start line still arriving.
          if (!v.more_follows && data.size() - line <= 8 * 1024) {
            stream.advance(line);
            return false;
          }
          break;
        }
        if (is_start_line(data.substr(line, eol - line))) {
          stream.advance(line);
          return true;
        }
        line = eol + 2;
      }
      const std::size_t keep = v.more_follows ? 0 : std::min(kResyncTail, data.size());
      stream.advance(data.size() - keep);
      if (keep > 0) return false;
    }
  }
};

struct PendingRequest {
  std::string http_method;
  ObjectTarget target;
  KeyFields key_fields;  // parsed once, when the request is read
  std::optional<ByteRange> range;
  std::uint64_t request_ns = 0;
  std::uint32_t thread_id = 0;
};

// The GET's fields that come from its request (moved out: the request leaves `pending`).
void take_request(ObjectGet& get, PendingRequest&& request) {
  get.http_method = std::move(request.http_method);
  get.target = std::move(request.target);
  get.key_fields = std::move(request.key_fields);
  get.range = request.range;
  get.request_ns = request.request_ns;
  get.thread_id = request.thread_id;
}

}  // namespace

struct HttpConnection::Impl {
  std::uint64_t connection;
  const KeyLayout* layout;
  HttpOptions options;
  ObjectGetCallback on_get;
  ObjectGetCallback on_request;
  HttpStats stats;
  Side requests;
  Side responses;
  std::deque<PendingRequest> pending;
  BodyReader request_body;
  bool in_request_body = false;
  // The response being received.
  bool in_response = false;
  ObjectGet current;
  BodyReader response_body;

  void parse_requests() {
    Side& side = requests;
    for (;;) {
      if (in_request_body) {
        const Progress p = request_body.consume(side.stream);
        if (p == Progress::kNeedMore) return;
        in_request_body = false;
        if (p == Progress::kDesync) {
          ++stats.resyncs;
          side.resync = true;
        }
        continue;
      }
      if (side.resync) {
        std::string_view m, t;
        if (!side.seek_start_line(
                [&](std::string_view line) { return split_request_line(line, m, t); })) {
          return;
        }
        side.resync = false;
      }
      std::string_view block;
      const std::uint64_t start = side.stream.position();
      const Progress p = side.read_head(options.max_header_bytes, block);
      if (p == Progress::kNeedMore) return;
      std::string_view method, target;
      if (p == Progress::kDesync ||
          !split_request_line(block.substr(0, block.find("\r\n")), method, target)) {
        ++stats.resyncs;
        side.resync = true;
        side.stream.advance(1);  // this start line is unusable: look for the next one
        continue;
      }
      const Head head = parse_head(block);
      PendingRequest request;
      request.http_method = std::string(method);
      request.target = parse_object_target(head.host, target, options.virtual_host_suffixes);
      if (layout != nullptr && !request.target.key.empty())
        request.key_fields = layout->parse(request.target.key);
      // Azure: x-ms-range wins over Range when both are present.
      request.range = parse_range(!head.ms_range.empty() ? head.ms_range : head.range);
      if (const PieceTime* piece = side.at(start)) {
        request.request_ns = piece->timestamp_ns;
        request.thread_id = piece->thread_id;
      }
      request_body = BodyReader{};
      if (icontains_token(head.transfer_encoding, "chunked")) {
        request_body.mode = BodyReader::Mode::kChunked;
      } else if (auto length = parse_u64(head.content_length); length && *length > 0) {
        request_body.mode = BodyReader::Mode::kLength;
        request_body.remaining = *length;
      }
      side.stream.advance(head.size);
      in_request_body = request_body.mode != BodyReader::Mode::kNone;
      ++stats.requests;
      if (pending.size() >= options.max_pipelined_requests) {
        pending.pop_front();
        ++stats.dropped_requests;
      }
      pending.push_back(std::move(request));
      if (on_request) announce(pending.back());
    }
  }

  void announce(const PendingRequest& request);

  // A 206's Content-Range names the request it answers. When it is not the oldest pending
  // request, the responses to the older ones were lost (a resync skipped them): they are emitted
  // as failed (status 0). When no pending request asked for it, its request was never seen
  // (capture began mid-connection): returns false and the response stays unpaired.
  bool pair_by_content_range(std::string_view content_range) {
    const auto range = parse_content_range(content_range);
    if (!range || pending.empty()) return true;
    const auto answers = [&](const PendingRequest& r) {
      // The store may shorten the range at the object's end: first must match, last may be less.
      return r.range && r.range->first && *r.range->first == *range->first &&
             (!r.range->last || *range->last <= *r.range->last);
    };
    if (!pending.front().range || !pending.front().range->first || answers(pending.front())) {
      return true;
    }
    auto match = std::find_if(pending.begin(), pending.end(), answers);
    if (match == pending.end()) return false;
    const std::size_t lost = static_cast<std::size_t>(match - pending.begin());
    for (std::size_t i = 0; i < lost; ++i) {
      emit_unanswered(pending.front(), 0);
      pending.pop_front();
    }
    return true;
  }

  void emit_unanswered(PendingRequest& request, std::uint64_t timestamp_ns) {
    ++stats.unanswered;
    ObjectGet get;
    get.connection = connection;
    take_request(get, std::move(request));
    get.response_end_ns = timestamp_ns;
    on_get(get);
  }

  void finish_response(bool complete) {
    current.complete = complete;
    const std::uint64_t end = response_body.end_position;
    if (end > 0) current.response_end_ns = responses.time_at(end - 1);
    current.body_bytes = response_body.body_bytes;
    in_response = false;
    ++stats.responses;
    on_get(current);
  }

  void parse_responses() {
    Side& side = responses;
    for (;;) {
      if (in_response) {
        const Progress p = response_body.consume(side.stream);
        if (p == Progress::kNeedMore) return;
        if (p == Progress::kDesync) {
          ++stats.resyncs;
          side.resync = true;
        }
        finish_response(p == Progress::kDone);
        continue;
      }
      if (side.resync) {
        if (!side.seek_start_line([](std::string_view line) { return parse_status_line(line); })) {
          return;
        }
        side.resync = false;
      }
      std::string_view block;
      const std::uint64_t start = side.stream.position();
      const Progress p = side.read_head(options.max_header_bytes, block);
      if (p == Progress::kNeedMore) return;
      const int status =
          p == Progress::kDone ? parse_status_line(block.substr(0, block.find("\r\n"))) : 0;
      if (status == 0) {
        ++stats.resyncs;
        side.resync = true;
        side.stream.advance(1);  // this start line is unusable: look for the next one
        continue;
      }
      const Head head = parse_head(block);
      side.stream.advance(head.size);
      if (status >= 100 && status < 200 && status != 101) continue;  // interim: 100-continue
      current = ObjectGet{};
      current.connection = connection;
      current.status = status;
      current.response_start_ns = side.time_at(start);
      current.response_end_ns = side.time_at(start + head.size - 1);
      const bool paired = pair_by_content_range(head.content_range);
      if (paired && !pending.empty()) {
        take_request(current, std::move(pending.front()));
        pending.pop_front();
      } else {
        ++stats.orphan_responses;
      }
      current.content_length = parse_u64(head.content_length);
      response_body = BodyReader{};
      response_body.end_position = start + head.size;
      const bool no_body = current.http_method == "HEAD" || status == 204 || status == 304;
      if (no_body) {
        response_body.mode = BodyReader::Mode::kNone;
      } else if (icontains_token(head.transfer_encoding, "chunked")) {
        response_body.mode = BodyReader::Mode::kChunked;
      } else if (current.content_length) {
        response_body.mode = BodyReader::Mode::kLength;
        response_body.remaining = *current.content_length;
      } else {
        response_body.mode = BodyReader::Mode::kUntilClose;
      }
      in_response = true;
    }
  }
};

HttpConnection::HttpConnection(std::uint64_t connection_id, const KeyLayout* layout,
                               HttpOptions options, ObjectGetCallback on_get,
                               ObjectGetCallback on_request)
    : impl_(std::make_unique<Impl>()) {
  impl_->connection = connection_id;
  impl_->layout = layout;
  impl_->options = std::move(options);
  impl_->on_get = std::move(on_get);
  impl_->on_request = std::move(on_request);
}

HttpConnection::~HttpConnection() = default;

void HttpConnection::on_piece(Direction direction, std::uint64_t position, std::uint64_t length,
                              std::span<const std::uint8_t> captured, std::uint64_t timestamp_ns,
                              std::uint32_t thread_id) {
  if (direction == Direction::kRequest) {
    impl_->requests.add(position, length, captured, timestamp_ns, thread_id);
    impl_->parse_requests();
  } else {
    impl_->responses.add(position, length, captured, timestamp_ns, thread_id);
    impl_->parse_responses();
  }
}

void HttpConnection::close(std::uint64_t timestamp_ns) {
  Impl& m = *impl_;
  m.requests.stream.close_gaps();
  m.responses.stream.close_gaps();
  m.parse_requests();
  m.parse_responses();
  if (m.in_response) {
    const bool delimited_by_close = m.response_body.mode == BodyReader::Mode::kUntilClose;
    m.finish_response(delimited_by_close);
    if (!delimited_by_close) m.current.response_end_ns = timestamp_ns;
  }
  // Requests that never got a response: they still count (as failed requests).
  while (!m.pending.empty()) {
    m.emit_unanswered(m.pending.front(), timestamp_ns);
    m.pending.pop_front();
  }
}

namespace {

ObjectGet as_get(const PendingRequest& r) {
  ObjectGet request;
  take_request(request, PendingRequest(r));
  return request;
}

}  // namespace

void HttpConnection::Impl::announce(const PendingRequest& request) {
  ObjectGet get = as_get(request);
  get.connection = connection;
  on_request(get);
}

std::optional<ObjectGet> HttpConnection::newest_pending() const {
  if (impl_->pending.empty()) return std::nullopt;
  ObjectGet get = as_get(impl_->pending.back());
  get.connection = impl_->connection;
  return get;
}

bool HttpConnection::has_pending() const {
  return !impl_->pending.empty();
}

void HttpConnection::abandon(std::uint32_t thread_id, std::uint64_t timestamp_ns) {
  Impl& m = *impl_;
  // A response in progress was paired with its request already: only unanswered ones remain.
  for (auto it = m.pending.begin(); it != m.pending.end();) {
    if (it->thread_id != thread_id) {
      ++it;
      continue;
    }
    m.emit_unanswered(*it, timestamp_ns);
    it = m.pending.erase(it);
  }
}

std::size_t HttpConnection::forget_retried(const ObjectGet& retry) {
  Impl& m = *impl_;
  const std::size_t before = m.pending.size();
  std::erase_if(m.pending, [&](const PendingRequest& r) { return is_retry_of(retry, as_get(r)); });
  const std::size_t forgotten = before - m.pending.size();
  m.stats.retried_requests += forgotten;
  return forgotten;
}

bool is_retry_of(const ObjectGet& retry, const ObjectGet& request) {
  auto same_range = [](const std::optional<ByteRange>& a, const std::optional<ByteRange>& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a ||
           (a->first == b->first && a->last == b->last && a->suffix_length == b->suffix_length);
  };
  return request.status == 0 && request.response_start_ns == 0 && !retry.http_method.empty() &&
         retry.thread_id == request.thread_id && retry.http_method == request.http_method &&
         retry.target.bucket == request.target.bucket && retry.target.key == request.target.key &&
         same_range(retry.range, request.range) && request.request_ns < retry.request_ns;
}

const HttpStats& HttpConnection::stats() const {
  return impl_->stats;
}

}  // namespace fc::objstore
