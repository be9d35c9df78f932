// Object-key layouts: which topic, partition and segment an object belongs to.
#include <algorithm>
#include <charconv>
#include <mutex>
#include <regex>
#include <unordered_map>

#include "objstore/objstore.h"

namespace fc::objstore {
namespace {

bool is_base64url(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

template <typename Int>
std::optional<Int> parse_decimal(std::string_view s) {
  Int value = 0;
  if (s.empty()) return std::nullopt;
  auto [end, error] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (error != std::errc() || end != s.data() + s.size() || value < 0) return std::nullopt;
  return value;
}

constexpr std::size_t kTopicIdLength = 22;

}  // namespace

KeyFields AivenLayout::parse(std::string_view key) const {
  KeyFields fields;
  // From the right: file name, partition, then "<topic>-<topicId>" (topic names cannot contain
  // '/', so whatever precedes that component is the configured prefix).
  const auto file_slash = key.rfind('/');
  if (file_slash == std::string_view::npos || file_slash == 0) return fields;
  const std::string_view file = key.substr(file_slash + 1);
  const auto partition_slash = key.rfind('/', file_slash - 1);
  if (partition_slash == std::string_view::npos) return fields;
  const std::string_view partition =
      key.substr(partition_slash + 1, file_slash - partition_slash - 1);
  const auto topic_start =
      partition_slash == 0 ? std::string_view::npos : key.rfind('/', partition_slash - 1);
  const std::string_view topic_and_id =
      topic_start == std::string_view::npos
          ? key.substr(0, partition_slash)
          : key.substr(topic_start + 1, partition_slash - topic_start - 1);
  // "<topic>-<22-char id>": the id is the last 22 chars; the topic may itself contain '-'.
  if (topic_and_id.size() < kTopicIdLength + 2) return fields;
  const std::string_view topic_id = topic_and_id.substr(topic_and_id.size() - kTopicIdLength);
  if (topic_and_id[topic_and_id.size() - kTopicIdLength - 1] != '-') return fields;
  if (!std::all_of(topic_id.begin(), topic_id.end(), is_base64url)) return fields;
  const std::string_view topic = topic_and_id.substr(0, topic_and_id.size() - kTopicIdLength - 1);
  auto partition_number = parse_decimal<std::int32_t>(partition);
  if (!partition_number) return fields;
  // "<20 digits>-<segment id>.<suffix>"
  if (file.size() < 20 + 1 + 1 + 1 + 1 || file[20] != '-') return fields;
  auto base_offset = parse_decimal<std::int64_t>(file.substr(0, 20));
  if (!base_offset) return fields;
  const std::string_view rest = file.substr(21);
  const auto dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 == rest.size()) return fields;
  const std::string_view segment_id = rest.substr(0, dot);
  if (!std::all_of(segment_id.begin(), segment_id.end(), is_base64url)) return fields;
  fields.parsed = true;
  fields.topic = std::string(topic);
  fields.topic_id = std::string(topic_id);
  fields.partition = *partition_number;
  fields.base_offset = *base_offset;
  fields.segment_id = std::string(segment_id);
  fields.suffix = std::string(rest.substr(dot + 1));
  return fields;
}

struct RegexLayout::Impl {
  // A regex match costs tens of microseconds; the same segment object is read many times (one
  // GET per chunk), so results are cached per key (bounded, cleared when full).
  static constexpr std::size_t kMaxCached = 4096;
  std::mutex cache_mutex;
  std::unordered_map<std::string, KeyFields> cache;
  KeyFields match(std::string_view key) const;
  std::regex regex;
  int topic = -1;
  int topic_id = -1;
  int partition = -1;
  int base_offset = -1;
};

RegexLayout::RegexLayout(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RegexLayout::~RegexLayout() = default;

Result<std::unique_ptr<RegexLayout>> RegexLayout::create(std::string_view pattern) {
  // Strip group names, remembering which capture index each name had. Capture groups are the
  // '(' not escaped, not inside [...], and not followed by '?' (except named ones).
  auto impl = std::make_unique<Impl>();
  std::string plain;
  int group_index = 0;
  bool in_class = false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\') {
      plain.push_back(c);
      if (i + 1 < pattern.size()) plain.push_back(pattern[++i]);
      continue;
    }
    if (in_class) {
      if (c == ']') in_class = false;
      plain.push_back(c);
      continue;
    }
    if (c == '[') {
      in_class = true;
      plain.push_back(c);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') plain.push_back(pattern[++i]);
      continue;
    }
    if (c != '(') {
      plain.push_back(c);
      continue;
    }
    const std::string_view after = pattern.substr(i + 1);
    std::size_t name_start = std::string_view::npos;
    if (after.starts_with("?<") && !after.starts_with("?<=") && !after.starts_with("?<!")) {
      name_start = i + 3;
    } else if (after.starts_with("?P<")) {
      name_start = i + 4;
    }
    if (name_start != std::string_view::npos) {
      const auto name_end = pattern.find('>', name_start);
      if (name_end == std::string_view::npos) {
        return make_error("key layout regex: group name at offset " + std::to_string(i) +
                          " is not closed with '>'");
      }
      const std::string_view name = pattern.substr(name_start, name_end - name_start);
      ++group_index;
      int* slot = name == "topic"         ? &impl->topic
                  : name == "topic_id"    ? &impl->topic_id
                  : name == "partition"   ? &impl->partition
                  : name == "base_offset" ? &impl->base_offset
                                          : nullptr;
      if (slot == nullptr) {
        return make_error("key layout regex: unknown group name '" + std::string(name) +
                          "' (known: topic, topic_id, partition, base_offset)");
      }
      if (*slot != -1) {
        return make_error("key layout regex: group '" + std::string(name) + "' appears twice");
      }
      *slot = group_index;
      plain.push_back('(');
      i = name_end;
      continue;
    }
    if (!after.starts_with("?")) ++group_index;
    plain.push_back('(');
  }
  if (impl->topic == -1 && impl->topic_id == -1) {
    return make_error("key layout regex: needs a (?<topic>…) or (?<topic_id>…) group");
  }
  if (impl->partition == -1) {
    return make_error("key layout regex: needs a (?<partition>…) group");
  }
  try {
    impl->regex = std::regex(plain, std::regex::ECMAScript | std::regex::optimize);
  } catch (const std::regex_error& e) {
    return make_error("key layout regex: invalid pattern '" + std::string(pattern) +
                      "': " + e.what());
  }
  return std::unique_ptr<RegexLayout>(new RegexLayout(std::move(impl)));
}

