#include "model/model_flops.h"

namespace shardtrain {

double training_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  const double C = static_cast<double>(c.hidden_size);
  const double F = static_cast<double>(c.intermediate_size);
  const double L = static_cast<double>(c.num_hidden_layers);
  const double H = static_cast<double>(c.num_attention_heads);
  const double K = static_cast<double>(c.num_key_value_heads > 0 ? c.num_key_value_heads
                                                                 : c.num_attention_heads);
  const double D =
      static_cast<double>(c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads);
  const double V = static_cast<double>(c.vocab_size);
  const double per_layer = 2 * C * H * D + 2 * C * K * D + 3 * C * F;  // q, o; k, v; mlp
  const double matmul = L * per_layer + V * C;
  return 6 * matmul + 6 * L * static_cast<double>(seq_len) * H * D;
}

}  // namespace shardtrain
