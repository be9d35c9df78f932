#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "base/json_count.h"
#include "export/export.h"

namespace fc::exporter {

Result<std::unique_ptr<Ledger>> Ledger::open(const std::string& state_dir,
                                             LedgerRetention retention) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec)
    return make_error("cannot create the state dir " + state_dir + ": " + ec.message() +
                      " (set state_dir in the config to a writable directory)");
  std::unique_ptr<Ledger> ledger(new Ledger(state_dir, retention));
  const std::string path = ledger->path();
  std::ifstream in(path);
  if (!in) return ledger;  // first start
  try {
    const auto doc = nlohmann::json::parse(in);
    for (const auto& row : doc.at("buckets")) {
      // Sanitized like add() does: a ledger written before keys were sanitized may hold invalid
      // UTF-8 (rows that now share a key are added up).
      LedgerKey key{json_count_at<std::int64_t>(row, "hour"),
                    sensors::sanitize_label(row.at("client_id").get<std::string>()),
                    sensors::sanitize_label(row.at("group_id").get<std::string>()),
                    sensors::sanitize_label(row.at("topic").get<std::string>()),
                    sensors::sanitize_label(row.at("method").get<std::string>()),
                    row.contains("hours") ? json_count_at<int>(row, "hours")
                                          : 1};  // absent in hourly rows (and in older files)
      if (key.hours != 1 && key.hours != 24)
        throw std::runtime_error("a bucket spans " + std::to_string(key.hours) +
                                 " hours (1 or 24 expected)");
      LedgerValue value{json_count_at<std::uint64_t>(row, "bytes"),
                        json_count_at<std::uint64_t>(row, "requests"),
                        json_count_at<std::uint64_t>(row, "errors"),
                        row.at("cost_api").get<double>(), row.at("cost_egress").get<double>()};
      LedgerValue& v = ledger->buckets_[key];
      v.bytes += value.bytes;
      v.requests += value.requests;
      v.errors += value.errors;
      v.cost_api += value.cost_api;
      v.cost_egress += value.cost_egress;
    }
  } catch (const std::exception& e) {
    return make_error("the chargeback ledger " + path + " cannot be read (" + e.what() +
                      "); move it away to start a new one, fetchcostd will not overwrite it");
  }
  return ledger;
}

std::string Ledger::path() const {
  return dir_ + "/ledger.json";
}

void Ledger::add(std::int64_t unix_seconds, const LedgerKey& key, const LedgerValue& value) {
  // Keys as the metrics show them: client-ids come off the wire as any bytes (invalid UTF-8 made
  // save() throw and took fetchcostd down), and the report must match the labels.
  LedgerKey k{0, sensors::sanitize_label(key.client_id), sensors::sanitize_label(key.group_id),
              sensors::sanitize_label(key.topic), key.method};
  k.hour = unix_seconds / 3600;
  std::lock_guard lock(mutex_);
  LedgerValue& v = buckets_[k];
  v.bytes += value.bytes;
  v.requests += value.requests;
  v.errors += value.errors;
  v.cost_api += value.cost_api;
  v.cost_egress += value.cost_egress;
}

