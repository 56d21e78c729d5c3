#include "model/moe_config.h"

#include "core/error.h"

namespace shardtrain {
namespace {

constexpr const char* kFixHint = "HINT: fix the value in config.json";

void require_in_range(const std::string& source, const char* key, int64_t value, int64_t max) {
  if (value < 1 || value > max) {
    fail("{}: key '{}' must be in [1, {}], got {}; {}", source, key, max, value, kFixHint);
  }
}

}  // namespace

bool MoeConfig::sparse_layer(int64_t layer) const {
  if (!enabled()) return false;
  for (int64_t dense : mlp_only_layers) {
    if (dense == layer) return false;
  }
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

int64_t MoeConfig::sparse_layer_count(int64_t layers) const {
  int64_t n = 0;
  for (int64_t l = 0; l < layers; ++l) n += sparse_layer(l) ? 1 : 0;
  return n;
}

int64_t MoeConfig::parameter_delta(int64_t hidden, int64_t intermediate, int64_t layers,
                                   int64_t experts) const {
  const int64_t sparse_block = num_experts * hidden + experts * 3 * hidden * expert_intermediate;
  return sparse_layer_count(layers) * (sparse_block - 3 * hidden * intermediate);
}

void validate_moe_config(const std::string& source, const MoeConfig& moe, int64_t layers) {
  require_in_range(source, "num_experts", moe.num_experts, kMaxExperts);
  if (moe.experts_per_token < 1 || moe.experts_per_token > moe.num_experts) {
    fail("{}: key 'num_experts_per_tok' = {} must be in [1, {}] (the number of experts); {}",
         source, moe.experts_per_token, moe.num_experts, kFixHint);
  }
  require_in_range(source, "moe_intermediate_size", moe.expert_intermediate, int64_t{1} << 20);
  require_in_range(source, "decoder_sparse_step", moe.decoder_sparse_step, 1024);
  for (int64_t layer : moe.mlp_only_layers) {
    if (layer < 0 || layer >= layers) {
      fail("{}: key 'mlp_only_layers' lists {}, which is not in [0, num_hidden_layers = {}); {}",
           source, layer, layers, kFixHint);
    }
  }
  if (!(moe.router_aux_loss_coef >= 0.0)) {
    fail("{}: key 'router_aux_loss_coef' must be >= 0, got {}; {}", source,
         moe.router_aux_loss_coef, kFixHint);
  }
}

}  // namespace shardtrain