KeyFields RegexLayout::parse(std::string_view key) const {
  {
    std::lock_guard lock(impl_->cache_mutex);
    auto cached = impl_->cache.find(std::string(key));
    if (cached != impl_->cache.end()) return cached->second;
  }
  KeyFields fields = impl_->match(key);
  std::lock_guard lock(impl_->cache_mutex);
  if (impl_->cache.size() >= Impl::kMaxCached) impl_->cache.clear();
  impl_->cache.emplace(std::string(key), fields);
  return fields;
}

KeyFields RegexLayout::Impl::match(std::string_view key) const {
  KeyFields fields;
  std::match_results<std::string_view::const_iterator> match;
  if (!std::regex_search(key.begin(), key.end(), match, regex)) return fields;
  const auto group = [&](int index) -> std::string_view {
    if (index < 0 || !match[index].matched) return {};
    return std::string_view(&*match[index].first, match[index].length());
  };
  auto partition_number = parse_decimal<std::int32_t>(group(partition));
  if (!partition_number) return fields;
  fields.partition = *partition_number;
  if (base_offset >= 0) {
    auto offset = parse_decimal<std::int64_t>(group(base_offset));
    if (!offset) return fields;
    fields.base_offset = *offset;
  }
  fields.topic = std::string(group(topic));
  fields.topic_id = std::string(group(topic_id));
  fields.parsed = true;
  return fields;
}

Result<std::unique_ptr<KeyLayout>> make_key_layout(std::string_view spec) {
  if (spec == "aiven") return std::unique_ptr<KeyLayout>(std::make_unique<AivenLayout>());
  constexpr std::string_view kRegex = "regex:";
  if (spec.starts_with(kRegex)) {
    auto layout = RegexLayout::create(spec.substr(kRegex.size()));
    if (!layout) return layout.error();
    return std::unique_ptr<KeyLayout>(std::move(*layout));
  }
  return make_error("key layout '" + std::string(spec) +
                    "': expected \"aiven\" or \"regex:<pattern with named groups>\"");
}

}  // namespace fc::objstore
