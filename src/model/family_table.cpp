#include "model/family_table.h"

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
};

}  // namespace

const ModelFamily* find_model_family(const std::string& model_type) {
  for (const ModelFamily& family : kFamilies) {
    if (model_type == family.model_type) return &family;
  }
  return nullptr;
}

std::string supported_model_types() {
  std::string names;
  for (const ModelFamily& family : kFamilies) {
    names += names.empty() ? "" : ", ";
    names += family.model_type;
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
  return recipe;
}

}  // namespace shardtrain
