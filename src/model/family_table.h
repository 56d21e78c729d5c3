// The model families: one table entry per Hugging Face `model_type`, saying how its config.json
// maps onto ModelConfig (model/hf_config.cpp reads and writes through it) and which recipe its
// blocks follow (block_recipe). Block code reads the recipe, never the model_type.
//
// Adding a family is an entry here plus any layer it needs (docs/architecture.md).
#pragma once

#include <cstdint>
#include <string>

#include "model/model_config.h"

namespace shardtrain {

// What a block is made of: input norm, attention (q/k/v/o, optional per-head q/k norms, rope,
// a mask), residual add, post-attention norm, SwiGLU MLP, residual add.
struct BlockRecipe {
  bool qk_norm = false;        // RMSNorm per head on q and k, before rope (Qwen3)
  int64_t sliding_window = 0;  // 0: causal over the whole sequence; w > 0: the last w keys
  RopeConfig rope;             // this block's rotary embedding (its base may differ per layer)
};

struct ModelFamily {
  enum class Bias {
    kConfigKey,  // q/k/v biases as config.json's `attention_bias` says (default false)
    kAlways,     // always q/k/v biases (Qwen2)
    kNever,      // never (Mistral)
  };
  enum class Window {
    kNone,           // no sliding window
    kConfigKey,      // `sliding_window` (null or 0: none), every layer (Mistral)
    kRefusedIfUsed,  // Qwen's `use_sliding_window` (+ max_window_layers): refused when it applies
  };
  const char* model_type;
  const char* hf_architecture;    // config.json's "architectures" on save
  int64_t default_max_positions;  // when config.json omits max_position_embeddings
  int64_t default_head_dim;       // when it omits head_dim; 0: hidden_size / num_attention_heads
  Bias attention_bias;
  Window sliding_window;
  bool mlp_bias_key;  // has Llama's `mlp_bias` key (refused when true)
  bool qk_norm;
};

// The entry of `model_type`, or nullptr when it is not supported.
const ModelFamily* find_model_family(const std::string& model_type);
// "llama, qwen2, mistral, qwen3": for error messages.
std::string supported_model_types();
// REQUIRES: config.model_type is supported (ModelConfig::validate).
const ModelFamily& model_family(const ModelConfig& config);
// Block `layer`'s recipe. REQUIRES: config validated, 0 <= layer < num_hidden_layers.
BlockRecipe block_recipe(const ModelConfig& config, int64_t layer);

}  // namespace shardtrain
