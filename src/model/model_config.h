// ModelConfig: the architecture of a decoder of a supported family (model/family_table.h), as
// read from a Hugging Face config.json (model/hf_config.h) or built by hand for random init.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/moe_config.h"

namespace shardtrain {

enum class RopeType { kDefault, kLlama3, kLinear };

struct RopeConfig {
  double theta = 10000.0;
  RopeType type = RopeType::kDefault;
  // llama3 scaling (used when type == kLlama3); `factor` also divides every frequency of
  // linear scaling (kLinear: Gemma 3's global layers from 4B up)
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// Maxima of the sizes config.json may declare: far above the largest published Llama-family
// checkpoint (vocab 256K, hidden 16K, 126 layers, 128 heads), low enough that every product the
// model code forms stays far below 2^63.
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 22;
inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 17;
inline constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;
inline constexpr int64_t kMaxHiddenLayers = 1024;
inline constexpr int64_t kMaxAttentionHeads = 1024;
inline constexpr int64_t kMaxHeadDim = 4096;
inline constexpr int64_t kMaxPositions = int64_t{1} << 25;

// The MLP's gated activation: silu (SwiGLU: Llama, Qwen, Mistral) or the tanh-approximated
// GELU (GeGLU: Gemma's gelu_pytorch_tanh).
enum class HiddenActivation { kSilu, kGeluTanh };

// Which attention a layer runs (transformers' `layer_types`): over the whole causal sequence,
// or within `sliding_window` keys with the local rope (Gemma 3).
enum class LayerAttention { kFull, kSliding };

struct ModelConfig {
  std::string model_type = "llama";  // a model_type of model/family_table.h
  // The multimodal model_type config.json named when this is its text part ("gemma3", whose
  // text_config was read: weights under a language-model prefix); "" for a text model.
  std::string multimodal_model_type;
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads unless config.json sets it
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases (always true for qwen2)
  bool mlp_bias = false;        // Llama's optional mlp bias; rejected as unsupported if true
  int64_t sliding_window = 0;   // mistral; 0 = none. Longer sequences: a windowed mask.
  RopeConfig rope;
  MoeConfig moe;  // qwen3_moe, mixtral (model/moe_config.h); disabled elsewhere
  HiddenActivation hidden_activation = HiddenActivation::kSilu;
  // Gemma 3 (empty / 0 elsewhere): per-layer attention kinds (num_hidden_layers of them; the
  // sliding ones use sliding_window and rope_local), the rope of the sliding layers, the
  // attention scale's query_pre_attn_scalar (scale = its -1/2 power; 0: head_dim's), and the
  // soft caps of attention scores and final logits (0: none).
  std::vector<LayerAttention> layer_types;
  RopeConfig rope_local;
  double query_pre_attn_scalar = 0;
  double attn_logit_softcapping = 0;
  double final_logit_softcapping = 0;
  int64_t bos_token_id = -1;  // -1: not set
  int64_t eos_token_id = -1;  // the first one when config.json lists several
  int64_t pad_token_id = -1;
  std::string torch_dtype = "float32";  // as written into config.json on save

  // Number of parameters (tied embeddings counted once; every expert).
  int64_t parameter_count() const;
  // Parameters one token's forward reads: the k routed experts of each MoE block, not all E
  // (= parameter_count() for a dense model).
  int64_t active_parameter_count() const;
  // Throws Error naming `source` (a file path or "config") if the values are inconsistent, a
  // size is above its maximum below (sizes are bounded before anything is allocated from them),
  // or a bos/eos/pad token id is not below vocab_size.
  void validate(const std::string& source) const;
};

}  // namespace shardtrain
