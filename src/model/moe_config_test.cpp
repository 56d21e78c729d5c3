// Mixture-of-experts configs, layouts and checkpoints: Qwen3-MoE and Mixtral config.json as the
// Hub and transformers 5 write them, the sparse-block rule (decoder_sparse_step, mlp_only_layers),
// parameter counts (all and active), the config round trip, the packed expert layout, the
// activation plan's expert memory and FLOPs on active parameters, and the bad inputs: too many
// experts per token, bad mlp_only_layers, a checkpoint missing an expert or with a mis-shaped
// one (each one line naming the key or tensor).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "io/hf_checkpoint.h"
#include "io/safetensors.h"
#include "model/decoder_model.h"
#include "model/hf_config.h"
#include "model/init_weights.h"
#include "model/lora_config.h"
#include "model/model_flops.h"
#include "model/param_layout.h"
#include "model/save_hf.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

// Qwen3-30B-A3B's config.json (the Hub's keys).
const char* kQwen3_30B_A3B = R"({
  "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 2048,
  "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128,
  "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
  "mlp_only_layers": [], "router_aux_loss_coef": 0.001, "num_hidden_layers": 48,
  "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
  "max_position_embeddings": 40960, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "attention_bias": false, "tie_word_embeddings": false, "use_sliding_window": false,
  "hidden_act": "silu", "torch_dtype": "bfloat16", "output_router_logits": false})";

// Mixtral-8x7B's config.json.
const char* kMixtral = R"({
  "architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
  "intermediate_size": 14336, "num_local_experts": 8, "num_experts_per_tok": 2,
  "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
  "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05,
  "rope_theta": 1000000.0, "sliding_window": null, "router_aux_loss_coef": 0.02,
  "tie_word_embeddings": false, "hidden_act": "silu", "torch_dtype": "bfloat16"})";

class MoeConfigTest : public testing::TempDirTest {
 protected:
  std::string write(const std::string& text) {
    const std::string path = (dir_ / "config.json").string();
    std::ofstream(path, std::ios::trunc) << text;
    return path;
  }
  // `text` with `from` replaced by `to` (once).
  static std::string edited(std::string text, const std::string& from, const std::string& to) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return text.replace(at, from.size(), to);
  }
  // read_hf_config throws one line naming the file and every needle.
  void expect_error(const std::string& text, const std::vector<std::string>& needles) {
    const std::string path = write(text);
    try {
      read_hf_config(path);
      ADD_FAILURE() << "no Error for " << text;
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find(path), std::string::npos) << message;
      for (const std::string& needle : needles) {
        EXPECT_NE(message.find(needle), std::string::npos) << message << " lacks " << needle;
      }
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
};

TEST_F(MoeConfigTest, ReadsQwen3MoeAsTheHubWritesIt) {
  const ModelConfig c = read_hf_config(write(kQwen3_30B_A3B));
  EXPECT_EQ(c.moe.num_experts, 128);
  EXPECT_EQ(c.moe.experts_per_token, 8);
  EXPECT_EQ(c.moe.expert_intermediate, 768);
  EXPECT_TRUE(c.moe.renormalize);
  EXPECT_DOUBLE_EQ(c.moe.router_aux_loss_coef, 0.001);
  EXPECT_EQ(c.moe.sparse_layer_count(c.num_hidden_layers), 48);
  // 30.5B parameters, 3.3B active (Qwen3-30B-A3B's model card).
  EXPECT_NEAR(static_cast<double>(c.parameter_count()) / 1e9, 30.5, 0.1);
  EXPECT_NEAR(static_cast<double>(c.active_parameter_count()) / 1e9, 3.35, 0.05);
  EXPECT_TRUE(block_recipe(c, 0).moe);
  EXPECT_TRUE(block_recipe(c, 0).qk_norm);
}

