// The decoder with LoRA adapters on every linear (fp32 CPU, whole units in one process), for a
// Llama block and for Gemma 3's (tests/golden/gemma3_text: sandwich norms with 1 + weight,
// GeGLU, scaled embeddings, sliding layers, the final soft cap, tied embeddings):
//  - its loss and logits equal those of the plain model whose weights have the adapters merged
//    in (W + scale B A), which checks the packed q/k/v slices and the merge (--merge) at once;
//  - the adapters' gradients equal central finite differences of the loss;
//  - the frozen base gets no gradient (its region of the buffer is left as it was);
//  - activation checkpointing (full, selective) gives the same adapter gradients as none, with
//    dropout on (backward and recompute regenerate forward's masks).
// The multimodal Gemma 3 (model_type gemma3) is refused with one line.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "model/hf_config.h"
#include "model/init_weights.h"
#include "model/model_flops.h"
#include "model/peft_adapter.h"
#include "testing/golden_fixture.h"

namespace shardtrain {
namespace {

ModelConfig tiny_config() {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = false;
  return c;
}

// The model each parameterised test runs on: "llama" (tiny_config) or a golden fixture's.
ModelConfig config_named(const std::string& name) {
  if (name == "llama") return tiny_config();
  return read_hf_config(testing::kGolden + name + "/config.json");
}

LoraConfig lora_config(double dropout = 0.0) {
  LoraConfig lora;
  lora.enabled = true;
  lora.rank = 4;
  lora.alpha = 8;
  lora.dropout = dropout;
  lora.target_modules = "all-linear";
  return lora;
}

Batch tiny_batch() {
  std::mt19937 rng(5);
  std::vector<Example> examples(2);
  for (Example& e : examples) {
    for (int t = 0; t < 12; ++t) e.input_ids.push_back(static_cast<int32_t>(rng() % 96));
    e.labels = e.input_ids;
  }
  examples[0].labels[2] = -100;
  return make_batch(examples);
}

// Every unit's values: a random base, random adapters with B nonzero (PEFT's B starts at zero,
// which would hide A's part).
std::vector<std::vector<float>> lora_values(const ParamLayout& layout) {
  std::vector<std::vector<float>> values;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (size_t u = 0; u < layout.units.size(); ++u) {
    values.emplace_back(layout.units[u].numel);
    init_unit_random(layout.units[u], static_cast<int>(u), 3, 0.08, values.back().data());
    for (const ParamSpec& spec : layout.units[u].params) {
      if (!is_lora_param(spec)) continue;
      for (int64_t i = 0; i < spec.numel(); ++i) values.back()[spec.offset + i] = normal(rng);
    }
  }
  return values;
}

struct Model {
  std::unique_ptr<Ops> ops = make_cpu_ops();
  DecoderModel model;
  LocalUnits units;
  Batch batch = tiny_batch();
  Model(const ModelConfig& config, const LoraConfig& lora,
        const std::vector<std::vector<float>>& values,
        DecoderModel::Checkpointing checkpointing = DecoderModel::Checkpointing::kNone)
      : model(config, *ops, lora), units(*ops, model.layout(), true) {
    for (int u = 0; u < model.unit_count(); ++u) {
      std::vector<float> unit(model.layout().units[u].numel);
      std::copy(values[u].begin(), values[u].begin() + static_cast<int64_t>(unit.size()),
                unit.begin());
      units.upload_master(u, unit.data());
    }
    model.set_activation_checkpointing(checkpointing);
    model.reserve(batch.batch_size, batch.seq_len);
    model.set_batch(batch);
  }
  double loss(std::vector<float>* logits = nullptr) {
    DeviceBuffer buffer(*ops, sizeof(float));
    const Tensor loss_sum = buffer.view(DType::kF32, {1});
    ops->fill_zero(loss_sum);
    if (logits) logits->resize(batch.batch_size * batch.seq_len * model.config().vocab_size);
    model.forward(units, loss_sum, logits ? logits->data() : nullptr);
    return ops->read_scalar(loss_sum) / static_cast<double>(batch.target_count);
  }
  // Mean loss and every unit's gradient of it.
  std::vector<std::vector<float>> grads() {
    DeviceBuffer buffer(*ops, sizeof(float));
    const Tensor loss_sum = buffer.view(DType::kF32, {1});
    ops->fill_zero(loss_sum);
    units.zero_grads();
    model.set_batch(batch);
    model.forward_backward(units, 1.0f / static_cast<float>(batch.target_count), loss_sum);
    std::vector<std::vector<float>> out;
    for (int u = 0; u < model.unit_count(); ++u) {
      out.emplace_back(model.layout().units[u].numel);
      ops->copy_to_host(out.back().data(), units.grads(u));
    }
    return out;
  }
};

class LoraModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  const ModelConfig config_ = config_named(GetParam());
};

TEST_P(LoraModelTest, EqualsThePlainModelWithMergedWeights) {
  const LoraConfig lora = lora_config();
  const ParamLayout layout = make_param_layout(config_, lora);
  std::vector<std::vector<float>> values = lora_values(layout);
  Model adapted(config_, lora, values);
  std::vector<float> adapted_logits;
  const double adapted_loss = adapted.loss(&adapted_logits);

  for (int u = 1; u < static_cast<int>(layout.units.size()); ++u) {
    merge_lora_unit(lora, layout.units[u], values[u].data());
  }
  Model merged(config_, LoraConfig(), values);  // the plain layout is the LoRA one's base part
  std::vector<float> merged_logits;
  const double merged_loss = merged.loss(&merged_logits);
  EXPECT_NEAR(adapted_loss, merged_loss, 1e-5 * merged_loss);
  EXPECT_LE(testing::max_relative_error(adapted_logits, merged_logits), 2e-5);

  Model base_only(config_, LoraConfig(), lora_values(layout));  // adapters dropped: another loss
  EXPECT_GT(std::abs(base_only.loss() - adapted_loss), 1e-3);
}

TEST_P(LoraModelTest, AdapterGradientsAreFiniteDifferencesAndTheBaseGetsNone) {
  const LoraConfig lora = lora_config();
  const ParamLayout layout = make_param_layout(config_, lora);
  const std::vector<std::vector<float>> values = lora_values(layout);
  Model model(config_, lora, values);
  const std::vector<std::vector<float>> grads = model.grads();
  int checked = 0;
  for (int u = 1; u < static_cast<int>(layout.units.size()); ++u) {
    for (const ParamSpec& spec : layout.units[u].params) {
      if (!is_lora_param(spec)) {
        for (int64_t i = 0; i < spec.numel(); ++i) {
          ASSERT_EQ(grads[u][spec.offset + i], 0.0f) << spec.name << " (frozen) got a gradient";
        }
        continue;
      }
      for (int64_t i : {int64_t{0}, spec.numel() / 2 + 1, spec.numel() - 1}) {
        const int64_t e = spec.offset + i;
        std::vector<std::vector<float>> shifted = values;
        const float eps = 1e-2f;
        shifted[u][e] = values[u][e] + eps;
        const double up = Model(config_, lora, shifted).loss();
        shifted[u][e] = values[u][e] - eps;
        const double down = Model(config_, lora, shifted).loss();
        const double numeric = (up - down) / (2.0 * eps);
        EXPECT_NEAR(grads[u][e], numeric, 2e-3 * std::max(1.0, std::abs(numeric)) + 2e-4)
            << spec.name << "[" << i << "]";
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 2 * 14 * 3);  // 2 blocks x 7 modules x (A, B) x 3 elements
}

TEST_P(LoraModelTest, CheckpointingGivesTheSameGradientsWithDropout) {
  const LoraConfig lora = lora_config(0.2);
  const ParamLayout layout = make_param_layout(config_, lora);
  const std::vector<std::vector<float>> values = lora_values(layout);
  const std::vector<std::vector<float>> plain = Model(config_, lora, values).grads();
  const std::vector<std::vector<float>> without_dropout =
      Model(config_, lora_config(0.0), values).grads();
  EXPECT_GT(testing::max_relative_error(plain[1], without_dropout[1]), 1e-3)
      << "dropout changes the gradients";
  for (auto mode : {DecoderModel::Checkpointing::kFull, DecoderModel::Checkpointing::kSelective}) {
    const std::vector<std::vector<float>> recomputed = Model(config_, lora, values, mode).grads();
    for (size_t u = 0; u < plain.size(); ++u) {
      EXPECT_LE(testing::max_relative_error(recomputed[u], plain[u]), 1e-6) << "unit " << u;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Families, LoraModelTest, ::testing::Values("llama", "gemma3_text"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// Gemma 3 4B-27B: the text part of a multimodal config.json (model_type gemma3, text_config).
TEST(LoraSupportTest, RefusesMultimodalGemma3WithOneLine) {
  const testing::TempDir dir("shardtrain_lora_gemma3_");
  nlohmann::json text;
  std::ifstream(testing::kGolden + "gemma3_text/config.json") >> text;
  const nlohmann::json wrapper = {{"architectures", {"Gemma3ForConditionalGeneration"}},
                                  {"model_type", "gemma3"},
                                  {"text_config", text}};
  std::ofstream(dir.path() + "/config.json") << wrapper.dump(2);
  const ModelConfig config = read_hf_config(dir.path() + "/config.json");
  EXPECT_EQ(config.multimodal_model_type, "gemma3");
  EXPECT_EQ(config_named("gemma3_text").multimodal_model_type, "");
  std::unique_ptr<Ops> ops = make_cpu_ops();
  std::string message;
  try {
    DecoderModel model(config, *ops, lora_config());
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("multimodal model_type gemma3"), std::string::npos) << message;
  EXPECT_NE(message.find("lora.enabled"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  // The layout refuses it too, so plan, export and eval say the same as training.
  std::string layout_message;
  try {
    make_param_layout(config, lora_config());
  } catch (const Error& e) {
    layout_message = e.what();
  }
  EXPECT_EQ(layout_message, message);
  DecoderModel plain(config, *ops);  // without LoRA it trains as before
  EXPECT_GT(plain.unit_count(), 1);
}

TEST(LoraSupportTest, RefusesMixtureOfExpertsWithOneLine) {
  const ModelConfig config = config_named("qwen3_moe");
  std::unique_ptr<Ops> ops = make_cpu_ops();
  std::string message;
  try {
    DecoderModel model(config, *ops, lora_config());
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("mixture-of-experts"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

TEST(LoraFlopsTest, BaseRunsNoWeightGradientGemmAdaptersCountInFull) {
  ModelConfig c = tiny_config();  // C 64, F 96, H 4 x D 16, K 2, V 96, L 2
  const double full = training_flops_per_token(c, 12);
  LoraConfig lora = lora_config();
  const double adapted = training_flops_per_token(c, 12, lora);
  const double matmul = 2 * (2 * 64 * 64 + 2 * 64 * 32 + 3 * 64 * 96) + 96 * 64;
  const double attention = 6 * 2 * 12 * 64;
  EXPECT_DOUBLE_EQ(full, 6 * matmul + attention);
  // r (I + O) per module: q, o 4 (64 + 64); k, v 4 (64 + 32); gate, up, down 4 (64 + 96).
  const double adapters = 2 * 4 * 128 + 2 * 4 * 96 + 3 * 4 * 160;
  EXPECT_DOUBLE_EQ(adapted, 4 * matmul + 6 * 2 * adapters + attention);
  lora.target_modules = "q_proj";
  EXPECT_DOUBLE_EQ(training_flops_per_token(c, 12, lora), 4 * matmul + 6 * 2 * 4 * 128 + attention);
}

}  // namespace
}  // namespace shardtrain
