// PhaseProgress: a progress line with an ETA for a long preparation phase (tokenizing a data
// file, loading pretrained weights or a checkpoint, resharding), so a user waiting minutes
// before the first step sees it move:
//   prepare data.jsonl: 12345/27000 lines (45.7%) | 0:00:12 | ETA 0:00:15
// advance() may be called from any thread. A line is written at most every `interval`, the
// first only after `interval` has passed (short phases stay silent), and, when at least one
// line was written, a last one when the phase completes (done == total). Not copyable.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

namespace shardtrain {

class PhaseProgress {
 public:
  using Sink = std::function<void(const std::string& line)>;  // default: log::info
  using Clock = std::function<double()>;                      // seconds; default: steady

  // `what` names the phase and its input ("prepare data.jsonl"), `unit` the things counted
  // ("lines"). `enabled` false (ranks other than 0) makes every call a no-op.
  PhaseProgress(std::string what, uint64_t total, std::string unit, bool enabled = true,
                double interval_s = 5.0, Sink sink = {}, Clock clock = {});
  PhaseProgress(const PhaseProgress&) = delete;
  PhaseProgress& operator=(const PhaseProgress&) = delete;

  void advance(uint64_t count = 1);

  // The line for `done` of the total after `elapsed_s` (ETA from the rate so far).
  std::string line(uint64_t done, double elapsed_s) const;

 private:
  const std::string what_, unit_;
  const uint64_t total_;
  const bool enabled_;
  const double interval_s_;
  Sink sink_;
  Clock clock_;
  double start_s_ = 0;
  std::atomic<uint64_t> done_{0};
  std::mutex mutex_;  // last_line_s_, wrote_
  double last_line_s_ = 0;
  bool wrote_ = false;
};

}  // namespace shardtrain