TEST_F(MoeConfigTest, SparseStepAndMlpOnlyLayersPickTheSparseBlocks) {
  std::string text =
      edited(kQwen3_30B_A3B, R"("decoder_sparse_step": 1)", R"("decoder_sparse_step": 2)");
  text = edited(text, R"("mlp_only_layers": [])", R"("mlp_only_layers": [3])");
  const ModelConfig c = read_hf_config(write(text));
  EXPECT_FALSE(c.moe.sparse_layer(0));  // (0 + 1) % 2 != 0
  EXPECT_TRUE(c.moe.sparse_layer(1));
  EXPECT_FALSE(c.moe.sparse_layer(3));  // mlp_only_layers
  EXPECT_TRUE(c.moe.sparse_layer(5));
  EXPECT_EQ(c.moe.sparse_layer_count(c.num_hidden_layers), 23);
  const ParamLayout layout = make_param_layout(c);
  EXPECT_GE(layout.units[block_unit(0)].find("model.layers.0.mlp.gate_proj.weight"), 0);
  EXPECT_GE(layout.units[block_unit(1)].find("model.layers.1.mlp.experts.127.down_proj.weight"), 0);
}

TEST_F(MoeConfigTest, ReadsTransformers5sNumLocalExpertsForQwen3Moe) {
  const ModelConfig c = read_hf_config(
      write(edited(kQwen3_30B_A3B, R"("num_experts": 128)", R"("num_local_experts": 64)")));
  EXPECT_EQ(c.moe.num_experts, 64);
}

TEST_F(MoeConfigTest, ReadsMixtral) {
  const ModelConfig c = read_hf_config(write(kMixtral));
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.moe.experts_per_token, 2);
  EXPECT_EQ(c.moe.expert_intermediate, 14336);
  EXPECT_TRUE(c.moe.renormalize);  // softmax over the top-k logits
  EXPECT_EQ(c.moe.sparse_layer_count(c.num_hidden_layers), 32);
  // 46.7B parameters, 12.9B active (Mixtral-8x7B's model card).
  EXPECT_NEAR(static_cast<double>(c.parameter_count()) / 1e9, 46.7, 0.1);
  EXPECT_NEAR(static_cast<double>(c.active_parameter_count()) / 1e9, 12.9, 0.1);
  const ParamLayout layout = make_param_layout(c);
  const UnitLayout& block = layout.units[block_unit(0)];
  EXPECT_GE(block.find("model.layers.0.block_sparse_moe.gate.weight"), 0);
  // Each projection's experts back to back: one (E, O, I) tensor for the grouped GEMM.
  const ParamSpec& w1_0 =
      block.params[block.find("model.layers.0.block_sparse_moe.experts.0.w1.weight")];
  const ParamSpec& w1_7 =
      block.params[block.find("model.layers.0.block_sparse_moe.experts.7.w1.weight")];
  EXPECT_EQ(w1_7.offset, w1_0.offset + 7 * 14336 * 4096);
  EXPECT_EQ(block.find("model.layers.0.mlp.gate_proj.weight"), -1);
}

TEST_F(MoeConfigTest, WritesConfigsThatReadBackTheSame) {
  for (std::string text : {std::string(kQwen3_30B_A3B), std::string(kMixtral)}) {
    text = edited(text, R"("num_hidden_layers": )", R"("num_hidden_layers": 4, "x": )");
    if (text.find("qwen3_moe") != std::string::npos) {
      text = edited(text, R"("mlp_only_layers": [])", R"("mlp_only_layers": [2])");
    }
    const ModelConfig c = read_hf_config(write(text));
    const ModelConfig again = read_hf_config(write(write_hf_config_json(c)));
    EXPECT_EQ(again.moe.num_experts, c.moe.num_experts);
    EXPECT_EQ(again.moe.experts_per_token, c.moe.experts_per_token);
    EXPECT_EQ(again.moe.expert_intermediate, c.moe.expert_intermediate);
    EXPECT_EQ(again.moe.renormalize, c.moe.renormalize);
    EXPECT_EQ(again.moe.decoder_sparse_step, c.moe.decoder_sparse_step);
    EXPECT_EQ(again.moe.mlp_only_layers, c.moe.mlp_only_layers);
    EXPECT_DOUBLE_EQ(again.moe.router_aux_loss_coef, c.moe.router_aux_loss_coef);
    EXPECT_EQ(again.parameter_count(), c.parameter_count());
  }
}

