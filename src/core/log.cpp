#include "core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "core/env_switch.h"
#include "core/error.h"

namespace shardtrain::log {
namespace {

// SHARDTRAIN_LOG's value; unset or empty means info (the first choice).
Level parse_level(const char* value) {
  switch (parse_env_choice("SHARDTRAIN_LOG", value, {"info", "debug", "warn", "error"})) {
    case 1:
      return Level::kDebug;
    case 2:
      return Level::kWarn;
    case 3:
      return Level::kError;
    default:
      return Level::kInfo;
  }
}

// Static initialisation cannot report an error: a bad value logs at info until
// check_level_env, which the CLI calls first, refuses it.
Level level_from_env() {
  try {
    return parse_level(std::getenv("SHARDTRAIN_LOG"));
  } catch (const Error&) {
    return Level::kInfo;
  }
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::kDebug:
      return "D";
    case Level::kInfo:
      return "I";
    case Level::kWarn:
      return "W";
    case Level::kError:
      return "E";
  }
  return "?";
}

}  // namespace

void check_level_env() { parse_level(std::getenv("SHARDTRAIN_LOG")); }

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
