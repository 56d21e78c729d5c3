#include "train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace shardtrain {

double learning_rate(const OptimConfig& optim, int64_t step, int64_t total_steps) {
  SHARDTRAIN_CHECK(
      step >= 1 && total_steps >= 1 && optim.warmup_steps >= 0 && optim.warmup_steps <= total_steps,
      "step {} total {} warmup {}", step, total_steps, optim.warmup_steps);
  if (step <= optim.warmup_steps) {
    return optim.lr * static_cast<double>(step) / static_cast<double>(optim.warmup_steps);
  }
  // decay_steps is 0 only when warmup fills the run and step is past its end.
  const int64_t decay_steps = total_steps - optim.warmup_steps;
  const double progress = decay_steps == 0
                              ? 1.0
                              : std::clamp(static_cast<double>(step - optim.warmup_steps) /
                                               static_cast<double>(decay_steps),
                                           0.0, 1.0);
  switch (optim.schedule) {
    case LrScheduleKind::kCosine:
      return optim.min_lr +
             0.5 * (optim.lr - optim.min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
    case LrScheduleKind::kLinear:
      return optim.lr - (optim.lr - optim.min_lr) * progress;
    case LrScheduleKind::kConstant:
      return optim.lr;
  }
  SHARDTRAIN_CHECK(false, "unknown schedule {}", static_cast<int>(optim.schedule));
  return optim.lr;
}

}  // namespace shardtrain
