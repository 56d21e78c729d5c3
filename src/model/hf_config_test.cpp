// read_hf_config / write_hf_config_json on config.json files shaped like published checkpoints.
#include "model/hf_config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "model/testing/expect_model_config.h"
#include "model/testing/hf_config_file_test.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

using HfConfigTest = testing::HfConfigFileTest;

// TinyLlama-1.1B style: GQA 32 heads over 4 kv heads.
const char* kLlamaGqa = R"({
  "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
  "intermediate_size": 5632, "num_hidden_layers": 22, "num_attention_heads": 32,
  "num_key_value_heads": 4, "vocab_size": 32000, "rms_norm_eps": 1e-05,
  "max_position_embeddings": 2048, "rope_theta": 10000.0, "rope_scaling": null,
  "tie_word_embeddings": false, "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu",
  "torch_dtype": "bfloat16", "attention_bias": false, "use_cache": true})";

TEST_F(HfConfigTest, ReadsLlamaWithGroupedQueryAttention) {
  const ModelConfig c = read_hf_config(write(kLlamaGqa));
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 5632);
  EXPECT_EQ(c.num_hidden_layers, 22);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.parameter_count(), 1100048384);  // TinyLlama-1.1B's published count
}

TEST_F(HfConfigTest, ReadsQwen2WithBiasesAndTiedEmbeddings) {
  // Qwen2.5-0.5B.
  const ModelConfig c = read_hf_config(write(R"({
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 896,
    "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "vocab_size": 151936, "rms_norm_eps": 1e-06,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "sliding_window": 32768,
    "use_sliding_window": false, "max_window_layers": 21, "tie_word_embeddings": true,
    "bos_token_id": 151643, "eos_token_id": 151643, "torch_dtype": "bfloat16"})"));
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_TRUE(c.attention_bias);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_EQ(c.parameter_count(), 494032768);  // Qwen2.5-0.5B's published count
}

TEST_F(HfConfigTest, RejectsQwen2SlidingWindow) {
  expect_error(R"({"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 4, "vocab_size": 100,
    "use_sliding_window": true, "max_window_layers": 2})",
               {"use_sliding_window"});
}

TEST_F(HfConfigTest, ReadsMistralWithSlidingWindowAndNullHeadDim) {
  const ModelConfig c = read_hf_config(write(R"({
    "model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "vocab_size": 32000, "sliding_window": 4096, "head_dim": null, "rope_theta": 10000.0,
    "eos_token_id": [2, 31999], "dtype": "float16"})"));
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.torch_dtype, "float16");
  EXPECT_EQ(c.max_position_embeddings, 131072);  // transformers' MistralConfig default
  EXPECT_EQ(c.parameter_count(), 7241732096);    // Mistral-7B's published count
}

TEST_F(HfConfigTest, ReadsExplicitHeadDim) {
  const ModelConfig c = read_hf_config(write(R"({
    "model_type": "llama", "hidden_size": 96, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 128})"));
  EXPECT_EQ(c.head_dim, 32);  // not 96 / 4 = 24
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.torch_dtype, "float32");
}

// Llama 3.1 8B rope, classic and rope_parameters forms.
const char* kLlama3Prefix = R"({"model_type": "llama", "hidden_size": 4096,
  "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
  "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 131072,
  "eos_token_id": [128001, 128008, 128009], "bos_token_id": 128000, )";

void expect_llama3_rope(const ModelConfig& c) {
  EXPECT_EQ(c.rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.eos_token_id, 128001);
}

TEST_F(HfConfigTest, ReadsLlama3RopeScalingClassicForm) {
  const ModelConfig c = read_hf_config(write(std::string(kLlama3Prefix) + R"(
    "rope_theta": 500000.0, "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0,
    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "rope_type": "llama3"}})"));
  expect_llama3_rope(c);
}

TEST_F(HfConfigTest, ReadsLlama3RopeScalingLegacyTypeKey) {
  const ModelConfig c = read_hf_config(write(std::string(kLlama3Prefix) + R"(
    "rope_theta": 500000.0, "rope_scaling": {"factor": 8, "low_freq_factor": 1,
    "high_freq_factor": 4, "original_max_position_embeddings": 8192, "type": "llama3"}})"));
  expect_llama3_rope(c);
}

