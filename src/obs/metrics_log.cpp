#include "obs/metrics_log.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace shardtrain {

MetricsLog::MetricsLog(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) {
    fail("cannot open metrics file {}: {}; HINT: check that its directory exists and is writable",
         path, std::strerror(errno));
  }
}

MetricsLog::~MetricsLog() {
  if (file_ != nullptr) std::fclose(file_);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept
    : file_(std::exchange(other.file_, nullptr)), path_(std::move(other.path_)) {}

MetricsLog& MetricsLog::operator=(MetricsLog&& other) noexcept {
  if (this != &other) {
    if (file_ != nullptr) std::fclose(file_);
    file_ = std::exchange(other.file_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

void MetricsLog::append(const nlohmann::json& record) {
  if (file_ == nullptr) return;
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);
}

}  // namespace shardtrain
