// StepHooks: code the Trainer (train/trainer.h) runs at a fixed point of every step, injected by
// whoever builds it; tests use it (train/test_hang_hook.h). Metrics do not: they read StepReport.
#pragma once

#include <cstdint>

namespace shardtrain {

class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // At the start of `step`, after the heartbeat names the step and before any of its work.
  virtual void before_step(int64_t step) = 0;
};

}  // namespace shardtrain
