// MoeConfig: the mixture-of-experts part of a model's architecture (qwen3_moe, mixtral): how
// many experts, how many each token is routed to, which blocks are sparse. Read from config.json
// by model/hf_config.cpp (the keys as each family spells them), validated with the rest of
// ModelConfig.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain {

inline constexpr int64_t kMaxExperts = 4096;

struct MoeConfig {
  int64_t num_experts = 0;          // E (Qwen3-MoE `num_experts`, Mixtral `num_local_experts`);
                                    // 0: a dense model
  int64_t experts_per_token = 0;    // k: `num_experts_per_tok`
  int64_t expert_intermediate = 0;  // each expert's F: `moe_intermediate_size` (Mixtral:
                                    // `intermediate_size`)
  // The top-k weights divided by their sum (Qwen3-MoE `norm_topk_prob`; always for Mixtral,
  // whose softmax over the top-k logits is the same thing).
  bool renormalize = false;
  int64_t decoder_sparse_step = 1;       // Qwen3-MoE: block l is sparse when (l + 1) % step == 0
  std::vector<int64_t> mlp_only_layers;  // Qwen3-MoE: blocks that keep the dense MLP
  double router_aux_loss_coef = 0.001;   // the load-balancing loss's weight

  bool enabled() const { return num_experts > 0; }
  // Whether block `layer` has the MoE MLP (else the dense SwiGLU of intermediate_size).
  bool sparse_layer(int64_t layer) const;
  // Number of MoE blocks among the first `layers`.
  int64_t sparse_layer_count(int64_t layers) const;
  // Parameters the sparse blocks add over dense MLPs of `intermediate` (router + `experts` of
  // the experts, less the dense MLP they replace); 0 for a dense model.
  int64_t parameter_delta(int64_t hidden, int64_t intermediate, int64_t layers,
                          int64_t experts) const;
};

// Throws Error naming `source` and the key: E outside [1, kMaxExperts], k < 1 or k > E,
// expert size, decoder_sparse_step < 1, mlp_only_layers outside [0, layers), a negative aux
// coefficient.
void validate_moe_config(const std::string& source, const MoeConfig& moe, int64_t layers);

}  // namespace shardtrain
