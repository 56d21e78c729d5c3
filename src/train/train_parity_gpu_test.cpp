// Training on the GPU follows the CPU reference: the tiny golden models (tests/golden/) trained
// for 50 steps with the bf16 CUDA backend stay within bf16 tolerance of the fp32 CPU loss curve.
// qwen3: q/k norms; gemma3_text: 1 + weight and sandwich norms, GeGLU, scaled embeddings, a
// sliding layer (window 6 of the 32 tokens) and a global one, final logit soft-capping; and the
// same model with attn_logit_softcapping set (the fixture's config patched: a cap of 1.5 bends
// its q/k-normed scores), which runs the soft-capped attention kernels.
// LoRA over the frozen base, configured with the [lora] keys users write: llama_gqa all-linear
// r = 4, qwen2_tied_bias q/v/down with rank-stabilised scaling (biases, tied head), gemma3_text
// all-linear; besides the losses, the PEFT adapters both runs export must agree and B must have
// trained away from its zero start on both. Mixture of experts: qwen3_moe (softmax top-2 of 8,
// renormalised, a dense layer among the sparse ones), mixtral (top-2 of 4 logits),
// qwen3_moe_sparse_step (top-3 of 4 not renormalised, sparse every other layer, tied head), with
// the load-balancing loss as training uses it by default.
// Skips with a visible message where no GPU is present.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/dtype.h"
#include "io/safetensors.h"
#include "ops/backend.h"
#include "ops/testing/test_device_limits.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

struct ParityCase {
  const char* name;     // the test's name
  const char* fixture;  // tests/golden/<fixture>
  // The [lora] section as a user writes it in the job's TOML; "" = full fine-tuning.
  const char* lora;
  double lr;
  // "It learned": the last loss below this fraction of the first (a frozen base with rank-4
  // adapters learns less in 50 steps than the whole model).
  double learned = 0.8;
  // > 0: the fixture's config.json with attn_logit_softcapping set to this (a copy in the
  // test's directory beside the fixture's weights).
  double attn_logit_softcapping = 0;
};

// A copy of tests/golden/<fixture> in `dir` whose config sets attn_logit_softcapping = cap.
fs::path with_attention_softcap(const fs::path& fixture, const fs::path& dir, double cap) {
  const fs::path model = dir / "model";
  fs::create_directories(model);
  std::ifstream in(fixture / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["attn_logit_softcapping"] = cap;
  std::ofstream(model / "config.json") << config.dump(2);
  fs::copy_file(fixture / "model.safetensors", model / "model.safetensors");
  return model;
}

void PrintTo(const ParityCase& c, std::ostream* os) { *os << c.name; }

// The exported adapters of the two runs (adapter_model.safetensors, F32): every tensor's
// relative L2 difference; B must be non-zero in both (it starts at zero, so a B that never
// trained would make the loss comparison one of the frozen base alone). Returns the largest
// relative difference over the tensors.
double compare_adapters(const fs::path& gpu_dir, const fs::path& cpu_dir) {
  const SafetensorsFile gpu =
      SafetensorsFile::open((gpu_dir / "adapter_model.safetensors").string());
  const SafetensorsFile cpu =
      SafetensorsFile::open((cpu_dir / "adapter_model.safetensors").string());
  EXPECT_EQ(gpu.entries().size(), cpu.entries().size());
  EXPECT_FALSE(cpu.entries().empty());
  double worst = 0, largest_b_gpu = 0, largest_b_cpu = 0;
  for (const SafetensorsEntry& want : cpu.entries()) {
    const SafetensorsEntry* got = gpu.find(want.name);
    if (got == nullptr || got->shape != want.shape) {
      ADD_FAILURE() << "the GPU run's adapter lacks " << want.name << " " << want.shape.to_string();
      continue;
    }
    std::vector<float> a(static_cast<size_t>(want.shape.numel())), b(a.size());
    convert_to_f32(got->data, got->dtype, a.data(), a.size());
    convert_to_f32(want.data, want.dtype, b.data(), b.size());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
      norm += double{b[i]} * b[i];
      if (want.name.find("lora_B") != std::string::npos) {
        largest_b_gpu = std::max(largest_b_gpu, std::abs(double{a[i]}));
        largest_b_cpu = std::max(largest_b_cpu, std::abs(double{b[i]}));
      }
    }
    const double relative = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    EXPECT_TRUE(std::isfinite(relative)) << want.name;
    worst = std::max(worst, relative);
  }
  EXPECT_GT(largest_b_cpu, 1e-3) << "lora_B did not train on the CPU";
  EXPECT_GT(largest_b_gpu, 1e-3) << "lora_B did not train on the GPU";
  std::printf(
      "  adapters: largest |lora_B| gpu %.3g cpu %.3g, largest relative tensor "
      "difference %.3g\n",
      largest_b_gpu, largest_b_cpu, worst);
  return worst;
}

class TrainParityGpu : public ::testing::TestWithParam<ParityCase> {};

