#include "model/moe_memory.h"

namespace shardtrain {

ExpertExchangeBytes expert_exchange_bytes(const ModelConfig& c, int64_t tokens, int expert_parallel,
                                          DType activation_dtype, bool checkpointing) {
  ExpertExchangeBytes bytes;
  if (!c.moe.enabled() || expert_parallel <= 1) return bytes;
  const int64_t sparse = c.moe.sparse_layer_count(c.num_hidden_layers);
  if (sparse == 0) return bytes;
  const int64_t C = c.hidden_size, F = c.moe.expert_intermediate;
  const size_t act = dtype_size(activation_dtype);
  const int64_t saved_sets = checkpointing ? 1 : sparse;
  const auto for_rows = [&](int64_t R) {
    const size_t saved = static_cast<size_t>(R * (C + 3 * F)) * act + static_cast<size_t>(R) * 8;
    const size_t scratch = static_cast<size_t>(R * (4 * C + 3 * F)) * act;
    return static_cast<size_t>(saved_sets) * saved + scratch;
  };
  const int64_t balanced_rows = tokens * c.moe.experts_per_token;
  bytes.balanced = for_rows(balanced_rows);
  bytes.worst = for_rows(balanced_rows * expert_parallel);
  return bytes;
}

}  // namespace shardtrain
