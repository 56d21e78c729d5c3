#include "model/model_flops.h"

namespace shardtrain {

double training_flops_per_token(const ModelConfig& c, int64_t seq_len, const LoraConfig& lora) {
  const double C = static_cast<double>(c.hidden_size);
  const double F = static_cast<double>(c.intermediate_size);
  const double L = static_cast<double>(c.num_hidden_layers);
  const double H = static_cast<double>(c.num_attention_heads);
  const double K = static_cast<double>(c.num_key_value_heads > 0 ? c.num_key_value_heads
                                                                 : c.num_attention_heads);
  const double D =
      static_cast<double>(c.head_dim > 0 ? c.head_dim : c.hidden_size / c.num_attention_heads);
  const double V = static_cast<double>(c.vocab_size);
  const double projections = 2 * C * H * D + 2 * C * K * D;  // q, o; k, v
  // Sparse blocks count the router and the k experts a token runs (active parameters), dense
  // ones the MLP.
  const double sparse = static_cast<double>(c.moe.sparse_layer_count(c.num_hidden_layers));
  const double moe = C * static_cast<double>(c.moe.num_experts) +
                     3 * C * static_cast<double>(c.moe.expert_intermediate) *
                         static_cast<double>(c.moe.experts_per_token);
  const double matmul = L * projections + (L - sparse) * 3 * C * F + sparse * moe + V * C;
  const double attention = 6 * L * static_cast<double>(seq_len) * H * D;
  if (!lora.enabled) return 6 * matmul + attention;
  const double r = static_cast<double>(lora.rank);
  double adapters = 0;  // r (I + O) per targeted module and layer
  for (const std::string& module : lora.modules()) {
    if (module == "q_proj" || module == "o_proj") adapters += r * (C + H * D);
    if (module == "k_proj" || module == "v_proj") adapters += r * (C + K * D);
    if (module == "gate_proj" || module == "up_proj" || module == "down_proj") adapters += r * (C + F);
  }
  return 4 * matmul + 6 * L * adapters + attention;
}

}  // namespace shardtrain
