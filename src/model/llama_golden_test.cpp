// Parity with Hugging Face transformers: tiny random models made by tools/make_golden.py
// (fixtures in tests/golden/), run through LlamaModel on the fp32 CPU backend.
// Bands (issue 2): logits max relative error <= 1e-4, loss <= 1e-5 relative, every parameter
// gradient <= 1e-3 relative. "Relative" is max|ours - theirs| / max|theirs| over the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "data/batch.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/init_weights.h"
#include "model/llama_model.h"
#include "ops/cpu/cpu_ops.h"
#include "train/local_units.h"

namespace shardtrain {
namespace {

std::vector<float> entry_f32(const SafetensorsEntry& e) {
  std::vector<float> out(e.shape.numel());
  convert_to_f32(e.data, e.dtype, out.data(), out.size());
  return out;
}

double max_relative_error(const float* ours, const float* theirs, size_t n) {
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < n; ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(ours[i]) - theirs[i]));
    max_ref = std::max(max_ref, std::abs(static_cast<double>(theirs[i])));
  }
  return max_ref > 0 ? max_diff / max_ref : max_diff;
}

class GoldenParity : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenParity, LogitsLossAndGradientsMatchTransformers) {
  const std::string dir = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/" + GetParam();
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  const SafetensorsFile expected = SafetensorsFile::open(dir + "/expected.safetensors");

  const SafetensorsEntry* ids = expected.find("input_ids");
  const SafetensorsEntry* labels = expected.find("labels");
  ASSERT_NE(ids, nullptr);
  ASSERT_NE(labels, nullptr);
  const int64_t B = ids->shape[0], T = ids->shape[1];
  std::vector<Example> examples(B);
  for (int64_t b = 0; b < B; ++b) {
    const auto* id_data = static_cast<const int32_t*>(ids->data) + b * T;
    const auto* label_data = static_cast<const int32_t*>(labels->data) + b * T;
    examples[b].input_ids.assign(id_data, id_data + T);
    examples[b].labels.assign(label_data, label_data + T);
  }
  const Batch batch = make_batch(examples);

  std::unique_ptr<Ops> ops = make_cpu_ops();
  LlamaModel model(config, *ops);
  LocalUnits units(*ops, model.layout(), true);
  for (int u = 0; u < model.unit_count(); ++u) {
    std::vector<float> values(model.layout().units[u].numel);
    load_unit_from_checkpoint(checkpoint, model.layout().units[u], values.data());
    units.upload_master(u, values.data());
  }
  model.reserve(B, T);
  model.set_batch(batch);

  // Logits and loss from the forward pass.
  std::vector<float> logits(B * T * config.vocab_size);
  DeviceBuffer loss_buffer(*ops, sizeof(float));
  const Tensor loss_sum = loss_buffer.view(DType::kF32, {1});
  ops->fill_zero(loss_sum);
  model.forward(units, loss_sum, logits.data());
  const std::vector<float> expected_logits = entry_f32(*expected.find("logits"));
  ASSERT_EQ(expected_logits.size(), logits.size());
  const double logits_error =
      max_relative_error(logits.data(), expected_logits.data(), logits.size());
  const double loss = ops->read_scalar(loss_sum) / static_cast<double>(batch.target_count);
  const double expected_loss = entry_f32(*expected.find("loss"))[0];
  const double loss_error = std::abs(loss - expected_loss) / std::abs(expected_loss);
  std::printf("%s: logits max rel error %.3g, loss %.7f vs %.7f (rel %.3g)\n", GetParam().c_str(),
              logits_error, loss, expected_loss, loss_error);
  EXPECT_LE(logits_error, 1e-4);
  EXPECT_LE(loss_error, 1e-5);

  // Gradients from forward + backward, normalised like the HF mean loss.
  units.zero_grads();
  ops->fill_zero(loss_sum);
  model.forward_backward(units, 1.0f / static_cast<float>(batch.target_count), loss_sum);
  EXPECT_NEAR(ops->read_scalar(loss_sum) / batch.target_count, loss, 1e-6 * std::abs(loss));
  double worst = 0;
  std::string worst_name;
  int checked = 0;
  for (int u = 0; u < model.unit_count(); ++u) {
    const UnitLayout& unit = model.layout().units[u];
    std::vector<float> grads(unit.numel);
    ops->copy_to_host(grads.data(), units.grads(u));
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
  std::printf("%s: %d gradients, largest rel error %.3g (%s)\n", GetParam().c_str(), checked,
              worst, worst_name.c_str());
}

INSTANTIATE_TEST_SUITE_P(TinyModels, GoldenParity,
                         ::testing::Values("llama_gqa", "qwen2_tied_bias", "llama3_rope",
                                           "mistral"));

}  // namespace
}  // namespace shardtrain
