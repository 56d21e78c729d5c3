// The job the update-aside tests train (header-only; tests only): the memory-lever job
// (tests/golden/llama_gqa, memory_levers_job.h) with clipping, two micro-batches a step and an
// evaluation every two steps, the paths a step takes between one optimizer update and the next.
// train_update_aside_job(ops, device, dir, name) trains it on `ops` into dir/name and returns
// the loss curve and the saved model's bytes (a LeverRun).
#pragma once

#include <filesystem>
#include <string>

#include "train/testing/memory_levers_job.h"

namespace shardtrain::testing {

inline LeverRun train_update_aside_job(Ops& ops, DeviceChoice device,
                                       const std::filesystem::path& dir, const std::string& name) {
  TrainConfig config;
  use_lever_job_data(config, dir);
  config.data.eval_path = config.data.path;
  config.train.steps = 6;
  config.train.micro_batch = 2;
  config.train.grad_accum = 2;
  config.train.max_grad_norm = 0.5;
  config.train.eval_every = 2;
  config.train.device = device;
  config.train.output_dir = (dir / name).string();
  config.optim.lr = 3e-3;
  config.optim.warmup_steps = 2;
  config.optim.weight_decay = 0.01;
  return train_lever_run(config, ops);
}

}  // namespace shardtrain::testing
