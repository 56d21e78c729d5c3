// Gemma 3's config.json as transformers writes it, old and new, and as the multimodal
// checkpoints (4B-27B) hold it: read_hf_config's Gemma keys, the block recipes they make
// (local and global layers, their ropes, the attention scale), the round trip through
// write_hf_config_json, and every bad input as one line naming the file and the key.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "model/family_table.h"
#include "model/hf_config.h"
#include "model/testing/hf_config_file_test.h"
#include "model/testing/expect_model_config.h"

namespace shardtrain {
namespace {

using Gemma3ConfigTest = testing::HfConfigFileTest;

// google/gemma-3-1b-it as transformers 5 writes it (26 layers cut to 6 for the test).
const std::string kGemma1bBody = R"(
  "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "vocab_size": 262144,
  "hidden_size": 1152, "intermediate_size": 6912, "num_hidden_layers": 6,
  "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 256,
  "hidden_activation": "gelu_pytorch_tanh", "max_position_embeddings": 32768,
  "rms_norm_eps": 1e-06, "query_pre_attn_scalar": 256, "sliding_window": 512,
  "attn_logit_softcapping": null, "final_logit_softcapping": null,
  "layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                  "sliding_attention", "sliding_attention", "full_attention"],
  "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
                      "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}},
  "bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0, "dtype": "bfloat16")";

TEST_F(Gemma3ConfigTest, ReadsTransformers5TextConfigAndMakesLocalAndGlobalBlocks) {
  const ModelConfig c = read_hf_config(write("{" + kGemma1bBody + "}"));
  EXPECT_EQ(c.model_type, "gemma3_text");
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_TRUE(c.tie_word_embeddings);  // Gemma's default
  EXPECT_EQ(c.hidden_activation, HiddenActivation::kGeluTanh);
  EXPECT_EQ(c.sliding_window, 512);
  EXPECT_EQ(c.final_logit_softcapping, 0.0);
  EXPECT_EQ(c.eos_token_id, 1);
  ASSERT_EQ(c.layer_types.size(), 6u);
  const BlockRecipe local = block_recipe(c, 0);
  const BlockRecipe global = block_recipe(c, 5);
  EXPECT_EQ(local.sliding_window, 512);
  EXPECT_EQ(local.rope.theta, 10000.0);
  EXPECT_EQ(global.sliding_window, 0);
  EXPECT_EQ(global.rope.theta, 1000000.0);
  for (const BlockRecipe& r : {local, global}) {
    EXPECT_TRUE(r.qk_norm && r.one_plus_norm_weights && r.sandwich_norms);
    EXPECT_EQ(r.activation, HiddenActivation::kGeluTanh);
    EXPECT_DOUBLE_EQ(r.attention_scale, 1.0 / 16.0);  // 256^-1/2
    EXPECT_EQ(r.attn_logit_softcap, 0.0);
  }
}

// google/gemma-3-4b-it's config.json (transformers 4.5x): the text model under text_config
// with an older rope (rope_scaling linear 8 on the global layers, rope_local_base_freq) and
// sliding_window_pattern instead of layer_types; the dtype at the top.
TEST_F(Gemma3ConfigTest, ReadsMultimodalTextConfigWithOlderKeys) {
  const ModelConfig c = read_hf_config(write(R"({
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
    "boi_token_index": 255999, "eos_token_id": [1, 106], "torch_dtype": "bfloat16",
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
      "num_attention_heads": 8, "num_hidden_layers": 12, "num_key_value_heads": 4,
      "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024,
      "sliding_window_pattern": 6, "vocab_size": 262208, "rope_theta": 1000000.0,
      "rope_local_base_freq": 10000.0, "query_pre_attn_scalar": 256},
    "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"}})"));
  EXPECT_EQ(c.model_type, "gemma3_text");
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.eos_token_id, 1);
  ASSERT_EQ(c.layer_types.size(), 12u);
  for (int64_t l = 0; l < 12; ++l) {
    EXPECT_EQ(c.layer_types[l], (l + 1) % 6 == 0 ? LayerAttention::kFull : LayerAttention::kSliding)
        << l;
  }
  const BlockRecipe global = block_recipe(c, 5);
  EXPECT_EQ(global.rope.type, RopeType::kLinear);
  EXPECT_EQ(global.rope.factor, 8.0);
  EXPECT_EQ(global.rope.theta, 1000000.0);
  const BlockRecipe local = block_recipe(c, 0);
  EXPECT_EQ(local.rope.type, RopeType::kDefault);
  EXPECT_EQ(local.rope.theta, 10000.0);
  EXPECT_EQ(local.sliding_window, 1024);
}

