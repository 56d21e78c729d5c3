// Single-process training: the `shardtrain train` job on one device.
//
// Loads (or randomly initialises) the model named by [model], streams micro-batches from
// [data] through a seeded shuffling sampler, runs forward/backward with gradient
// accumulation, clips the global gradient norm, applies AdamW with the [optim] schedule, prints
// a progress line per step, appends metrics, and saves a Hugging Face checkpoint at the end
// when train.output_dir is set.
#pragma once

#include <string>
#include <vector>

#include "dist/worker_env.h"
#include "ops/backend.h"
#include "ops/ops.h"
#include "train/train_config.h"

namespace shardtrain {

struct TrainOutcome {
  std::vector<double> losses;  // one per optimizer step
  double tokens_per_s = 0;     // over the whole run
};

struct TrainRunOptions {
  std::string metrics_path;  // "" = no metrics file
  bool quiet = false;        // no per-step console lines
  WorkerEnv worker;          // the launcher's contract, parsed once by the caller (one process: {})
  CudaComputeStream compute;  // the CUDA stream of `ops`'s backend, for NCCL (ops/backend.h)
};

// Throws Error for any user mistake (config, paths, data, checkpoint).
TrainOutcome run_training(const TrainConfig& config, Ops& ops, const TrainRunOptions& options);

}  // namespace shardtrain
