// RankSnapshot: what one training rank tells its node's metrics endpoint after a step: the
// latest step's values plus this process's counters. A rank under the launcher publishes it as
// one small JSON file (train/rank_metrics_publisher.h); the endpoint reads it back
// (launch/node_metrics.h). Optional values (MFU without a known peak, exposed communication
// where the backend does not measure it, the epoch of a dataset of unknown size) are nullopt
// and stored as JSON null.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "obs/prometheus_text.h"

namespace shardtrain {

struct RankSnapshot {
  std::string instance;  // the publishing process (pid and start time): a restart changes it
  int rank = 0, local_rank = 0, world_size = 1;
  int64_t step = 0, total_steps = 0;
  std::optional<double> epoch;
  double loss = 0, learning_rate = 0, grad_norm = 0;
  std::optional<double> aux_loss;  // mixture of experts: the load-balancing loss (StepReport)
  double tokens_per_second = 0;    // this rank's tokens over its last step's time
  std::optional<double> mfu;       // ratio, 0..1
  // The last evaluation on data.eval_path (obs/eval_report.h); nullopt before the first.
  std::optional<double> eval_loss, eval_perplexity;
  double step_seconds = 0, data_wait_seconds = 0, checkpoint_stall_seconds = 0;
  std::optional<double> exposed_communication_seconds;
  std::optional<double> host_wait_seconds;  // StepReport::host_wait_s; nullopt on CPU
  int64_t last_checkpoint_step = 0;         // 0 = none yet
  double device_memory_peak_bytes = 0, resident_memory_bytes = 0;
  // Counters of this process (CounterContinuity makes them survive restarts):
  double tokens_total = 0, steps_total = 0;
  HistogramValue step_seconds_histogram;
};

nlohmann::json snapshot_to_json(const RankSnapshot& snapshot);
// Throws Error naming `source` (a file path) when the JSON lacks a field or has a wrong type.
RankSnapshot snapshot_from_json(const nlohmann::json& json, const std::string& source);

// The step-time histogram's bucket bounds, in seconds (10 ms to 5 min).
std::vector<double> step_seconds_bounds();

}  // namespace shardtrain