TEST_F(HfConfigTest, ReadsLlama3RopeParametersForm) {
  const ModelConfig c = read_hf_config(write(std::string(kLlama3Prefix) + R"(
    "rope_parameters": {"rope_theta": 500000.0, "rope_type": "llama3", "factor": 8.0,
    "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192}})"));
  expect_llama3_rope(c);

  const ModelConfig plain = read_hf_config(write(std::string(kLlama3Prefix) + R"(
    "rope_parameters": {"rope_theta": 250000.0, "rope_type": "default"}})"));
  EXPECT_EQ(plain.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(plain.rope.theta, 250000.0);
}

// A config.json that would hang the read (a FIFO nobody writes) is refused unread.
TEST(HfConfigFile, AFifoConfigJsonIsRefusedNotRead) {
  const testing::TempDir dir("hf_config_fifo_");
  const std::string path = dir.path() + "/config.json";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  try {
    read_hf_config(path);
    ADD_FAILURE() << "a FIFO config.json was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": not a regular file"), std::string::npos)
        << e.what();
  }
}

TEST_F(HfConfigTest, RejectsUnsupportedModelType) {
  expect_error(R"({"model_type": "gpt2", "n_embd": 768})", {"'gpt2'", "llama, qwen2, mistral"});
}

TEST_F(HfConfigTest, RejectsUnsupportedRopeTypes) {
  expect_error(
      std::string(kLlama3Prefix) + R"("rope_scaling": {"rope_type": "yarn", "factor": 4.0}})",
      {"unsupported rope type", "'yarn'", "rope_scaling.rope_type"});
  expect_error(std::string(kLlama3Prefix) + R"("rope_scaling": {"type": "dynamic", "factor": 2}})",
               {"unsupported rope type", "'dynamic'"});
  // linear (Gemma 3's global layers; transformers applies it to any family) is read.
  const ModelConfig linear = read_hf_config(
      write(std::string(kLlama3Prefix) + R"("rope_scaling": {"type": "linear", "factor": 2}})"));
  EXPECT_EQ(linear.rope.type, RopeType::kLinear);
  EXPECT_EQ(linear.rope.factor, 2.0);
  expect_error(std::string(kLlama3Prefix) +
                   R"("rope_parameters": {"rope_type": "dynamic", "rope_theta": 1e4}})",
               {"unsupported rope type", "rope_parameters.rope_type", "'dynamic'"});
  expect_error(std::string(kLlama3Prefix) + R"("rope_scaling": {"rope_type": "llama3"}})",
               {"rope_scaling.factor", "missing"});
}

TEST_F(HfConfigTest, RejectsWrongJsonTypes) {
  expect_error(R"({"model_type": "llama", "hidden_size": "big", "intermediate_size": 256,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128})",
               {"'hidden_size'", "integer", "\"big\""});
  expect_error(R"({"model_type": "llama", "hidden_size": 64.5, "intermediate_size": 256,
    "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128})",
               {"'hidden_size'", "integer"});
  expect_error(std::string(kLlama3Prefix) + R"("tie_word_embeddings": "yes"})",
               {"'tie_word_embeddings'", "true or false"});
  expect_error(std::string(kLlama3Prefix) + R"("rope_theta": "high"})", {"'rope_theta'", "number"});
  expect_error(std::string(kLlama3Prefix) + R"("rope_scaling": [1, 2]})", {"'rope_scaling'"});
  expect_error(R"({"model_type": 7})", {"'model_type'", "string"});
  expect_error("[1, 2]", {"JSON object"});
}

TEST_F(HfConfigTest, RejectsNonJsonMissingKeysAndMissingFile) {
  expect_error("model_type = llama", {"not valid JSON"});
  expect_error("", {"not valid JSON"});
  expect_error(R"({"model_type": "llama", "hidden_size": 64, "intermediate_size": 256,
    "num_attention_heads": 4, "vocab_size": 128})",
               {"'num_hidden_layers'", "missing"});
  expect_error(R"({"hidden_size": 64})", {"'model_type'", "missing"});
  const std::string missing = (dir_ / "absent.json").string();
  try {
    read_hf_config(missing);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
}

TEST_F(HfConfigTest, ValidateRejectsInconsistentShapes) {
  const std::string base = R"({"model_type": "llama", "intermediate_size": 256,
    "num_hidden_layers": 2, "vocab_size": 128, )";
  expect_error(base + R"("hidden_size": 100, "num_attention_heads": 3})",
               {"'num_attention_heads'", "hidden_size"});
  expect_error(base + R"("hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3})",
               {"'num_key_value_heads'"});
  expect_error(base + R"("hidden_size": 60, "num_attention_heads": 4})", {"'head_dim'", "even"});
  expect_error(base + R"("hidden_size": 0, "num_attention_heads": 4})", {"'hidden_size'"});
  expect_error(base + R"("hidden_size": 64, "num_attention_heads": 0})",
               {"'num_attention_heads'", "positive"});
  expect_error(base + R"("hidden_size": 64, "num_attention_heads": 4, "mlp_bias": true})",
               {"'mlp_bias'", "not supported"});
}

