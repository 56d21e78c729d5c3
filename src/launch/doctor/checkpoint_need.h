// What a job's checkpoints will occupy on disk, from its TOML config (the model's config.json
// gives the parameter count): each checkpoint holds the fp32 master weights and both Adam
// moments of every parameter (12 bytes/param, train/checkpoint.h), the newest
// train.keep_checkpoints are kept and one more is written before the oldest is pruned.
#pragma once

#include <string>

#include "launch/doctor/host_checks.h"

namespace shardtrain::doctor {

struct JobCheckpoints {
  std::string checkpoint_dir;  // train.checkpoint_dir ("" = none)
  CheckpointNeed need;
};

// Throws Error naming the file or key when the config or the model's config.json is bad.
JobCheckpoints job_checkpoints_from_config(const std::string& config_path);

}  // namespace shardtrain::doctor
