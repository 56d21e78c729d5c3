// The job the memory-lever tests train on one rank (header-only; tests only): tests/golden/
// llama_gqa from its pretrained weights on generated sequences, no clipping, one micro-batch per
// step, so every lever applies: fsdp.compute_copy keep | on_demand and optim.update_in_backward.
// train_memory_levers(device, copy, in_backward, dir) trains it and returns the loss curve and
// the saved model's bytes, which the tests compare bit for bit between levers (train_lever_run:
// the same for any config and ops).
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ops/backend.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace shardtrain::testing {

struct LeverRun {
  std::vector<double> losses;
  std::string model_bytes;  // output_dir/model.safetensors (fp32 masters)
};

inline void write_lever_data(const std::filesystem::path& path) {
  std::ofstream data(path);
  for (int line = 0; line < 32; ++line) {
    nlohmann::json ids = nlohmann::json::array();
    for (int t = 0; t < 24; ++t) ids.push_back((line * 7 + t * (1 + line % 5)) % 96);
    data << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
  }
}

// Points `config` at the job's model (tests/golden/llama_gqa) and data: write_lever_data's
// 24-token sequences, written to dir/data.jsonl.
inline void use_lever_job_data(TrainConfig& config, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  write_lever_data(dir / "data.jsonl");
  config.model.path = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/llama_gqa";
  config.data.path = (dir / "data.jsonl").string();
  config.data.seq_len = 24;
}

// Trains `config` on `ops` quietly: its loss curve and the saved model's bytes.
inline LeverRun train_lever_run(const TrainConfig& config, Ops& ops) {
  TrainRunOptions options;
  options.quiet = true;
  LeverRun run;
  run.losses = run_training(config, ops, options).losses;
  std::ifstream model(std::filesystem::path(config.train.output_dir) / "model.safetensors",
                      std::ios::binary);
  run.model_bytes.assign(std::istreambuf_iterator<char>(model), {});
  return run;
}

// The largest relative difference between two runs' losses, step by step.
inline double largest_relative_loss_difference(const LeverRun& a, const LeverRun& b) {
  double worst = 0;
  for (size_t s = 0; s < a.losses.size() && s < b.losses.size(); ++s) {
    worst = std::max(worst, std::abs(a.losses[s] - b.losses[s]) / std::abs(a.losses[s]));
  }
  return worst;
}

inline LeverRun train_memory_levers(DeviceChoice device, const std::string& compute_copy,
                                    bool update_in_backward, const std::filesystem::path& dir) {
  TrainConfig config;
  use_lever_job_data(config, dir);
  config.train.steps = 12;
  config.train.micro_batch = 4;
  config.train.max_grad_norm = 0;
  config.train.device = device;
  config.train.output_dir =
      (dir / ("out_" + compute_copy + (update_in_backward ? "_ib" : ""))).string();
  config.optim.lr = 3e-3;
  config.optim.warmup_steps = 2;
  config.optim.weight_decay = 0.01;
  {
    ConfigSchema schema;  // the name parsed as a config file's would be
    config.register_config(schema);
    schema.apply_override("fsdp.compute_copy=" + compute_copy);
  }
  config.optim.update_in_backward = update_in_backward;
  auto ops = make_ops(device);
  return train_lever_run(config, *ops);
}

}  // namespace shardtrain::testing