TEST_F(MoeConfigTest, RefusesMoreExpertsPerTokenThanExperts) {
  expect_error(
      edited(kQwen3_30B_A3B, R"("num_experts_per_tok": 8)", R"("num_experts_per_tok": 129)"),
      {"num_experts_per_tok", "129", "128"});
  expect_error(edited(kMixtral, R"("num_experts_per_tok": 2)", R"("num_experts_per_tok": 9)"),
               {"num_experts_per_tok", "9"});
  expect_error(edited(kMixtral, R"("num_experts_per_tok": 2)", R"("num_experts_per_tok": 0)"),
               {"num_experts_per_tok"});
}

TEST_F(MoeConfigTest, RefusesBadMlpOnlyLayersAndSparseStep) {
  expect_error(edited(kQwen3_30B_A3B, R"("mlp_only_layers": [])", R"("mlp_only_layers": [48])"),
               {"mlp_only_layers", "48"});
  expect_error(edited(kQwen3_30B_A3B, R"("mlp_only_layers": [])", R"("mlp_only_layers": 3)"),
               {"mlp_only_layers"});
  expect_error(edited(kQwen3_30B_A3B, R"("decoder_sparse_step": 1)", R"("decoder_sparse_step": 0)"),
               {"decoder_sparse_step"});
  expect_error(edited(kQwen3_30B_A3B, R"("num_experts": 128)", R"("num_experts": 0)"),
               {"num_experts"});
}

TEST_F(MoeConfigTest, PlanCountsExpertActivationsAndFlopsCountActiveParameters) {
  ModelConfig c = read_hf_config(write(kQwen3_30B_A3B));
  c.num_hidden_layers = 8;
  using Checkpointing = DecoderModel::Checkpointing;
  const auto bytes =
      DecoderModel::activation_breakdown_for(c, 1, 4096, DType::kBF16, Checkpointing::kNone);
  // Per sparse block at least the routed rows (N*k = 32768) of x, gate, up, act and y in bf16.
  const double routed = 32768.0 * (2 * 2048 + 3 * 768) * 2;
  EXPECT_GE(static_cast<double>(bytes.block_sets), 8 * routed);
  // No dense MLP (3 x 4096 x 6144 bf16 a block, 0.36x the routed rows) is declared when every
  // block is sparse: attention and norms add about 0.45x.
  std::printf("block sets %.3g bytes, %.3fx the routed rows\n",
              static_cast<double>(bytes.block_sets), bytes.block_sets / (8 * routed));
  EXPECT_LE(static_cast<double>(bytes.block_sets), 8 * 1.55 * routed);
  // 6 x active matmul parameters (not all 128 experts) + attention.
  const double flops = training_flops_per_token(c, 4096);
  const double attention = 6.0 * 8 * 4096 * 32 * 128;
  const double active_matmul =
      8 * (2.0 * 2048 * 4096 + 2.0 * 2048 * 512 + 2048.0 * 128 + 8 * 3.0 * 2048 * 768) +
      151936.0 * 2048;
  EXPECT_NEAR(flops, 6 * active_matmul + attention, 1e-6 * flops);
}

// A checkpoint dir holding the qwen3_moe fixture's config and its tensors but `drop` (missing),
// with `reshape` written as a 1-row tensor of its first elements (mis-shaped).
std::string broken_checkpoint(const fs::path& dir, const std::string& drop,
                              const std::string& reshape) {
  const std::string fixture = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/qwen3_moe";
  fs::copy_file(fixture + "/config.json", dir / "config.json");
  const SafetensorsFile source = SafetensorsFile::open(fixture + "/model.safetensors");
  std::vector<SafetensorsTensorSpec> specs;
  for (const SafetensorsEntry& e : source.entries()) {
    if (e.name == drop) continue;
    specs.push_back({e.name, e.dtype, e.name == reshape ? Shape{1, e.shape[1]} : e.shape});
  }
  SafetensorsWriter writer((dir / "model.safetensors").string(), specs);
  for (const SafetensorsTensorSpec& spec : specs) {
    writer.write_tensor(spec.name, source.find(spec.name)->data,
                        static_cast<size_t>(spec.shape.numel()) * dtype_size(spec.dtype));
  }
  writer.finish();
  return dir.string();
}

