#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "export/export.h"

namespace fc::exporter {

Result<std::unique_ptr<Ledger>> Ledger::open(const std::string& state_dir) {
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  if (ec)
    return make_error("cannot create the state dir " + state_dir + ": " + ec.message() +
                      " (set state_dir in the config to a writable directory)");
  std::unique_ptr<Ledger> ledger(new Ledger(state_dir));
  const std::string path = ledger->path();
  std::ifstream in(path);
  if (!in) return ledger;  // first start
  try {
    const auto doc = nlohmann::json::parse(in);
    for (const auto& row : doc.at("buckets")) {
      LedgerKey key{row.at("hour").get<std::int64_t>(), row.at("client_id").get<std::string>(),
                    row.at("group_id").get<std::string>(), row.at("topic").get<std::string>(),
                    row.at("method").get<std::string>()};
      LedgerValue value{row.at("bytes").get<std::uint64_t>(), row.at("requests").get<std::uint64_t>(),
                        row.at("errors").get<std::uint64_t>(), row.at("cost_api").get<double>(),
                        row.at("cost_egress").get<double>()};
      ledger->buckets_[key] = value;
    }
  } catch (const std::exception& e) {
    return make_error("the chargeback ledger " + path + " cannot be read (" + e.what() +
                      "); move it away to start a new one, fetchcostd will not overwrite it");
  }
  return ledger;
}

std::string Ledger::path() const { return dir_ + "/ledger.json"; }

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

Result<void> Ledger::save() const {
  // Written row by row: a JSON tree of every bucket cost ~1.5 KiB per row, tens of MiB every
  // save once a churning population of client-ids had read remotely (the reliability soak).
  // Replace mode: a ledger written before keys were sanitized may still hold invalid UTF-8.
  const auto str = [](const std::string& v) {
    return nlohmann::json(v).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  const auto num = [](double v) { return nlohmann::json(v).dump(); };
  std::string text = "{\"buckets\":[";
  {
    std::lock_guard lock(mutex_);
    bool first = true;
    for (const auto& [k, v] : buckets_) {
      if (!first) text += ',';
      first = false;
      text += "{\"bytes\":" + std::to_string(v.bytes) + ",\"client_id\":" + str(k.client_id) +
              ",\"cost_api\":" + num(v.cost_api) + ",\"cost_egress\":" + num(v.cost_egress) +
              ",\"errors\":" + std::to_string(v.errors) + ",\"group_id\":" + str(k.group_id) +
              ",\"hour\":" + std::to_string(k.hour) + ",\"method\":" + str(k.method) +
              ",\"requests\":" + std::to_string(v.requests) + ",\"topic\":" + str(k.topic) + "}";
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
    if (start + 3600 > from_unix && start < to_unix) out.emplace_back(k, v);
  }
  return out;
}

}  // namespace fc::exporter
