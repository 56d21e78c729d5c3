// MetricsLog: appends one JSON object per line to a file (the `--metrics PATH` interface); a
// training step's record is metrics_record(StepReport).
// Each record is written and flushed whole, so a crash leaves at most a missing last line.
// Movable, not copyable.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "obs/step_report.h"

namespace shardtrain {

// The JSONL record of a step: step, loss, lr, grad_norm, tokens (= tokens_total), tokens_per_s,
// elapsed_s, step_time_s, data_wait_s, and comm_wait_s (= exposed_comm_s), host_wait_s,
// checkpoint_stall_s, epoch and mfu when known, and eval_loss, eval_ppl, eval_tokens,
// eval_sequences, eval_time_s on steps that ran an evaluation.
nlohmann::json metrics_record(const StepReport& report);

class MetricsLog {
 public:
  MetricsLog() = default;
  // Opens `path` for appending (a file, created if missing, or a stream such as /dev/stdout or a
  // FIFO with a reader); throws Error naming it if it cannot be opened, and at once for a FIFO
  // that no process reads (the open would wait forever).
  explicit MetricsLog(const std::string& path);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&& other) noexcept;

  bool enabled() const { return file_ != nullptr; }
  void append(const nlohmann::json& record);
  void append(const StepReport& report) { append(metrics_record(report)); }

 private:
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace shardtrain
