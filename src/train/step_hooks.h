// StepHooks: code the Trainer (train/trainer.h) runs at a fixed point of every step, injected by
// whoever builds it. Metrics do not use it: they read StepReport.
//
// WorkerHooks: what a test build injects into a `shardtrain train` worker so that the launcher,
// watchdog and checkpoint tests can make a real worker hang or write slowly, and the FSDP tests
// run it on ops that defer their aside work. The shipped binary
// passes none (cli/main.cpp); the test worker binary (cli/testing/test_worker_hooks.h) fills
// them from its SHARDTRAIN_TEST_* variables; nothing in the product reads those.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>

namespace shardtrain {

class Ops;

class StepHooks {
 public:
  virtual ~StepHooks() = default;
  // At the start of `step`, after the heartbeat names the step and before any of its work.
  virtual void before_step(int64_t step) = 0;
};

struct WorkerHooks {
  // Rank `rank`'s step hooks, or null; called once by `shardtrain train` per worker process.
  std::function<std::unique_ptr<StepHooks>(int rank)> step_hooks;
  // Sleep before each checkpoint file this long (a slow disk); 0 = none.
  std::chrono::milliseconds checkpoint_write_delay{0};
  // The ops of a worker that trains on the CPU, instead of the reference backend's (ops with
  // test behaviour: ops/testing/); null = the backend's.
  std::function<std::unique_ptr<Ops>()> cpu_ops;
};

}  // namespace shardtrain
