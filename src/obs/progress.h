// The per-step record every consumer of a step reads (console line, JSONL log, metrics), and
// the console progress line made from it:
//   step 12/100 | loss 2.3456 | lr 3.00e-04 | gnorm 1.234 | 12345 tok/s | MFU 41.2% |
//   epoch 0.35 | 0:00:12 | ETA 0:01:28
// (one line; epoch and MFU only where known).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardtrain {

struct StepReport {
  int64_t step = 0, total_steps = 0;
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0;  // tokens/s: all ranks, whole run
  double elapsed_s = 0;
  // This rank's view of the step:
  std::optional<double> epoch;  // passes over the data so far
  std::optional<double> mfu;    // ratio, 0..1; nullopt without a known device peak
  double step_time_s = 0, data_wait_s = 0, checkpoint_stall_s = 0;
  std::optional<double> comm_wait_s;  // exposed communication, where measured
  int64_t last_checkpoint_step = 0;   // 0 = none yet
  int64_t local_tokens = 0;           // tokens this rank trained on in this step
  int world_size = 1;
  double device_memory_peak_bytes = 0;
};

std::string format_duration(double seconds);  // "1:02:03"
std::string format_progress_line(const StepReport& report);

}  // namespace shardtrain
