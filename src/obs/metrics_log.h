// MetricsLog: appends one JSON object per line to a file (the `--metrics PATH` interface).
// Each record is written and flushed whole, so a crash leaves at most a missing last line.
// Movable, not copyable.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace shardtrain {

class MetricsLog {
 public:
  MetricsLog() = default;
  // Opens `path` for appending; throws Error naming it if it cannot be opened.
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;

  bool enabled() const { return file_ != nullptr; }
  void append(const nlohmann::json& record);

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace shardtrain
