#include "model/model_config.h"

#include <cmath>

#include "core/error.h"
#include "model/family_table.h"

namespace shardtrain {
namespace {

constexpr const char* kFixHint = "HINT: fix the value in config.json";

void require_positive(const std::string& source, const char* key, int64_t value) {
  if (value <= 0) fail("{}: key '{}' must be positive, got {}; {}", source, key, value, kFixHint);
}

void require_in_range(const std::string& source, const char* key, int64_t value, int64_t maximum) {
  require_positive(source, key, value);
  if (value > maximum) {
    fail("{}: key '{}' = {} is larger than the supported maximum {}; {}", source, key, value,
         maximum, kFixHint);
  }
}

}  // namespace

int64_t ModelConfig::parameter_count() const {
  const int64_t q_dim = num_attention_heads * head_dim;
  const int64_t kv_dim = num_key_value_heads * head_dim;
  const int64_t attention = hidden_size * q_dim + 2 * hidden_size * kv_dim + q_dim * hidden_size +
                            (attention_bias ? q_dim + 2 * kv_dim : 0);
  const int64_t mlp = 3 * hidden_size * intermediate_size;
  const ModelFamily* family = find_model_family(model_type);
  const bool qk_norm = family != nullptr && family->qk_norm;
  const bool sandwich_norms = family != nullptr && family->gemma_blocks;
  const int64_t norms = (sandwich_norms ? 4 : 2) * hidden_size + (qk_norm ? 2 * head_dim : 0);
  const int64_t embeddings = vocab_size * hidden_size * (tie_word_embeddings ? 1 : 2);
  return embeddings + hidden_size + num_hidden_layers * (attention + mlp + norms) +
         moe.parameter_delta(hidden_size, intermediate_size, num_hidden_layers, moe.num_experts);
}

int64_t ModelConfig::active_parameter_count() const {
  return parameter_count() - moe.parameter_delta(hidden_size, intermediate_size, num_hidden_layers,
                                                 moe.num_experts) +
         moe.parameter_delta(hidden_size, intermediate_size, num_hidden_layers,
                             moe.experts_per_token);
}

void ModelConfig::validate(const std::string& source) const {
  const ModelFamily* family = find_model_family(model_type);
  if (family == nullptr) {
    fail(
        "{}: model_type '{}' is not supported (supported: {}); HINT: use a checkpoint of a "
        "supported architecture",
        source, model_type, supported_model_types());
  }
  require_in_range(source, "vocab_size", vocab_size, kMaxVocabSize);
  require_in_range(source, "hidden_size", hidden_size, kMaxHiddenSize);
  require_in_range(source, "intermediate_size", intermediate_size, kMaxIntermediateSize);
  require_in_range(source, "num_hidden_layers", num_hidden_layers, kMaxHiddenLayers);
  require_in_range(source, "num_attention_heads", num_attention_heads, kMaxAttentionHeads);
  require_in_range(source, "num_key_value_heads", num_key_value_heads, kMaxAttentionHeads);
  require_in_range(source, "max_position_embeddings", max_position_embeddings, kMaxPositions);
  if (head_dim < 0 || head_dim > kMaxHeadDim) {
    fail("{}: key 'head_dim' must be in [1, {}], got {}; {}", source, kMaxHeadDim, head_dim,
         kFixHint);
  }
  if (head_dim == 0 && hidden_size % num_attention_heads != 0) {
    fail(
        "{}: key 'num_attention_heads' = {} does not divide hidden_size = {} and head_dim is not "
        "set; {}",
        source, num_attention_heads, hidden_size, kFixHint);
  }
  const int64_t effective_head_dim = head_dim > 0 ? head_dim : hidden_size / num_attention_heads;
  if (effective_head_dim % 2 != 0) {
    fail("{}: key 'head_dim' = {} must be even for rotary embeddings; {}", source,
         effective_head_dim, kFixHint);
  }
  if (num_attention_heads % num_key_value_heads != 0) {
    fail("{}: key 'num_key_value_heads' = {} must divide num_attention_heads = {}; {}", source,
         num_key_value_heads, num_attention_heads, kFixHint);
  }
  if (!(rms_norm_eps > 0.0)) {
    fail("{}: key 'rms_norm_eps' must be positive, got {}; {}", source, rms_norm_eps, kFixHint);
  }
  if (mlp_bias) {
    fail(
        "{}: key 'mlp_bias' = true is not supported; HINT: only Llama models without MLP biases "
        "can be trained",
        source);
  }
  if (family->attention_bias == ModelFamily::Bias::kAlways && !attention_bias) {
    fail("{}: {} models always have q/k/v biases but 'attention_bias' is false; {}", source,
         model_type, kFixHint);
  }
  if (family->attention_bias == ModelFamily::Bias::kNever && attention_bias) {
    fail("{}: key 'attention_bias' = true is not supported for {}; {}", source, model_type,
         kFixHint);
  }
  if (sliding_window < 0) {
    fail("{}: key 'sliding_window' must be >= 0, got {}; {}", source, sliding_window, kFixHint);
  }
  if (sliding_window > 0 && family->sliding_window != ModelFamily::Window::kConfigKey &&
      family->sliding_window != ModelFamily::Window::kLayerTypes) {
    fail("{}: key 'sliding_window' is not supported for {}; {}", source, model_type, kFixHint);
  }
  if (!(rope.theta > 0.0)) {
    fail("{}: key 'rope_theta' must be positive, got {}; {}", source, rope.theta, kFixHint);
  }
  if (!layer_types.empty()) {
    if (static_cast<int64_t>(layer_types.size()) != num_hidden_layers) {
      fail("{}: key 'layer_types' lists {} layers but num_hidden_layers = {}; {}", source,
           layer_types.size(), num_hidden_layers, kFixHint);
    }
    if (!(rope_local.theta > 0.0)) {
      fail("{}: key 'rope_local_base_freq' must be positive, got {}; {}", source,
           rope_local.theta, kFixHint);
    }
  }
  if (rope.type == RopeType::kLinear && !(rope.factor > 0.0)) {
    fail("{}: key 'rope_scaling.factor' must be positive, got {}; {}", source, rope.factor,
         kFixHint);
  }
  for (const auto& [key, value] :
       {std::pair{"query_pre_attn_scalar", query_pre_attn_scalar},
        std::pair{"attn_logit_softcapping", attn_logit_softcapping},
        std::pair{"final_logit_softcapping", final_logit_softcapping}}) {
    if (value < 0.0 || std::isnan(value)) {
      fail("{}: key '{}' must be positive or null, got {}; {}", source, key, value, kFixHint);
    }
  }
  if (rope.type == RopeType::kLlama3) {
    if (!(rope.factor > 0.0)) {
      fail("{}: key 'rope_scaling.factor' must be positive, got {}; {}", source, rope.factor,
           kFixHint);
    }
    if (!(rope.low_freq_factor > 0.0) || !(rope.high_freq_factor > rope.low_freq_factor)) {
      fail(
          "{}: keys 'rope_scaling.low_freq_factor' = {} and 'high_freq_factor' = {} must satisfy "
          "0 < low < high; {}",
          source, rope.low_freq_factor, rope.high_freq_factor, kFixHint);
    }
    require_positive(source, "rope_scaling.original_max_position_embeddings",
                     rope.original_max_position_embeddings);
  }
  for (const auto& [key, id] :
       {std::pair{"bos_token_id", bos_token_id}, std::pair{"eos_token_id", eos_token_id},
        std::pair{"pad_token_id", pad_token_id}}) {
    if (id >= vocab_size) {
      fail("{}: key '{}' = {} is not below vocab_size = {}; {}", source, key, id, vocab_size,
           kFixHint);
    }
  }
  if (family->moe != ModelFamily::Moe::kNone) validate_moe_config(source, moe, num_hidden_layers);
  if (torch_dtype != "float32" && torch_dtype != "bfloat16" && torch_dtype != "float16") {
    fail("{}: key 'torch_dtype' = '{}' is not one of float32, bfloat16, float16; {}", source,
         torch_dtype, kFixHint);
  }
}

}  // namespace shardtrain
