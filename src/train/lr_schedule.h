// Learning-rate schedule: linear warmup, then cosine, linear or constant decay to min_lr.
//
//   step <= warmup_steps:  lr * step / warmup_steps
//   after warmup, with progress = (step - warmup_steps) / (total_steps - warmup_steps) in [0, 1]:
//     cosine:    min_lr + 0.5 * (lr - min_lr) * (1 + cos(pi * progress))
//     linear:    lr - (lr - min_lr) * progress
//     constant:  lr
// Steps are 1-based: step 1 is the first optimizer step, step total_steps the last (which lands
// exactly on min_lr for cosine and linear).
// REQUIRES: 1 <= step, total_steps >= 1, warmup_steps <= total_steps (TrainConfig::validate
// guarantees these for a validated config); steps past total_steps clamp progress to 1.
#pragma once

#include <cstdint>

#include "train/train_config.h"

namespace shardtrain {

double learning_rate(const OptimConfig& optim, int64_t step, int64_t total_steps);

}  // namespace shardtrain
