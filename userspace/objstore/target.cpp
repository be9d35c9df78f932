// Addressing: which provider, bucket and key a request line + Host header name; Range values.
#include <charconv>

#include "objstore/objstore.h"

namespace fc::objstore {
namespace {

bool ends_with_ci(std::string_view s, std::string_view suffix) {
  if (s.size() < suffix.size()) return false;
  for (std::size_t i = 0; i < suffix.size(); ++i) {
    char a = s[s.size() - suffix.size() + i];
    if (a >= 'A' && a <= 'Z') a = static_cast<char>(a - 'A' + 'a');
    if (a != suffix[i]) return false;
  }
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string url_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out.push_back(static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2])));
      i += 2;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

std::string_view strip_port(std::string_view host) {
  if (!host.empty() && host.front() == '[') {  // [v6]:port
    const auto close = host.find(']');
    return close == std::string_view::npos ? host : host.substr(0, close + 1);
  }
  const auto colon = host.rfind(':');
  return colon == std::string_view::npos ? host : host.substr(0, colon);
}

// "/a/b/c" → ("a", "b/c").
std::pair<std::string_view, std::string_view> split_first_segment(std::string_view path) {
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  const auto slash = path.find('/');
  if (slash == std::string_view::npos) return {path, {}};
  return {path.substr(0, slash), path.substr(slash + 1)};
}

std::optional<std::uint64_t> parse_u64(std::string_view s) {
  std::uint64_t value = 0;
  auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (error != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return value;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

}  // namespace

std::string_view provider_name(Provider provider) {
  switch (provider) {
    case Provider::kS3PathStyle:
      return "s3-path";
    case Provider::kS3VirtualHost:
      return "s3-virtual-host";
    case Provider::kGcsXml:
      return "gcs-xml";
    case Provider::kGcsJson:
      return "gcs-json";
    case Provider::kAzureBlob:
      return "azure-blob";
    case Provider::kUnknown:
      break;
  }
  return "unknown";
}

std::optional<std::uint64_t> ByteRange::length() const {
  if (first && last && *last >= *first) return *last - *first + 1;
  if (suffix_length) return suffix_length;
  return std::nullopt;
}

std::optional<ByteRange> parse_range(std::string_view value) {
  value = trim(value);
  constexpr std::string_view kUnit = "bytes=";
  if (value.size() < kUnit.size() || value.substr(0, kUnit.size()) != kUnit) return std::nullopt;
  value.remove_prefix(kUnit.size());
  // Multi-range requests ("a-b,c-d") are not used by object-store clients: take the first.
  value = trim(value.substr(0, value.find(',')));
  const auto dash = value.find('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const std::string_view first = trim(value.substr(0, dash));
  const std::string_view last = trim(value.substr(dash + 1));
  ByteRange range;
  if (first.empty()) {
    range.suffix_length = parse_u64(last);
    if (!range.suffix_length) return std::nullopt;
    return range;
  }
  range.first = parse_u64(first);
  if (!range.first) return std::nullopt;
  if (!last.empty()) {
    range.last = parse_u64(last);
    if (!range.last || *range.last < *range.first) return std::nullopt;
  }
  return range;
}

ObjectTarget parse_object_target(std::string_view host_header, std::string_view request_target,
                                 std::span<const std::string> virtual_host_suffixes) {
  ObjectTarget target;
  // Absolute-form targets (through a proxy): "http://host/path".
  if (auto scheme = request_target.find("://");
      scheme != std::string_view::npos && scheme < request_target.find('/')) {
    std::string_view rest = request_target.substr(scheme + 3);
    const auto slash = rest.find('/');
    host_header = rest.substr(0, slash);
    request_target = slash == std::string_view::npos ? "/" : rest.substr(slash);
  }
  const std::string_view path = request_target.substr(0, request_target.find('?'));
  const std::string_view host = strip_port(trim(host_header));

  // GCS JSON API (the object name is one URL-encoded path segment).
  for (std::string_view prefix : {"/download/storage/v1/b/", "/storage/v1/b/"}) {
    if (path.substr(0, prefix.size()) != prefix) continue;
    const std::string_view rest = path.substr(prefix.size());
    const auto marker = rest.find("/o/");
    if (marker == std::string_view::npos) break;
    target.provider = Provider::kGcsJson;
    target.bucket = url_decode(rest.substr(0, marker));
    target.key = url_decode(rest.substr(marker + 3));
    return target;
  }
  if (ends_with_ci(host, ".blob.core.windows.net")) {
    auto [container, blob] = split_first_segment(path);
    target.provider = Provider::kAzureBlob;
    target.bucket = url_decode(container);
    target.key = url_decode(blob);
    return target;
  }
  if (host == "storage.googleapis.com" || ends_with_ci(host, ".storage.googleapis.com")) {
    target.provider = Provider::kGcsXml;
    if (host.size() > std::string_view(".storage.googleapis.com").size() &&
        ends_with_ci(host, ".storage.googleapis.com")) {
      target.bucket = std::string(host.substr(0, host.size() - 23));
      target.key = url_decode(path.substr(path.empty() ? 0 : 1));
    } else {
      auto [bucket, key] = split_first_segment(path);
      target.bucket = url_decode(bucket);
      target.key = url_decode(key);
    }
    return target;
  }
  if (ends_with_ci(host, ".amazonaws.com")) {
    // bucket.s3.<region>.amazonaws.com, bucket.s3-<region>…, bucket.s3.amazonaws.com: the bucket
    // (which may contain dots) precedes the first ".s3." / ".s3-".
    std::size_t marker = std::string_view::npos;
    for (std::string_view label : {".s3.", ".s3-"}) {
      marker = std::min(marker, host.find(label));
    }
    if (marker != std::string_view::npos && marker > 0) {
      target.provider = Provider::kS3VirtualHost;
      target.bucket = std::string(host.substr(0, marker));
      target.key = url_decode(path.substr(path.empty() ? 0 : 1));
      return target;
    }
  }
  for (const std::string& suffix : virtual_host_suffixes) {
    if (host.size() > suffix.size() + 1 && ends_with_ci(host, suffix) &&
        host[host.size() - suffix.size() - 1] == '.') {
      target.provider = Provider::kS3VirtualHost;
      target.bucket = std::string(host.substr(0, host.size() - suffix.size() - 1));
      target.key = url_decode(path.substr(path.empty() ? 0 : 1));
      return target;
    }
  }
  // s3.<region>.amazonaws.com and every other endpoint (MinIO, s3rver, Ceph): path style.
  auto [bucket, key] = split_first_segment(path);
  target.provider = Provider::kS3PathStyle;
  target.bucket = url_decode(bucket);
  target.key = url_decode(key);
  return target;
}

}  // namespace fc::objstore
