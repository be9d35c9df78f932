#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "export/export.h"

namespace fc::exporter {

Result<std::unique_ptr<AuditLog>> AuditLog::open(const std::string& path, std::uint64_t max_bytes,
                                                 int keep) {
  std::unique_ptr<AuditLog> log(new AuditLog());
  log->path_ = path;
  log->max_bytes_ = max_bytes;
  log->keep_ = keep;
  if (path.empty()) return log;  // memory only: the recent-reads ring for the API
  log->file_ = std::fopen(path.c_str(), "a");
  if (!log->file_)
    return make_error("cannot open the audit log " + path + ": " + std::strerror(errno) +
                      " (set audit_log.path to a writable file, or disable it)");
  std::error_code ec;
  log->size_ = std::filesystem::file_size(path, ec);
  return log;
}

AuditLog::~AuditLog() {
  if (file_) std::fclose(file_);
}

void AuditLog::rotate() {
  std::fclose(file_);
  for (int i = keep_ - 1; i >= 1; --i) {
    std::rename((path_ + "." + std::to_string(i)).c_str(),
                (path_ + "." + std::to_string(i + 1)).c_str());
  }
  if (keep_ > 0)
    std::rename(path_.c_str(), (path_ + ".1").c_str());
  else
    std::remove(path_.c_str());
  file_ = std::fopen(path_.c_str(), "a");
  size_ = 0;
}

void AuditLog::write(const AuditRecord& record) {
  // Names as the metrics show them (valid UTF-8, no control characters, at most 255 bytes): a
  // 32 KiB client-id must not fill the recent ring, and top's drill-down filters by the label.
  AuditRecord r = record;
  std::string client, group, topic;
  r.client_id = sensors::sanitize_label_into(record.client_id, client);
  r.group_id = sensors::sanitize_label_into(record.group_id, group);
  r.topic = sensors::sanitize_label_into(record.topic, topic);
  {
    std::lock_guard lock(recent_mutex_);
    RecentRead read{r.unix_ms,
                    std::string(r.client_id),
                    std::string(r.group_id),
                    std::string(r.topic),
                    r.partition,
                    std::string(r.object_key),
                    r.bytes,
                    r.status,
                    std::string(r.method)};
    if (recent_.size() < kRecentCapacity)
      recent_.push_back(std::move(read));
    else
      recent_[recent_next_] = std::move(read);
    recent_next_ = (recent_next_ + 1) % kRecentCapacity;
  }
  if (!file_) return;
  // dump() escapes every string (replace mode keeps invalid UTF-8 from throwing).
  nlohmann::json line{
      {"ts_ms", r.unix_ms},       {"client_id", r.client_id},   {"group_id", r.group_id},
      {"topic", r.topic},         {"partition", r.partition},   {"fetch_offset", r.fetch_offset},
      {"max_bytes", r.max_bytes}, {"object_key", r.object_key}, {"bytes", r.bytes},
      {"status", r.status},       {"method", r.method}};
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.push_back('\n');
  if (size_ + text.size() > max_bytes_ && size_ > 0) rotate();
  if (!file_) return;
  std::fwrite(text.data(), 1, text.size(), file_);
  std::fflush(file_);
  size_ += text.size();
  ++written_;
}

}  // namespace fc::exporter

namespace fc::exporter {

std::vector<RecentRead> AuditLog::recent(std::string_view client_id, std::size_t limit) const {
  std::vector<RecentRead> out;
  std::lock_guard lock(recent_mutex_);
  const std::size_t n = recent_.size();
  for (std::size_t i = 0; i < n && out.size() < limit; ++i) {
    // Walk backwards from the newest slot.
    const RecentRead& r = recent_[(recent_next_ + kRecentCapacity - 1 - i) % kRecentCapacity % n];
    if (client_id.empty() || r.client_id == client_id) out.push_back(r);
  }
  return out;
}

}  // namespace fc::exporter