void expect_load_error(const std::string& dir, const std::string& tensor) {
  const HfCheckpoint checkpoint = HfCheckpoint::open(dir);
  const ModelConfig config = read_hf_config(checkpoint.config_json_path());
  const ParamLayout layout = make_param_layout(config);
  try {
    for (const UnitLayout& unit : layout.units) {
      std::vector<float> values(unit.numel);
      load_unit_from_checkpoint(checkpoint, unit, values.data());
    }
    ADD_FAILURE() << "no Error for a checkpoint without a good " << tensor;
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(tensor), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST_F(MoeConfigTest, RefusesACheckpointMissingAnExpert) {
  const std::string missing = "model.layers.2.mlp.experts.5.up_proj.weight";
  expect_load_error(broken_checkpoint(dir_, missing, ""), missing);
}

TEST_F(MoeConfigTest, RefusesAMisShapedExpert) {
  const std::string bad = "model.layers.0.mlp.experts.3.down_proj.weight";
  expect_load_error(broken_checkpoint(dir_, "", bad), bad);
}

TEST_F(MoeConfigTest, RefusesLoraOnAMixtureOfExperts) {
  const ModelConfig c = read_hf_config(write(kMixtral));
  LoraConfig lora;
  lora.enabled = true;
  try {
    make_param_layout(c, lora);
    ADD_FAILURE() << "no Error for LoRA on mixtral";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("lora.enabled"), std::string::npos) << message;
    EXPECT_NE(message.find("mixtral"), std::string::npos) << message;
  }
}

// A loaded checkpoint saved again has the Hub's per-expert names, shapes and values, and a
// config that reads back as the same model.
TEST_F(MoeConfigTest, SavesTheHubsPerExpertNames) {
  for (const char* name : {"qwen3_moe", "mixtral"}) {
    const std::string fixture = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/" + name;
    const HfCheckpoint source = HfCheckpoint::open(fixture);
    const ModelConfig config = read_hf_config(source.config_json_path());
    const ParamLayout layout = make_param_layout(config);
    std::vector<std::vector<float>> units;
    for (const UnitLayout& unit : layout.units) {
      units.emplace_back(unit.numel);
      load_unit_from_checkpoint(source, unit, units.back().data());
    }
    const std::string out = (dir_ / name).string();
    save_hf_checkpoint(
        out, config, layout, [&](int u) { return units[u].data(); }, DType::kF32);
    const HfCheckpoint saved = HfCheckpoint::open(out);
    EXPECT_EQ(saved.tensor_names().size(), source.tensor_names().size()) << name;
    for (const std::string& tensor : source.tensor_names()) {
      const SafetensorsEntry* want = source.find(tensor);
      ASSERT_NE(saved.find(tensor), nullptr) << name << " lacks " << tensor;
      std::vector<float> a(want->shape.numel()), b(want->shape.numel());
      source.read_into_f32(tensor, want->shape, a.data());
      saved.read_into_f32(tensor, want->shape, b.data());
      EXPECT_EQ(a, b) << tensor;
    }
    const ModelConfig again = read_hf_config(saved.config_json_path());
    EXPECT_EQ(again.moe.num_experts, config.moe.num_experts) << name;
    EXPECT_EQ(again.moe.mlp_only_layers, config.moe.mlp_only_layers) << name;
    EXPECT_EQ(again.parameter_count(), config.parameter_count()) << name;
  }
}

}  // namespace
}  // namespace shardtrain