TEST_F(Gemma3ConfigTest, RoundTripsThroughWriteHfConfigJson) {
  ModelConfig c = read_hf_config(write("{" + kGemma1bBody + R"(, "final_logit_softcapping": 30.0,
      "attn_logit_softcapping": 50.0})"));
  c.rope.type = RopeType::kLinear;
  c.rope.factor = 8.0;
  const std::string text = write_hf_config_json(c);
  EXPECT_NE(text.find("\"Gemma3ForCausalLM\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"hidden_activation\": \"gelu_pytorch_tanh\""), std::string::npos);
  EXPECT_EQ(text.find("\"hidden_act\""), std::string::npos) << text;
  // An int, as transformers' strict Gemma3TextConfig requires (256.0 is refused there).
  EXPECT_NE(text.find("\"query_pre_attn_scalar\": 256,"), std::string::npos) << text;
  const ModelConfig again = read_hf_config(write(text));
  shardtrain::testing::expect_same_model_config(again, c);
  EXPECT_EQ(again.final_logit_softcapping, 30.0);
  EXPECT_EQ(again.attn_logit_softcapping, 50.0);
  EXPECT_EQ(block_recipe(again, 5).rope.type, RopeType::kLinear);
}

TEST_F(Gemma3ConfigTest, BadInputsAreOneLineNamingTheKey) {
  // layer_types of the wrong length, an unknown layer type, another activation.
  std::string body = kGemma1bBody;
  const std::string six =
      R"("layer_types": ["sliding_attention", "sliding_attention", "sliding_attention",
                  "sliding_attention", "sliding_attention", "full_attention"],)";
  ASSERT_NE(body.find(six), std::string::npos);
  auto with = [&](const std::string& layer_types) {
    std::string text = body;
    text.replace(text.find(six), six.size(), layer_types);
    return "{" + text + "}";
  };
  expect_error(with(R"("layer_types": ["sliding_attention", "full_attention"],)"),
               {"'layer_types'", "2 layers", "num_hidden_layers = 6"});
  expect_error(with(R"("layer_types": ["sliding_attention", "sliding_attention", "chunked",
                  "sliding_attention", "sliding_attention", "full_attention"],)"),
               {"'layer_types'", "chunked", "sliding_attention, full_attention"});
  expect_error("{" + body + R"(, "hidden_activation": "relu"})", {"'hidden_activation'", "relu"});
  // rope_parameters per layer type without the sliding layers' entry.
  expect_error(R"({"model_type": "gemma3_text", "vocab_size": 96, "hidden_size": 64,
      "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
      "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e6}}})",
               {"'rope_parameters.sliding_attention'", "missing"});
  // The multimodal wrapper without its text model, and a text model missing a required key.
  expect_error(R"({"model_type": "gemma3", "vision_config": {}})", {"'text_config'", "gemma3"});
  expect_error(R"({"model_type": "gemma3", "text_config": {"model_type": "gemma3_text",
      "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4}})",
               {"'text_config.vocab_size'", "missing"});
  // Soft caps and the query scalar: negative; a number past double's range is not JSON.
  expect_error("{" + body + R"(, "attn_logit_softcapping": -50.0})",
               {"'attn_logit_softcapping'", "positive number or null", "-50"});
  expect_error("{" + body + R"(, "final_logit_softcapping": 1e999})",
               {"config.json", "not valid JSON"});
  expect_error("{" + body + R"(, "query_pre_attn_scalar": -1})",
               {"'query_pre_attn_scalar'", "positive number or null"});
  // An unsupported model_type lists the supported ones, Gemma 3 among them.
  expect_error(R"({"model_type": "gemma2", "vocab_size": 96})",
               {"'gemma2'", "llama", "qwen3", "gemma3_text", "gemma3 (its gemma3_text)"});
}

}  // namespace
}  // namespace shardtrain