namespace {

// JSON text of a key field. Keys are sanitized (valid UTF-8, no control characters) when added
// and when loaded, so escaping quotes and backslashes is enough; control characters are escaped
// anyway so the file stays valid JSON whatever a key holds.
void append_string(std::string& out, std::string_view v) {
  out.push_back('"');
  for (char ch : v) {
    if (ch == '"' || ch == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(ch));
      out += esc;
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
}

template <typename Number>
void append_number(std::string& out, Number v) {
  char digits[32];
  auto r = std::to_chars(digits, digits + sizeof digits, v);  // doubles: shortest exact form
  out.append(digits, r.ptr);
}

}  // namespace

std::size_t Ledger::size() const {
  std::lock_guard lock(mutex_);
  return buckets_.size();
}

Ledger::Compaction Ledger::compact(std::int64_t now_unix) {
  constexpr std::int64_t kDay = 86400;
  Compaction done;
  std::lock_guard lock(mutex_);
  // Whole UTC days that ended before these instants are folded / dropped.
  const std::int64_t fold_before = retention_.hourly_days > 0
                                       ? now_unix - retention_.hourly_days * kDay
                                       : std::numeric_limits<std::int64_t>::min();
  const std::int64_t drop_before = retention_.retention_days > 0
                                       ? now_unix - retention_.retention_days * kDay
                                       : std::numeric_limits<std::int64_t>::min();
  const std::int64_t oldest_kept = std::max(fold_before, drop_before);
  // Keys are ordered by start hour: only the oldest buckets are visited.
  for (auto it = buckets_.begin(); it != buckets_.end() && it->first.hour * 3600 < oldest_kept;) {
    const LedgerKey& k = it->first;
    const std::int64_t start = k.hour * 3600;
    const std::int64_t end = start + std::int64_t{k.hours} * 3600;
    if (end <= drop_before) {
      it = buckets_.erase(it);
      ++done.dropped;
      continue;
    }
    const std::int64_t day_start = start - ((start % kDay) + kDay) % kDay;  // floor, also < 1970
    if (k.hours == 1 && day_start + kDay <= fold_before) {
      LedgerKey day = k;
      day.hour = day_start / 3600;
      day.hours = 24;
      LedgerValue& into = buckets_[day];  // std::map: `it` stays valid
      into.bytes += it->second.bytes;
      into.requests += it->second.requests;
      into.errors += it->second.errors;
      into.cost_api += it->second.cost_api;
      into.cost_egress += it->second.cost_egress;
      it = buckets_.erase(it);
      ++done.folded;
      continue;
    }
    ++it;
  }
  return done;
}

Result<void> Ledger::save() const {
  // One save at a time (fetchcostd's saver thread and the final save at exit share the .tmp).
  std::lock_guard saving(save_mutex_);
  // The text is built under the lock that add() takes — directly, without a JSON tree (~1.5 KiB
  // per row) or a temporary per field, since the capture drain waits meanwhile (~0.3 µs a row);
  // the write and fsync happen after it is released.
  std::string text = "{\"buckets\":[";
  {
    std::lock_guard lock(mutex_);
    text.reserve(buckets_.size() * 200 + 64);
    bool first = true;
    for (const auto& [k, v] : buckets_) {
      text += first ? "{\"bytes\":" : ",{\"bytes\":";
      first = false;
      append_number(text, v.bytes);
      text += ",\"client_id\":";
      append_string(text, k.client_id);
      text += ",\"cost_api\":";
      append_number(text, v.cost_api);
      text += ",\"cost_egress\":";
      append_number(text, v.cost_egress);
      text += ",\"errors\":";
      append_number(text, v.errors);
      text += ",\"group_id\":";
      append_string(text, k.group_id);
      text += ",\"hour\":";
      append_number(text, k.hour);
      if (k.hours != 1) {  // only daily rows carry it: hourly rows read as before
        text += ",\"hours\":";
        append_number(text, k.hours);
      }
      text += ",\"method\":";
      append_string(text, k.method);
      text += ",\"requests\":";
      append_number(text, v.requests);
      text += ",\"topic\":";
      append_string(text, k.topic);
      text += "}";
    }
  }
  text += "],\"version\":1}";
  const std::string tmp = path() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error("cannot write " + tmp + ": " + std::strerror(errno));
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const std::string why = std::strerror(errno);
      ::close(fd);
      return make_error("cannot write " + tmp + ": " + why);
    }
    done += static_cast<std::size_t>(n);
  }
  // The rename is atomic; fsync first so a crash leaves either the old or the new ledger.
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    return make_error("cannot flush " + tmp + ": " + std::strerror(errno));
  if (std::rename(tmp.c_str(), path().c_str()) != 0)
    return make_error("cannot replace " + path() + ": " + std::strerror(errno));
  return {};
}

std::vector<std::pair<LedgerKey, LedgerValue>> Ledger::query(std::int64_t from_unix,
                                                             std::int64_t to_unix) const {
  std::vector<std::pair<LedgerKey, LedgerValue>> out;
  std::lock_guard lock(mutex_);
  for (const auto& [k, v] : buckets_) {
    const std::int64_t start = k.hour * 3600;
    if (start + std::int64_t{k.hours} * 3600 > from_unix && start < to_unix) out.emplace_back(k, v);
  }
  return out;
}

}  // namespace fc::exporter
