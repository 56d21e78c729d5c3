// The test worker's hooks: what `shardtrain_test_worker` (cli/testing/test_worker_main.cpp, the
// shipped main plus this module) reads from its environment and installs through the hook
// interfaces the product exposes but never fills itself (train/step_hooks.h WorkerHooks,
// ops/backend.h set_test_kernel_overrides and set_test_cuda_device_limits). Tests that need a
// real worker to hang, write slowly or run another attention kernel launch this binary instead
// of `shardtrain` (launcher, watchdog, checkpoint tests; tools/device scripts; bench +wgmma):
//   SHARDTRAIN_TEST_HANG_AT_STEP=N        rank SHARDTRAIN_TEST_HANG_RANK (default 0) stops
//   SHARDTRAIN_TEST_HANG_RANK=R           forever at the start of step N, as a rank stuck
//                                         outside any collective would (N >= 1)
//   SHARDTRAIN_TEST_STOP_AT_START_RANK=R  the launched worker of RANK R stops itself (SIGSTOP)
//                                         before any work, as a rank frozen while it starts
//                                         (before it connects to its peers) would; a process
//                                         without RANK (the launcher) never stops
//   SHARDTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS=N   sleep N ms before each checkpoint file
//   SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma|wgmma-forward|mma   the cp.async wgmma kernels, its
//                                         forward beside the warp-specialised backward, or the
//                                         mma.sync kernels
//   SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS=4|8   4-warp mma.sync forward blocks
//   SHARDTRAIN_TEST_ATTENTION_BACKWARD_WARPS=4|8  4-warp mma.sync backward blocks
//   SHARDTRAIN_TEST_ATTENTION_HEADS_PER_BLOCK=N   the flash backward's GQA slice (N >= 1)
//   SHARDTRAIN_TEST_DEVICE_LIMITS=a100|a10g|l4|h100  dispatch kernels for that GPU's limits
//   SHARDTRAIN_TEST_DEFERRED_ASIDE=1|ignore-waits  a CPU worker trains on ops that defer their
//                                         aside work for real (ops/testing/deferred_aside_ops.h),
//                                         honouring the waits or ignoring them (the control),
//                                         and logs how many updates ran at their unit's wait
// Unset or empty = no hook. A malformed value is an Error naming the variable and what it
// takes (the worker exits 2 before any work).
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "ops/kernel_overrides.h"
#include "train/step_hooks.h"

namespace shardtrain::testing {

// A variable's value, or nullopt when unset (getenv, or a map in unit tests).
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// What the variables ask for, parsed and checked.
struct TestWorkerSettings {
  int64_t hang_at_step = 0;  // 0 = no hang
  int hang_rank = 0;
  int stop_at_start_rank = -1;  // -1 = none
  int worker_rank = -1;         // RANK, -1 when unset (not a launched worker)
  int64_t checkpoint_write_delay_ms = 0;
  KernelOverrides kernels;
  std::string device_limits;   // "" = the present GPU
  std::string deferred_aside;  // "" = the backend's ops, "1" or "ignore-waits"
};

// Throws Error naming the variable for a malformed value.
TestWorkerSettings read_test_worker_settings(const EnvLookup& env);

// Stops the process first when `settings` ask it to; installs `settings`' kernel overrides and
// device limits (process-wide, ops/backend.h) and returns the WorkerHooks for `train`.
WorkerHooks install_test_worker_hooks(const TestWorkerSettings& settings);

// read_test_worker_settings(getenv) then install_test_worker_hooks: run_main's hooks callback.
WorkerHooks test_worker_hooks_from_environment();

}  // namespace shardtrain::testing
