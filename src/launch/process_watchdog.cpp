#include "launch/process_watchdog.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace shardtrain::launch {

char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return '?';
  // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return '?';
  return stat[close + 2];
}

std::optional<std::string> ProcessWatchdog::check(const std::vector<Worker>& workers) {
  const auto now = std::chrono::steady_clock::now();
  for (const Worker& w : workers) {
    const char state = process_state(w.pid);
    const bool stuck = state == 'T' || state == 't' || state == 'D';
    if (!stuck) {
      stuck_since_.erase(w.pid);
      continue;
    }
    const auto [it, fresh] = stuck_since_.try_emplace(w.pid, now);
    if (now - it->second < timeout_) continue;
    const double seconds = std::chrono::duration<double>(now - it->second).count();
    return fmt::format(
        "rank {} (pid {}) made no progress for {:.0f} s: its process is {} (state {})", w.rank,
        w.pid, seconds, state == 'D' ? "in uninterruptible sleep" : "stopped", state);
  }
  return std::nullopt;
}

}  // namespace shardtrain::launch
