// Training on the GPU follows the CPU reference: the tiny golden models (tests/golden/) trained
// for 50 steps with the bf16 CUDA backend stay within bf16 tolerance of the fp32 CPU loss curve.
// qwen3: q/k norms; gemma3_text: 1 + weight and sandwich norms, GeGLU, scaled embeddings, a
// sliding layer (window 6 of the 32 tokens) and a global one, final logit soft-capping.
// Skips with a visible message where no GPU is present.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/config.h"
#include "ops/backend.h"
#include "ops/testing/test_device_limits.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

class TrainParityGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainParityGpu, LossCurveFollowsCpuWithinBf16Tolerance) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU: GPU training parity skipped";
  const fs::path dir = fs::temp_directory_path() / ("shardtrain_gpu_parity_" + std::to_string(getpid()));
  fs::create_directories(dir);
  // Sequences with learnable structure: arithmetic progressions modulo the vocabulary.
  std::ofstream data(dir / "data.jsonl");
  for (int line = 0; line < 64; ++line) {
    nlohmann::json ids = nlohmann::json::array();
    for (int t = 0; t < 32; ++t) ids.push_back((line * 5 + t * (1 + line % 7)) % 96);
    data << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
  }
  data.close();

  TrainConfig config;
  config.model.path = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/" + GetParam();
  config.data.path = (dir / "data.jsonl").string();
  config.data.seq_len = 32;
  config.train.steps = 50;
  config.train.micro_batch = 4;
  config.optim.lr = 2e-3;
  config.optim.warmup_steps = 5;
  TrainRunOptions options;
  options.quiet = true;

  config.train.device = DeviceChoice::kCpu;
  auto cpu = make_ops(DeviceChoice::kCpu);
  const TrainOutcome reference = run_training(config, *cpu, options);
  config.train.device = DeviceChoice::kCuda;
  auto gpu = make_ops(DeviceChoice::kCuda);
  const TrainOutcome outcome = run_training(config, *gpu, options);
  fs::remove_all(dir);

  ASSERT_EQ(outcome.losses.size(), reference.losses.size());
  double worst = 0;
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    const double relative = std::abs(outcome.losses[i] - reference.losses[i]) / reference.losses[i];
    worst = std::max(worst, relative);
    EXPECT_LE(relative, 3e-2) << "step " << i + 1 << ": gpu " << outcome.losses[i] << " cpu "
                              << reference.losses[i];
  }
  std::printf("%s: loss %.4f -> %.4f (cpu %.4f -> %.4f), largest relative difference %.3g\n",
              GetParam().c_str(), outcome.losses.front(), outcome.losses.back(),
              reference.losses.front(), reference.losses.back(), worst);
  EXPECT_LT(outcome.losses.back(), 0.8 * outcome.losses.front());  // it learned
}

INSTANTIATE_TEST_SUITE_P(TinyModels, TrainParityGpu,
                         ::testing::Values("llama_gqa", "qwen2_tied_bias", "llama3_rope", "qwen3",
                                           "gemma3_text"));

}  // namespace
}  // namespace shardtrain
