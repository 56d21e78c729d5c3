#include "io/hub/hub_progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "obs/progress.h"

namespace shardtrain {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string format_bytes(uint64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, units[unit]);
}

HubProgress::HubProgress(std::string what, uint64_t total_bytes, uint64_t resumed_bytes,
                         double interval_s, Sink sink, Clock clock)
    : what_(std::move(what)),
      total_(total_bytes),
      resumed_(resumed_bytes),
      done_(resumed_bytes),
      interval_s_(interval_s),
      sink_(sink ? std::move(sink)
                 : Sink([](const std::string& l) { std::fprintf(stderr, "%s\n", l.c_str()); })),
      clock_(clock ? std::move(clock) : Clock(steady_seconds)) {
  start_s_ = last_s_ = clock_();
  sink_(line(done_, 0) + (resumed_ > 0 ? " (resumed)" : ""));
}

std::string HubProgress::line(uint64_t done, double elapsed_s) const {
  const double fraction = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1;
  std::string text = fmt::format("hub: {}  {} / {} ({:.1f}%)", what_, format_bytes(done),
                                 format_bytes(total_), 100.0 * fraction);
  const uint64_t transferred = done - resumed_;
  if (elapsed_s > 0 && transferred > 0) {
    const double rate = static_cast<double>(transferred) / elapsed_s;
    text += fmt::format(" at {}/s", format_bytes(static_cast<uint64_t>(rate)));
    if (done < total_) {
      text += " | ETA " + format_duration(static_cast<double>(total_ - done) / rate);
    }
  }
  return text;
}

void HubProgress::advance(uint64_t bytes) {
  done_ += bytes;
  const double now = clock_();
  if (now - last_s_ < interval_s_) return;
  last_s_ = now;
  sink_(line(done_, now - start_s_));
}

void HubProgress::finish() { sink_(line(done_, clock_() - start_s_) + " done"); }

}  // namespace shardtrain