// Sizes that once reached an allocation (bad_alloc, a negative tensor dim, a layout loop that
// grew without bound) are refused by name before anything is allocated.
TEST_F(HfConfigTest, RejectsSizesAboveTheirMaximum) {
  const auto llama = [](const std::string& hidden, const std::string& layers,
                        const std::string& vocab) {
    return R"({"model_type": "llama", "intermediate_size": 256, "num_attention_heads": 4, )"
           R"("hidden_size": )" +
           hidden + R"(, "num_hidden_layers": )" + layers + R"(, "vocab_size": )" + vocab + "}";
  };
  expect_error(llama("1099511627776", "2", "128"), {"'hidden_size'", "1099511627776", "maximum"});
  expect_error(llama("4611686018427387904", "2", "128"), {"'hidden_size'", "maximum"});
  expect_error(llama("64", "1000000000", "128"), {"'num_hidden_layers'", "maximum"});
  expect_error(llama("64", "2", "2147483647"), {"'vocab_size'", "maximum"});
  expect_error(llama("64", "2", "128").replace(1, 0, R"("head_dim": 1048576, )"), {"'head_dim'"});
  // The largest published shapes still load: Llama 3.1 405B (hidden 16384, 126 layers).
  EXPECT_NO_THROW(read_hf_config(write(llama("16384", "126", "128256"))));
}

TEST_F(HfConfigTest, RejectsTokenIdsBeyondTheVocabulary) {
  const std::string base = R"({"model_type": "llama", "intermediate_size": 256,
    "num_hidden_layers": 2, "vocab_size": 128, "hidden_size": 64, "num_attention_heads": 4, )";
  expect_error(base + R"("bos_token_id": 128})", {"'bos_token_id'", "128", "vocab_size"});
  expect_error(base + R"("eos_token_id": 1000000})", {"'eos_token_id'", "vocab_size"});
  expect_error(base + R"("eos_token_id": [2, 4000]})", {"'eos_token_id'", "4000"});
  expect_error(base + R"("pad_token_id": 128})", {"'pad_token_id'", "vocab_size"});
  const ModelConfig c = read_hf_config(
      write(base + R"("bos_token_id": 0, "eos_token_id": [127, 1], "pad_token_id": 5})"));
  EXPECT_EQ(c.eos_token_id, 127);
  EXPECT_EQ(c.pad_token_id, 5);
}

TEST_F(HfConfigTest, RoundTripsEveryModelType) {
  ModelConfig llama;
  llama.model_type = "llama";
  llama.vocab_size = 128256;
  llama.hidden_size = 96;
  llama.intermediate_size = 200;
  llama.num_hidden_layers = 3;
  llama.num_attention_heads = 6;
  llama.num_key_value_heads = 2;
  llama.head_dim = 32;
  llama.max_position_embeddings = 4096;
  llama.rms_norm_eps = 1.0 / 3.0;
  llama.attention_bias = true;
  llama.rope = {500000.0, RopeType::kLlama3, 32.0, 0.5, 3.25, 4096};
  llama.bos_token_id = 128000;
  llama.eos_token_id = 128009;
  llama.pad_token_id = 128004;
  llama.torch_dtype = "bfloat16";

  ModelConfig qwen2 = llama;
  qwen2.model_type = "qwen2";
  qwen2.rope = RopeConfig{};
  qwen2.rope.theta = 1e6;
  qwen2.tie_word_embeddings = true;
  qwen2.bos_token_id = -1;

  ModelConfig mistral = llama;
  mistral.model_type = "mistral";
  mistral.attention_bias = false;
  mistral.sliding_window = 4096;
  mistral.head_dim = 16;

  for (const ModelConfig& original : {llama, qwen2, mistral}) {
    SCOPED_TRACE(original.model_type);
    const std::string text = write_hf_config_json(original);
    EXPECT_NE(text.find("\"use_cache\": true"), std::string::npos);
    EXPECT_NE(text.find("\"hidden_act\": \"silu\""), std::string::npos);
    shardtrain::testing::expect_same_model_config(read_hf_config(write(text)), original);
  }
  EXPECT_NE(write_hf_config_json(qwen2).find("\"Qwen2ForCausalLM\""), std::string::npos);
  EXPECT_NE(write_hf_config_json(mistral).find("\"MistralForCausalLM\""), std::string::npos);
  EXPECT_NE(write_hf_config_json(llama).find("\"rope_type\": \"llama3\""), std::string::npos);
}

}  // namespace
}  // namespace shardtrain
