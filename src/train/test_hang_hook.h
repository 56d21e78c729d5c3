// Test support built into the binary, for the launcher's hang watchdog test
// (src/train/restart_resume_dist_test.cpp, docs/launcher.md): SHARDTRAIN_TEST_HANG_AT_STEP=N
// makes rank SHARDTRAIN_TEST_HANG_RANK (default 0) stop forever at the start of step N, as a rank
// stuck outside any collective would. `shardtrain train` hands the hook to the Trainer.
#pragma once

#include <memory>

#include "train/step_hooks.h"

namespace shardtrain {

// The hook for `rank` when SHARDTRAIN_TEST_HANG_AT_STEP is set and names a step, else null.
std::unique_ptr<StepHooks> hang_hook_from_test_env(int rank);

}  // namespace shardtrain
