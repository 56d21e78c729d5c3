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
// a mask), residual add, post-attention norm, gated MLP, residual add; Gemma adds a norm on each
// sublayer's output before its residual add.
struct BlockRecipe {
  bool qk_norm = false;        // RMSNorm per head on q and k, before rope (Qwen3, Gemma 3)
  int64_t sliding_window = 0;  // 0: causal over the whole sequence; w > 0: the last w keys
  RopeConfig rope;             // this block's rotary embedding (its base may differ per layer)
  // Gemma: every norm of the block scales by 1 + weight; post_attention_layernorm and
  // post_feedforward_layernorm normalise the attention and MLP outputs before the residual adds
  // (pre_feedforward_layernorm is then the MLP's input norm).
  bool one_plus_norm_weights = false;
  bool sandwich_norms = false;
  HiddenActivation activation = HiddenActivation::kSilu;  // SwiGLU or GeGLU
  double attention_scale = 0;    // 0: head_dim^-1/2
  double attn_logit_softcap = 0;  // 0: none
  // The MLP slot routes each token over experts (model/layers/moe_mlp.h; MoeConfig::sparse_layer).
  bool moe = false;
  bool moe_renormalize = false;  // MoeConfig::renormalize
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
    kLayerTypes,     // `sliding_window` on the layers `layer_types` (or `sliding_window_pattern`)
                     // marks sliding, which use the local rope (Gemma 3)
  };
  const char* model_type;
  const char* hf_architecture;    // config.json's "architectures" on save
  int64_t default_max_positions;  // when config.json omits max_position_embeddings
  int64_t default_head_dim;       // when it omits head_dim; 0: hidden_size / num_attention_heads
  Bias attention_bias;
  Window sliding_window;
  bool mlp_bias_key;  // has Llama's `mlp_bias` key (refused when true)
  bool qk_norm;
  // Gemma: norms scale by 1 + weight, sandwich norms (BlockRecipe), embeddings scaled by
  // sqrt(hidden_size), GeGLU by `hidden_activation`, query_pre_attn_scalar and the soft caps.
  bool gemma_blocks = false;
  // Mixture of experts: which config keys and checkpoint names (model/hf_config.cpp,
  // model/param_layout.cpp).
  enum class Moe {
    kNone,
    kQwen3Moe,  // num_experts, moe_intermediate_size, norm_topk_prob, decoder_sparse_step,
                // mlp_only_layers; mlp.gate, mlp.experts.N.{gate,up,down}_proj
    kMixtral,   // num_local_experts, intermediate_size (the experts'), renormalised;
                // block_sparse_moe.gate, block_sparse_moe.experts.N.{w1,w3,w2}
  };
  Moe moe = Moe::kNone;
};

// A multimodal model_type whose text part is a family of the table: config.json holds it under
// `text_key` (without its own model_type: `text_model_type`), and its weights under a
// language-model prefix (io/hf_checkpoint.h finds them by the text model's names).
struct MultimodalWrapper {
  const char* model_type;       // "gemma3"
  const char* text_key;         // "text_config"
  const char* text_model_type;  // "gemma3_text"
};
// The wrapper of `model_type`, or nullptr.
const MultimodalWrapper* find_multimodal_wrapper(const std::string& model_type);

// The entry of `model_type`, or nullptr when it is not supported.
const ModelFamily* find_model_family(const std::string& model_type);
// "llama, qwen2, mistral, qwen3, gemma3_text, gemma3 (text)": for error messages.
std::string supported_model_types();
// REQUIRES: config.model_type is supported (ModelConfig::validate).
const ModelFamily& model_family(const ModelConfig& config);
// Block `layer`'s recipe. REQUIRES: config validated, 0 <= layer < num_hidden_layers.
BlockRecipe block_recipe(const ModelConfig& config, int64_t layer);

}  // namespace shardtrain
