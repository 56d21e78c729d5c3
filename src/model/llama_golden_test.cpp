// Parity with Hugging Face transformers: tiny random models made by tools/make_golden.py
// (fixtures in tests/golden/), run through DecoderModel on the fp32 CPU backend. mistral_window
// has a sliding window (6) shorter than the sequence (16): the windowed attention mask;
// qwen3 has per-head q/k norms and a head_dim unlike hidden / heads.
// Bands: logits max relative error <= 1e-4, loss <= 1e-5 relative, every parameter
// gradient <= 1e-3 relative. "Relative" is max|ours - theirs| / max|theirs| over the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "testing/golden_fixture.h"

namespace shardtrain {
namespace {

using testing::entry_f32;
using testing::GoldenModel;
using testing::max_relative_error;

class GoldenParity : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenParity, LogitsLossAndGradientsMatchTransformers) {
  const std::string dir = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/" + GetParam();
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  const SafetensorsFile expected = SafetensorsFile::open(dir + "/expected.safetensors");
  const Batch batch = testing::golden_batch(expected);
  GoldenModel golden(config, checkpoint, batch, /*with_grads=*/true);
  Ops& ops = *golden.ops;
  DecoderModel& model = golden.model;
  LocalUnits& units = golden.units;

  // Logits and loss from the forward pass.
  const GoldenModel::Forward forward = golden.forward(batch);
  const std::vector<float> expected_logits = entry_f32(*expected.find("logits"));
  ASSERT_EQ(expected_logits.size(), forward.logits.size());
  const double logits_error = max_relative_error(forward.logits, expected_logits);
  const double loss = forward.loss;
  const double expected_loss = entry_f32(*expected.find("loss"))[0];
  const double loss_error = std::abs(loss - expected_loss) / std::abs(expected_loss);
  std::printf("%s: logits max rel error %.3g, loss %.7f vs %.7f (rel %.3g)\n", GetParam().c_str(),
              logits_error, loss, expected_loss, loss_error);
  EXPECT_LE(logits_error, 1e-4);
  EXPECT_LE(loss_error, 1e-5);

  // Gradients from forward + backward, normalised like the HF mean loss.
  units.zero_grads();
  DeviceBuffer loss_buffer(ops, sizeof(float));
  const Tensor loss_sum = loss_buffer.view(DType::kF32, {1});
  ops.fill_zero(loss_sum);
  model.forward_backward(units, 1.0f / static_cast<float>(batch.target_count), loss_sum);
  EXPECT_NEAR(ops.read_scalar(loss_sum) / batch.target_count, loss, 1e-6 * std::abs(loss));
  double worst = 0;
  std::string worst_name;
  int checked = 0;
  for (int u = 0; u < model.unit_count(); ++u) {
    const UnitLayout& unit = model.layout().units[u];
    std::vector<float> grads(unit.numel);
    ops.copy_to_host(grads.data(), units.grads(u));
    for (const ParamSpec& p : unit.params) {
      const SafetensorsEntry* e = expected.find("grad." + p.name);
      ASSERT_NE(e, nullptr) << "no expected gradient for " << p.name;
      ASSERT_EQ(e->shape, p.shape) << p.name;
      const std::vector<float> want = entry_f32(*e);
      const double error = max_relative_error(grads.data() + p.offset, want.data(), want.size());
      EXPECT_LE(error, 1e-3) << p.name;
      if (error > worst) {
        worst = error;
        worst_name = p.name;
      }
      ++checked;
    }
  }
  std::printf("%s: %d gradients, largest rel error %.3g (%s)\n", GetParam().c_str(), checked, worst,
              worst_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GoldenParity,
                         ::testing::Values("llama_gqa", "qwen2_tied_bias", "llama3_rope",
                                           "mistral", "mistral_window", "qwen3", "gemma3_text"));

}  // namespace
}  // namespace shardtrain