TEST_P(TrainParityGpu, LossCurveFollowsCpuWithinBf16Tolerance) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU: GPU training parity skipped";
  const ParityCase& c = GetParam();
  const fs::path dir = fs::temp_directory_path() /
                       ("shardtrain_gpu_parity_" + std::to_string(getpid()) + "_" + c.name);
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
  ConfigSchema schema;
  config.register_config(schema);
  const fs::path fixture = fs::path(SHARDTRAIN_SOURCE_DIR) / "tests/golden" / c.fixture;
  config.model.path = (c.attn_logit_softcapping > 0
                           ? with_attention_softcap(fixture, dir, c.attn_logit_softcapping)
                           : fixture)
                          .string();
  config.data.path = (dir / "data.jsonl").string();
  config.data.seq_len = 32;
  config.train.steps = 50;
  config.train.micro_batch = 4;
  config.optim.lr = c.lr;
  config.optim.warmup_steps = 5;
  const bool lora = *c.lora != '\0';
  if (lora) schema.load_toml_text(std::string("[lora]\n") + c.lora, c.name);
  config.validate();
  TrainRunOptions options;
  options.quiet = true;

  config.train.device = DeviceChoice::kCpu;
  if (lora) config.train.output_dir = (dir / "cpu_adapter").string();
  auto cpu = make_ops(DeviceChoice::kCpu);
  const TrainOutcome reference = run_training(config, *cpu, options);
  config.train.device = DeviceChoice::kCuda;
  if (lora) config.train.output_dir = (dir / "gpu_adapter").string();
  auto gpu = make_ops(DeviceChoice::kCuda);
  const TrainOutcome outcome = run_training(config, *gpu, options);

  ASSERT_EQ(outcome.losses.size(), reference.losses.size());
  double worst = 0;
  for (size_t i = 0; i < reference.losses.size(); ++i) {
    const double relative = std::abs(outcome.losses[i] - reference.losses[i]) / reference.losses[i];
    worst = std::max(worst, relative);
    EXPECT_LE(relative, 3e-2) << "step " << i + 1 << ": gpu " << outcome.losses[i] << " cpu "
                              << reference.losses[i];
  }
  std::printf("%s: loss %.4f -> %.4f (cpu %.4f -> %.4f), largest relative difference %.3g\n",
              c.name, outcome.losses.front(), outcome.losses.back(), reference.losses.front(),
              reference.losses.back(), worst);
  if (lora) {
    // Adam's first steps move every element by about lr whatever the gradient's size, so
    // elements whose gradient is within bf16 noise of zero may step apart: a bound for the
    // tensors as wholes, far below the difference of unrelated adapters (~1.4).
    EXPECT_LE(compare_adapters(dir / "gpu_adapter", dir / "cpu_adapter"), 0.25);
  }
  fs::remove_all(dir);
  EXPECT_LT(outcome.losses.back(), c.learned * outcome.losses.front());  // it learned
}

constexpr char kAllLinear[] =
    "enabled = true\nrank = 4\nalpha = 8\ntarget_modules = \"all-linear\"\n";

INSTANTIATE_TEST_SUITE_P(
    TinyModels, TrainParityGpu,
    ::testing::Values(
        ParityCase{"llama_gqa", "llama_gqa", "", 2e-3},
        ParityCase{"qwen2_tied_bias", "qwen2_tied_bias", "", 2e-3},
        ParityCase{"llama3_rope", "llama3_rope", "", 2e-3}, ParityCase{"qwen3", "qwen3", "", 2e-3},
        ParityCase{"gemma3_text", "gemma3_text", "", 2e-3},
        ParityCase{"gemma3_text_attn_softcap", "gemma3_text", "", 2e-3, 0.8, 1.5},
        // LoRA: B starts at zero; a higher lr than full fine-tuning's, as LoRA recipes use, so
        // the adapters carry the learning (on the CPU the losses fall by 15%, 9% and 25%, and
        // the largest |lora_B| reaches ~0.18).
        ParityCase{"llama_gqa_lora_all_linear", "llama_gqa", kAllLinear, 1e-2, 0.93},
        ParityCase{"qwen2_tied_bias_lora_qv_down_rslora", "qwen2_tied_bias",
                   "enabled = true\nrank = 4\nalpha = 8\n"
                   "target_modules = \"q_proj,v_proj,down_proj\"\nuse_rslora = true\n",
                   1e-2, 0.95},
        ParityCase{"gemma3_text_lora_all_linear", "gemma3_text", kAllLinear, 1e-2, 0.93},
        // Mixture of experts (mixtral at 2e-3 ends at 0.795 of its first loss on the CPU: too
        // near the bound).
        ParityCase{"qwen3_moe", "qwen3_moe", "", 2e-3}, ParityCase{"mixtral", "mixtral", "", 4e-3},
        ParityCase{"qwen3_moe_sparse_step", "qwen3_moe_sparse_step", "", 2e-3}),
    [](const ::testing::TestParamInfo<ParityCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace shardtrain
