// save_hf_checkpoint: a saved model loads back bit-identically (fp32) and gives identical
// logits; bf16 saves hold the bf16-rounded values; an existing output dir is replaced whole.
#include "model/save_hf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/batch.h"
#include "io/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/init_weights.h"
#include "model/llama_model.h"
#include "ops/cpu/cpu_ops.h"
#include "testing/golden_fixture.h"  // LocalUnits: whole-model units for one process

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

ModelConfig tiny_config() {
  ModelConfig c;
  c.model_type = "qwen2";
  c.vocab_size = 50;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.attention_bias = true;
  c.tie_word_embeddings = true;
  c.max_position_embeddings = 64;
  c.rope.theta = 10000;
  return c;
}

std::vector<std::vector<float>> random_units(const ParamLayout& layout) {
  std::vector<std::vector<float>> units;
  for (size_t u = 0; u < layout.units.size(); ++u) {
    units.emplace_back(layout.units[u].numel);
    init_unit_random(layout.units[u], static_cast<int>(u), 7, 0.3, units.back().data());
    // Make norms and biases non-trivial so a mix-up would show (padding stays zero).
    for (const ParamSpec& p : layout.units[u].params)
      for (int64_t i = 0; i < p.numel(); ++i) units.back()[p.offset + i] += 0.01f * (i % 13);
  }
  return units;
}

std::vector<float> logits_of(const ModelConfig& config,
                             const std::vector<std::vector<float>>& values) {
  std::unique_ptr<Ops> ops = make_cpu_ops();
  LlamaModel model(config, *ops);
  LocalUnits units(*ops, model.layout(), false);
  for (int u = 0; u < model.unit_count(); ++u) units.upload_master(u, values[u].data());
  Example example;
  for (int t = 0; t < 12; ++t) {
    example.input_ids.push_back((t * 7 + 3) % 50);
    example.labels.push_back(example.input_ids.back());
  }
  model.reserve(1, 12);
  model.set_batch(make_batch({example}));
  std::vector<float> logits(12 * config.vocab_size);
  model.forward(units, Tensor(), logits.data());
  return logits;
}

std::vector<std::vector<float>> load(const std::string& dir, const ParamLayout& layout) {
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  std::vector<std::vector<float>> units;
  for (const UnitLayout& unit : layout.units) {
    units.emplace_back(unit.numel);
    load_unit_from_checkpoint(checkpoint, unit, units.back().data());
  }
  return units;
}

class SaveHfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardtrain_save_hf_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(SaveHfTest, Fp32RoundTripGivesIdenticalLogits) {
  const ModelConfig config = tiny_config();
  const ParamLayout layout = make_param_layout(config);
  const auto values = random_units(layout);
  const std::string out = (dir_ / "model").string();
  save_hf_checkpoint(out, config, layout, [&](int u) { return values[u].data(); }, DType::kF32);

  EXPECT_EQ(read_hf_config(out + "/config.json").num_hidden_layers, 2);
  const auto loaded = load(out, layout);
  for (size_t u = 0; u < values.size(); ++u) EXPECT_EQ(loaded[u], values[u]) << "unit " << u;
  EXPECT_EQ(logits_of(config, loaded), logits_of(config, values));
  // Tied embeddings: no lm_head tensor is written.
  EXPECT_EQ(HfCheckpoint::open(out).find("lm_head.weight"), nullptr);
}

TEST_F(SaveHfTest, Bf16SaveHoldsRoundedValues) {
  const ModelConfig config = tiny_config();
  const ParamLayout layout = make_param_layout(config);
  const auto values = random_units(layout);
  const std::string out = (dir_ / "model_bf16").string();
  save_hf_checkpoint(out, config, layout, [&](int u) { return values[u].data(); }, DType::kBF16);
  const auto loaded = load(out, layout);
  for (size_t u = 0; u < values.size(); ++u) {
    for (size_t i = 0; i < values[u].size(); ++i) {
      ASSERT_EQ(loaded[u][i], bf16_to_f32(f32_to_bf16(values[u][i]))) << "unit " << u << " " << i;
    }
  }
  EXPECT_EQ(read_hf_config(out + "/config.json").torch_dtype, "bfloat16");
}

TEST_F(SaveHfTest, ReplacesExistingDirectoryWhole) {
  const ModelConfig config = tiny_config();
  const ParamLayout layout = make_param_layout(config);
  const auto values = random_units(layout);
  const std::string out = (dir_ / "model").string();
  fs::create_directories(out);
  std::ofstream(out + "/stale.txt") << "old";
  save_hf_checkpoint(out, config, layout, [&](int u) { return values[u].data(); }, DType::kF32);
  EXPECT_FALSE(fs::exists(out + "/stale.txt"));
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  for (const auto& entry : fs::directory_iterator(dir_))
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos);
}

}  // namespace
}  // namespace shardtrain
