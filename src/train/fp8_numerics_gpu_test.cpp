// FP8 training numerics on the GPU: a ~100M-parameter Llama-shape model (hidden 768, 16 blocks,
// GQA 12/4 heads, SwiGLU 2048) trained from the same random start on the same text
// (examples/demo-data.bin: the demo's English-like corpus, byte-level tokens) for 300 steps in
// bf16 and with train.precision = "fp8". The FP8 curve must stay finite, never drift from bf16's
// by more than 10% (10-step means), and end within 2% of it. A third run with e4m3 gradients
// (the alternative to the default e5m2) is printed beside them: the training half of the
// gradient format measurement. Skips visibly without a GPU, or on one without FP8.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "ops/backend.h"
#include "ops/testing/test_device_limits.h"
#include "train/train_config.h"
#include "train/trainer.h"
#if SHARDTRAIN_WITH_CUDA
#include "ops/cuda/cuda_fp8.h"
#include "ops/cuda/cuda_ops.h"
#endif

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 300;
constexpr int kWindow = 10;

double window_mean(const std::vector<double>& losses, size_t end) {
  const size_t begin = end >= kWindow ? end - kWindow : 0;
  return std::accumulate(losses.begin() + begin, losses.begin() + end, 0.0) / (end - begin);
}

void write_model_config(const fs::path& dir) {
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 260,
  "hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 16,
  "num_attention_heads": 12, "num_key_value_heads": 4, "max_position_embeddings": 512,
  "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "hidden_act": "silu",
  "tie_word_embeddings": false, "attention_bias": false, "mlp_bias": false,
  "bos_token_id": 256, "eos_token_id": 257, "torch_dtype": "float32"
})";
}

TEST(Fp8NumericsGpu, Fp8LossCurveFollowsBf16) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU: FP8 training numerics skipped";
  std::unique_ptr<Ops> probe = make_ops(DeviceChoice::kCuda);
  const std::string reason = probe->fp8_unsupported_reason();
  if (!reason.empty()) GTEST_SKIP() << "no FP8 on this GPU: " << reason;
  probe.reset();

  const fs::path dir =
      fs::temp_directory_path() / ("shardtrain_fp8_numerics_" + std::to_string(getpid()));
  write_model_config(dir / "model");
  TrainConfig config;
  config.model.path = (dir / "model").string();
  config.model.init = ModelInit::kRandom;
  config.data.path = std::string(SHARDTRAIN_SOURCE_DIR) + "/examples/demo-data.bin";
  config.data.seq_len = 256;
  config.train.steps = kSteps;
  config.train.micro_batch = 16;
  config.train.device = DeviceChoice::kCuda;
  config.optim.lr = 1e-3;
  config.optim.min_lr = 1e-4;
  config.optim.warmup_steps = 30;
  config.optim.weight_decay = 0.1;
  TrainRunOptions options;
  options.quiet = true;

  auto run = [&](TrainPrecision precision, bool e4m3_gradients) {
    config.train.precision = precision;
    std::unique_ptr<Ops> ops = make_ops(DeviceChoice::kCuda);
#if SHARDTRAIN_WITH_CUDA
    if (e4m3_gradients) {
      dynamic_cast<CudaOps&>(*ops).set_fp8_gradient_format(cuda_kernels::Fp8Format::kE4M3);
    }
#else
    (void)e4m3_gradients;
#endif
    return run_training(config, *ops, options);
  };
  const TrainOutcome bf16 = run(TrainPrecision::kBf16, false);
  const TrainOutcome fp8 = run(TrainPrecision::kFp8, false);
  const TrainOutcome fp8_e4m3 = run(TrainPrecision::kFp8, true);
  fs::remove_all(dir);

  ASSERT_EQ(bf16.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_EQ(fp8.losses.size(), bf16.losses.size());
  ASSERT_EQ(fp8_e4m3.losses.size(), bf16.losses.size());
  // FP8 really ran (shapes off the multiple of 16 would have run bf16, bit for bit the same).
  ASSERT_NE(fp8.losses, bf16.losses) << "the fp8 run computed every linear in bf16";
  double worst_drift = 0;
  for (size_t end = kWindow; end <= bf16.losses.size(); ++end) {
    ASSERT_TRUE(std::isfinite(fp8.losses[end - 1])) << "fp8 loss at step " << end;
    const double drift = (window_mean(fp8.losses, end) - window_mean(bf16.losses, end)) /
                         window_mean(bf16.losses, end);
    worst_drift = std::max(worst_drift, std::abs(drift));
    EXPECT_LT(std::abs(drift), 0.10) << "steps " << end - kWindow + 1 << "-" << end;
  }
  const double bf16_end = window_mean(bf16.losses, kSteps);
  const double fp8_end = window_mean(fp8.losses, kSteps);
  const double e4m3_end = window_mean(fp8_e4m3.losses, kSteps);
  std::printf(
      "loss, mean of the last %d of %d steps: bf16 %.4f (from %.4f), fp8 %.4f (%+.2f%%), fp8 "
      "with e4m3 gradients %.4f (%+.2f%%); largest 10-step drift of fp8 %.2f%%; tokens/s bf16 "
      "%.0f, fp8 %.0f\n",
      kWindow, kSteps, bf16_end, bf16.losses.front(), fp8_end, 100 * (fp8_end / bf16_end - 1),
      e4m3_end, 100 * (e4m3_end / bf16_end - 1), 100 * worst_drift, bf16.tokens_per_s,
      fp8.tokens_per_s);
  EXPECT_LT(bf16_end, 0.7 * bf16.losses.front()) << "the bf16 baseline should learn";
  EXPECT_LE(std::abs(fp8_end - bf16_end) / bf16_end, 0.02);
}

}  // namespace
}  // namespace shardtrain
