// Logging: leveled, timestamped lines on stderr. Workers launched by the launcher get a rank
// prefix from the launcher, so this file adds none. Level from SHARDTRAIN_LOG
// (debug|info|warn|error).
#pragma once

#include <fmt/format.h>

#include <string>

namespace shardtrain::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

Level current_level();
void set_level(Level level);
void write(Level level, const std::string& message);
// Throws Error when SHARDTRAIN_LOG is set to anything but debug, info, warn or error (the level
// itself is read once, before main, where an error cannot be reported).
void check_level_env();

template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) {
  if (current_level() <= Level::kDebug)
    write(Level::kDebug, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... a) {
  if (current_level() <= Level::kInfo)
    write(Level::kInfo, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) {
  if (current_level() <= Level::kWarn)
    write(Level::kWarn, fmt::format(f, std::forward<Args>(a)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... a) {
  write(Level::kError, fmt::format(f, std::forward<Args>(a)...));
}

}  // namespace shardtrain::log
