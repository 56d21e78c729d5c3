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

namespace {

// Sizes and the head geometry: each in range, heads dividing what they split.
void check_dimensions(const ModelConfig& c, const std::string& source) {
  require_in_range(source, "vocab_size", c.vocab_size, kMaxVocabSize);
  require_in_range(source, "hidden_size", c.hidden_size, kMaxHiddenSize);
  require_in_range(source, "intermediate_size", c.intermediate_size, kMaxIntermediateSize);
  require_in_range(source, "num_hidden_layers", c.num_hidden_layers, kMaxHiddenLayers);
  require_in_range(source, "num_attention_heads", c.num_attention_heads, kMaxAttentionHeads);
  require_in_range(source, "num_key_value_heads", c.num_key_value_heads, kMaxAttentionHeads);
  require_in_range(source, "max_position_embeddings", c.max_position_embeddings, kMaxPositions);
  if (c.head_dim < 0 || c.head_dim > kMaxHeadDim) {
    fail("{}: key 'head_dim' must be in [1, {}], got {}; {}", source, kMaxHeadDim, c.head_dim,
         kFixHint);
  }
  if (c.head_dim == 0 && c.hidden_size % c.num_attention_heads != 0) {
    fail(
        "{}: key 'num_attention_heads' = {} does not divide hidden_size = {} and head_dim is not "
        "set; {}",
        source, c.num_attention_heads, c.hidden_size, kFixHint);
  }
  const int64_t head_dim = c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads;
  if (head_dim % 2 != 0) {
    fail("{}: key 'head_dim' = {} must be even for rotary embeddings; {}", source, head_dim,
         kFixHint);
  }
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    fail("{}: key 'num_key_value_heads' = {} must divide num_attention_heads = {}; {}", source,
         c.num_key_value_heads, c.num_attention_heads, kFixHint);
  }
}

// What the family allows: biases, sliding windows, per-layer types, norm and soft-cap scalars.
void check_family_features(const ModelConfig& c, const ModelFamily& family,
                           const std::string& source) {
  if (!(c.rms_norm_eps > 0.0)) {
    fail("{}: key 'rms_norm_eps' must be positive, got {}; {}", source, c.rms_norm_eps, kFixHint);
  }
  if (c.mlp_bias) {
    fail(
        "{}: key 'mlp_bias' = true is not supported; HINT: only Llama models without MLP biases "
        "can be trained",
        source);
  }
  if (family.attention_bias == ModelFamily::Bias::kAlways && !c.attention_bias) {
    fail("{}: {} models always have q/k/v biases but 'attention_bias' is false; {}", source,
         c.model_type, kFixHint);
  }
  if (family.attention_bias == ModelFamily::Bias::kNever && c.attention_bias) {
    fail("{}: key 'attention_bias' = true is not supported for {}; {}", source, c.model_type,
         kFixHint);
  }
  if (c.sliding_window < 0) {
    fail("{}: key 'sliding_window' must be >= 0, got {}; {}", source, c.sliding_window, kFixHint);
  }
  if (c.sliding_window > 0 && family.sliding_window != ModelFamily::Window::kConfigKey &&
      family.sliding_window != ModelFamily::Window::kLayerTypes) {
    fail("{}: key 'sliding_window' is not supported for {}; {}", source, c.model_type, kFixHint);
  }
  if (!c.layer_types.empty() &&
      static_cast<int64_t>(c.layer_types.size()) != c.num_hidden_layers) {
    fail("{}: key 'layer_types' lists {} layers but num_hidden_layers = {}; {}", source,
         c.layer_types.size(), c.num_hidden_layers, kFixHint);
  }
  for (const auto& [key, value] :
       {std::pair{"query_pre_attn_scalar", c.query_pre_attn_scalar},
        std::pair{"attn_logit_softcapping", c.attn_logit_softcapping},
        std::pair{"final_logit_softcapping", c.final_logit_softcapping}}) {
    if (value < 0.0 || !std::isfinite(value)) {
      fail("{}: key '{}' must be a positive number or null, got {}; {}", source, key, value,
           kFixHint);
    }
  }
}

// Rope bases and scaling: the global base, the local layers' base, linear and Llama 3 factors.
void check_rope(const ModelConfig& c, const std::string& source) {
  const RopeConfig& rope = c.rope;
  if (!(rope.theta > 0.0)) {
    fail("{}: key 'rope_theta' must be positive, got {}; {}", source, rope.theta, kFixHint);
  }
  if (!c.layer_types.empty() && !(c.rope_local.theta > 0.0)) {
    fail("{}: key 'rope_local_base_freq' must be positive, got {}; {}", source,
         c.rope_local.theta, kFixHint);
  }
  if ((rope.type == RopeType::kLinear || rope.type == RopeType::kLlama3) &&
      !(rope.factor > 0.0)) {
    fail("{}: key 'rope_scaling.factor' must be positive, got {}; {}", source, rope.factor,
         kFixHint);
  }
  if (rope.type != RopeType::kLlama3) return;
  if (!(rope.low_freq_factor > 0.0) || !(rope.high_freq_factor > rope.low_freq_factor)) {
    fail(
        "{}: keys 'rope_scaling.low_freq_factor' = {} and 'high_freq_factor' = {} must satisfy "
        "0 < low < high; {}",
        source, rope.low_freq_factor, rope.high_freq_factor, kFixHint);
  }
  require_positive(source, "rope_scaling.original_max_position_embeddings",
                   rope.original_max_position_embeddings);
}

// Special token ids inside the vocabulary, and a dtype the loader reads.
void check_tokens_and_dtype(const ModelConfig& c, const std::string& source) {
  for (const auto& [key, id] :
       {std::pair{"bos_token_id", c.bos_token_id}, std::pair{"eos_token_id", c.eos_token_id},
        std::pair{"pad_token_id", c.pad_token_id}}) {
    if (id >= c.vocab_size) {
      fail("{}: key '{}' = {} is not below vocab_size = {}; {}", source, key, id, c.vocab_size,
           kFixHint);
    }
  }
  if (c.torch_dtype != "float32" && c.torch_dtype != "bfloat16" && c.torch_dtype != "float16") {
    fail("{}: key 'torch_dtype' = '{}' is not one of float32, bfloat16, float16; {}", source,
         c.torch_dtype, kFixHint);
  }
}

}  // namespace

void ModelConfig::validate(const std::string& source) const {
  const ModelFamily* family = find_model_family(model_type);
  if (family == nullptr) {
    fail(
        "{}: model_type '{}' is not supported (supported: {}); HINT: use a checkpoint of a "
        "supported architecture",
        source, model_type, supported_model_types());
  }
  check_dimensions(*this, source);
  check_family_features(*this, *family, source);
  check_rope(*this, source);
  check_tokens_and_dtype(*this, source);
  if (family->moe != ModelFamily::Moe::kNone) validate_moe_config(source, moe, num_hidden_layers);
}

}  // namespace shardtrain
