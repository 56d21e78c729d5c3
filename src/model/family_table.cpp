#include "model/family_table.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace shardtrain {
namespace {

using Bias = ModelFamily::Bias;
using Window = ModelFamily::Window;

// Defaults are transformers' (the config classes' constructor defaults).
constexpr ModelFamily kFamilies[] = {
    {"llama", "LlamaForCausalLM", 2048, 0, Bias::kConfigKey, Window::kNone, true, false},
    {"qwen2", "Qwen2ForCausalLM", 32768, 0, Bias::kAlways, Window::kRefusedIfUsed, false, false},
    {"mistral", "MistralForCausalLM", 131072, 0, Bias::kNever, Window::kConfigKey, false, false},
    // Qwen3: head_dim is its own key (128 unless set), q/k norms, biases only if configured.
    {"qwen3", "Qwen3ForCausalLM", 32768, 128, Bias::kConfigKey, Window::kRefusedIfUsed, false,
     true},
    // Gemma 3 text: head_dim 256 unless set, q/k norms, local and global layers, Gemma blocks.
    {"gemma3_text", "Gemma3ForCausalLM", 131072, 256, Bias::kConfigKey, Window::kLayerTypes, false,
     true, /*gemma_blocks=*/true},
    // Qwen3-MoE: Qwen3's attention, sparse MLP blocks (Qwen3MoeConfig's defaults).
    {"qwen3_moe", "Qwen3MoeForCausalLM", 32768, 128, Bias::kConfigKey, Window::kRefusedIfUsed,
     false, true, false, ModelFamily::Moe::kQwen3Moe},
    // Mixtral: Mistral's attention, every block sparse.
    {"mixtral", "MixtralForCausalLM", 131072, 0, Bias::kNever, Window::kConfigKey, false, false,
     false, ModelFamily::Moe::kMixtral},
};

constexpr MultimodalWrapper kWrappers[] = {
    {"gemma3", "text_config", "gemma3_text"},  // Gemma 3 4B-27B: the text part is trained
};

}  // namespace

const ModelFamily* find_model_family(const std::string& model_type) {
  for (const ModelFamily& family : kFamilies) {
    if (model_type == family.model_type) return &family;
  }
  return nullptr;
}

const MultimodalWrapper* find_multimodal_wrapper(const std::string& model_type) {
  for (const MultimodalWrapper& wrapper : kWrappers) {
    if (model_type == wrapper.model_type) return &wrapper;
  }
  return nullptr;
}

std::string supported_model_types() {
  std::string names;
  for (const ModelFamily& family : kFamilies) {
    names += names.empty() ? "" : ", ";
    names += family.model_type;
  }
  for (const MultimodalWrapper& wrapper : kWrappers) {
    names += fmt::format(", {} (its {})", wrapper.model_type, wrapper.text_model_type);
  }
  return names;
}

const ModelFamily& model_family(const ModelConfig& config) {
  const ModelFamily* family = find_model_family(config.model_type);
  SHARDTRAIN_CHECK(family != nullptr, "model_type '{}' not validated", config.model_type);
  return *family;
}

BlockRecipe block_recipe(const ModelConfig& config, int64_t layer) {
  SHARDTRAIN_CHECK(layer >= 0 && layer < config.num_hidden_layers, "layer {} of {}", layer,
                   config.num_hidden_layers);
  const ModelFamily& family = model_family(config);
  BlockRecipe recipe;
  recipe.qk_norm = family.qk_norm;
  recipe.sliding_window = config.sliding_window;
  recipe.rope = config.rope;
  if (!config.layer_types.empty()) {  // local (windowed, local rope) or global layers
    const bool sliding = config.layer_types[layer] == LayerAttention::kSliding;
    recipe.sliding_window = sliding ? config.sliding_window : 0;
    recipe.rope = sliding ? config.rope_local : config.rope;
  }
  recipe.activation = config.hidden_activation;
  if (family.gemma_blocks) {
    recipe.one_plus_norm_weights = true;
    recipe.sandwich_norms = true;
  }
  if (config.query_pre_attn_scalar > 0) {
    recipe.attention_scale = 1.0 / std::sqrt(config.query_pre_attn_scalar);
  }
  recipe.attn_logit_softcap = config.attn_logit_softcapping;
  recipe.moe = config.moe.sparse_layer(layer);
  recipe.moe_renormalize = config.moe.renormalize;
  return recipe;
}

}  // namespace shardtrain
