#include "model/weights.h"

#include <fmt/format.h>

namespace shardtrain {

Tensor param_view(const UnitLayout& unit, Tensor flat, const std::string& name) {
  const int index = unit.find(name);
  SHARDTRAIN_CHECK(index >= 0, "parameter {} not in unit {}", name, unit.name);
  const ParamSpec& spec = unit.params[index];
  SHARDTRAIN_CHECK(spec.offset + spec.numel() <= flat.numel(), "unit {} buffer too small",
                   unit.name);
  char* base = static_cast<char*>(flat.data()) + spec.offset * dtype_size(flat.dtype());
  return Tensor(base, flat.dtype(), spec.shape, flat.device());
}

BlockWeights block_weights(const UnitLayout& unit, Tensor flat, int64_t layer, bool has_bias) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  BlockWeights w;
  w.q_proj = param_view(unit, flat, p + "self_attn.q_proj.weight");
  w.k_proj = param_view(unit, flat, p + "self_attn.k_proj.weight");
  w.v_proj = param_view(unit, flat, p + "self_attn.v_proj.weight");
  if (has_bias) {
    w.q_bias = param_view(unit, flat, p + "self_attn.q_proj.bias");
    w.k_bias = param_view(unit, flat, p + "self_attn.k_proj.bias");
    w.v_bias = param_view(unit, flat, p + "self_attn.v_proj.bias");
  }
  w.o_proj = param_view(unit, flat, p + "self_attn.o_proj.weight");
  w.gate_proj = param_view(unit, flat, p + "mlp.gate_proj.weight");
  w.up_proj = param_view(unit, flat, p + "mlp.up_proj.weight");
  w.down_proj = param_view(unit, flat, p + "mlp.down_proj.weight");
  w.input_norm = param_view(unit, flat, p + "input_layernorm.weight");
  w.post_attention_norm = param_view(unit, flat, p + "post_attention_layernorm.weight");
  return w;
}

RootWeights root_weights(const UnitLayout& unit, Tensor flat, bool tied) {
  RootWeights w;
  w.embed_tokens = param_view(unit, flat, "model.embed_tokens.weight");
  w.final_norm = param_view(unit, flat, "model.norm.weight");
  w.lm_head = tied ? w.embed_tokens : param_view(unit, flat, "lm_head.weight");
  return w;
}

}  // namespace shardtrain
