// The family table: Qwen3 config.json files as published load with the family's defaults, round
// trip through write_hf_config_json, lay out their q/k norms, and what the table refuses is one
// line naming the file, the key and the supported families.
#include "model/family_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "model/hf_config.h"
#include "model/param_layout.h"
#include "model/testing/expect_model_config.h"

namespace shardtrain {
namespace {

class FamilyTableTest : public testing::TempDirTest {
 protected:
  std::string write(const std::string& text) {
    const std::string path = (dir_ / "config.json").string();
    std::ofstream(path, std::ios::trunc) << text;
    return path;
  }
  std::string error_of(const std::string& text) {
    try {
      read_hf_config(write(text));
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

// Qwen3-0.6B's config.json (transformers 4.51 form).
const char* kQwen3 = R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true,
  "use_sliding_window": false, "vocab_size": 151936})";

TEST_F(FamilyTableTest, ReadsQwen3AndCountsItsQkNorms) {
  const ModelConfig c = read_hf_config(write(kQwen3));
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.head_dim, 128);  // not hidden / heads = 64
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_TRUE(block_recipe(c, 0).qk_norm);
  // 0.44B outside the (tied) 151936 x 1024 embedding, as the model card says.
  EXPECT_EQ(c.parameter_count(), 596049920);
  const ParamLayout layout = make_param_layout(c);
  EXPECT_EQ(layout.parameter_count(), c.parameter_count());
  const UnitLayout& block = layout.units[block_unit(27)];
  const int q_norm = block.find("model.layers.27.self_attn.q_norm.weight");
  ASSERT_GE(q_norm, 0);
  EXPECT_EQ(block.params[q_norm].shape, Shape({128}));
  EXPECT_FALSE(block.params[q_norm].decay);
  // HF module order: o_proj, q_norm, k_norm, then the MLP.
  EXPECT_EQ(block.params[q_norm - 1].name, "model.layers.27.self_attn.o_proj.weight");
  EXPECT_EQ(block.params[q_norm + 1].name, "model.layers.27.self_attn.k_norm.weight");
  // Llama has no q/k norms.
  ModelConfig llama = c;
  llama.model_type = "llama";
  EXPECT_FALSE(block_recipe(llama, 0).qk_norm);
  EXPECT_EQ(make_param_layout(llama).units[1].find("model.layers.0.self_attn.q_norm.weight"), -1);
}

TEST_F(FamilyTableTest, Qwen3HeadDimDefaultsTo128AsTransformers) {
  const ModelConfig c = read_hf_config(write(R"({"model_type": "qwen3", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 100})"));
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.max_position_embeddings, 32768);
}

TEST_F(FamilyTableTest, Qwen3RoundTripsThroughWrittenConfig) {
  ModelConfig c = read_hf_config(write(kQwen3));
  c.tie_word_embeddings = false;  // untied Qwen3 (the 4B+ sizes)
  c.attention_bias = true;        // allowed by the config key
  const std::string text = write_hf_config_json(c);
  EXPECT_NE(text.find("\"Qwen3ForCausalLM\""), std::string::npos);
  EXPECT_NE(text.find("\"use_sliding_window\": false"), std::string::npos);
  shardtrain::testing::expect_same_model_config(read_hf_config(write(text)), c);
}

TEST_F(FamilyTableTest, RefusesWhatTheTableDoesNotSupport) {
  const std::string window = error_of(R"({"model_type": "qwen3", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100,
    "head_dim": 16, "use_sliding_window": true, "max_window_layers": 2})");
  EXPECT_NE(window.find("'use_sliding_window' = true is not supported for qwen3"),
            std::string::npos)
      << window;
  EXPECT_NE(window.find("config.json"), std::string::npos) << window;
  const std::string family = error_of(R"({"model_type": "gemma2", "hidden_size": 64})");
  EXPECT_NE(family.find("'gemma2' is not supported (supported: llama, qwen2, mistral, qwen3, "
                        "gemma3_text"),
            std::string::npos)
      << family;
  EXPECT_EQ(family.find('\n'), std::string::npos);
  // The table's model_types, then the multimodal ones read through their text model.
  const std::string supported = supported_model_types();
  EXPECT_EQ(supported.rfind("llama, qwen2, mistral, qwen3, gemma3_text", 0), 0u) << supported;
  EXPECT_NE(supported.find(", gemma3 (its gemma3_text)"), std::string::npos) << supported;
  EXPECT_EQ(find_model_family("Qwen3"), nullptr);  // model_type is case-sensitive, as in HF
  // A window outside the families that have one: named with the family.
  ModelConfig c = read_hf_config(write(kQwen3));
  c.sliding_window = 512;
  try {
    c.validate("cfg.json");
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'sliding_window' is not supported for qwen3"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace shardtrain
