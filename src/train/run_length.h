// How long a run is and what a resume changed about it.
//
// plan_run_length(): the run's length in optimizer steps (train.steps, or train.epochs over the
// training data, TrainConfig::total_steps_for) and the schedule it runs: optim with
// warmup_steps clamped to that length (a warmup longer than the run is not an error: the
// warning says so and what it became).
//
// resume_changes(): what differs between the run that saved a checkpoint (its resolved config,
// recorded in the checkpoint, and its world size) and this one, as "what: before -> now" lines:
// the run's length, the global batch, and the schedule (optim.schedule, lr, min_lr,
// warmup_steps). A resumed run follows the new settings; the caller warns with these lines.
// A saved config that no longer loads (a key this build does not know) is compared by its
// length alone.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "train/train_config.h"

namespace shardtrain {

struct RunLength {
  int64_t total_steps = 0;
  int64_t global_batch = 0;  // sequences per step over all ranks
  OptimConfig schedule;      // optim, warmup_steps clamped to total_steps
  std::vector<std::string> warnings;
};

// REQUIRES: config validated. `sequences` = training sequences, `world` = data-parallel ranks.
RunLength plan_run_length(const TrainConfig& config, size_t sequences, int world);

struct SavedRun {
  std::string config_toml;  // "" = unknown (compare the length only)
  int world_size = 1;
  int64_t total_steps = 0;
};

std::vector<std::string> resume_changes(const SavedRun& saved, const TrainConfig& now, int world,
                                        int64_t now_total_steps);

}  // namespace shardtrain
