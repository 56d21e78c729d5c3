// The progress of one Hub download on stderr, so a user waiting for gigabytes sees them move:
//   hub: org/name model.safetensors  1.2 GiB / 4.9 GiB (24.5%) at 85.3 MiB/s | ETA 0:00:44
// A line at the start, then at most one every `interval_s`, and one at the end. Resumed bytes
// count as done but not towards the rate.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace shardtrain {

std::string format_bytes(uint64_t bytes);  // "512 B", "1.5 KiB", "3.2 MiB", "1.2 GiB"

class HubProgress {
 public:
  using Sink = std::function<void(const std::string& line)>;  // default: stderr
  using Clock = std::function<double()>;                      // seconds; default: steady

  HubProgress(std::string what, uint64_t total_bytes, uint64_t resumed_bytes,
              double interval_s = 2.0, Sink sink = {}, Clock clock = {});
  void advance(uint64_t bytes);
  void finish();

  // The line for `done` bytes `elapsed_s` after the start.
  std::string line(uint64_t done, double elapsed_s) const;

 private:
  std::string what_;
  uint64_t total_, resumed_, done_;
  double interval_s_;
  Sink sink_;
  Clock clock_;
  double start_s_, last_s_;
};

}  // namespace shardtrain
