#include "obs/phase_progress.h"

#include <fmt/format.h>

#include "core/log.h"
#include "obs/progress.h"

namespace shardtrain {
namespace {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

PhaseProgress::PhaseProgress(std::string what, uint64_t total, std::string unit, bool enabled,
                             double interval_s, Sink sink, Clock clock)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(enabled),
      interval_s_(interval_s),
      sink_(sink ? std::move(sink) : Sink([](const std::string& l) { log::info("{}", l); })),
      clock_(clock ? std::move(clock) : Clock(steady_seconds)) {
  if (enabled_) start_s_ = last_line_s_ = clock_();
}

std::string PhaseProgress::line(uint64_t done, double elapsed_s) const {
  const double fraction = total_ > 0 ? static_cast<double>(done) / static_cast<double>(total_) : 1;
  std::string text = fmt::format("{}: {}/{} {} ({:.1f}%) | {}", what_, done, total_, unit_,
                                 100.0 * fraction, format_duration(elapsed_s));
  if (done > 0 && done < total_) {
    const double remaining_s =
        elapsed_s * static_cast<double>(total_ - done) / static_cast<double>(done);
    text += " | ETA " + format_duration(remaining_s);
  }
  return text;
}

void PhaseProgress::advance(uint64_t count) {
  if (!enabled_) return;
  const uint64_t done = done_.fetch_add(count) + count;
  const double now = clock_();
  std::lock_guard<std::mutex> lock(mutex_);
  const bool complete = done >= total_;
  if (now - last_line_s_ < interval_s_ && !(complete && wrote_)) return;
  if (complete && !wrote_ && now - start_s_ < interval_s_) return;  // short: silent
  last_line_s_ = now;
  wrote_ = true;
  sink_(line(done, now - start_s_));
}

}  // namespace shardtrain
