#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace shardtrain::log {
namespace {

Level level_from_env() {
  const char* value = std::getenv("SHARDTRAIN_LOG");
  if (value == nullptr) return Level::kInfo;
  if (std::strcmp(value, "debug") == 0) return Level::kDebug;
  if (std::strcmp(value, "warn") == 0) return Level::kWarn;
  if (std::strcmp(value, "error") == 0) return Level::kError;
  return Level::kInfo;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kDebug: return "D";
    case Level::kInfo: return "I";
    case Level::kWarn: return "W";
    case Level::kError: return "E";
  }
  return "?";
}

}  // namespace

Level current_level() { return static_cast<Level>(level_storage().load()); }
void set_level(Level level) { level_storage().store(static_cast<int>(level)); }

void write(Level level, const std::string& message) {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  std::tm local{};
  localtime_r(&seconds, &local);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &local);
  std::fprintf(stderr, "%s %s %s\n", level_name(level), stamp, message.c_str());
}

}  // namespace shardtrain::log
