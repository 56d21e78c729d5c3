#include "model/weights.h"

#include <fmt/format.h>

#include <initializer_list>
#include <tuple>

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

namespace {

// One tensor over parts that lie back to back in memory (rows of the same width, or 1-D).
Tensor packed_view(std::initializer_list<Tensor> parts) {
  const Tensor& first = *parts.begin();
  const int64_t width = first.shape().rank() == 2 ? first.dim(1) : 1;
  int64_t rows = 0;
  const char* next = static_cast<const char*>(first.data());
  for (const Tensor& part : parts) {
    SHARDTRAIN_CHECK(part.data() == next && part.numel() % width == 0,
                     "q/k/v parameters are not packed back to back");
    next += part.bytes();
    rows += part.numel() / width;
  }
  return Tensor(first.data(), first.dtype(),
                first.shape().rank() == 2 ? Shape{rows, width} : Shape{rows}, first.device());
}

// The view of `name` when the layout has it, else undefined (optional biases and norms).
Tensor optional_view(const UnitLayout& unit, Tensor flat, const std::string& name) {
  return unit.find(name) >= 0 ? param_view(unit, flat, name) : Tensor();
}

// Every expert's `name` projection (experts.0 .. experts.E-1, back to back) as one (E, O, I).
Tensor experts_view(const UnitLayout& unit, Tensor flat, const std::string& moe, int64_t experts,
                    const char* name) {
  const Tensor first = param_view(unit, flat, fmt::format("{}experts.0.{}.weight", moe, name));
  const Tensor last =
      param_view(unit, flat, fmt::format("{}experts.{}.{}.weight", moe, experts - 1, name));
  SHARDTRAIN_CHECK(static_cast<const char*>(last.data()) ==
                       static_cast<const char*>(first.data()) + (experts - 1) * first.bytes(),
                   "{} experts' {} are not packed back to back", moe, name);
  return Tensor(first.data(), first.dtype(), Shape{experts, first.dim(0), first.dim(1)},
                first.device());
}

// A sparse block's views (Qwen3-MoE's or Mixtral's names), or false for a dense block.
bool moe_weights(const UnitLayout& unit, Tensor flat, const std::string& p, MoeWeights& w) {
  for (const auto& [block, gate, up, down] :
       {std::tuple{"mlp.", "gate_proj", "up_proj", "down_proj"},
        std::tuple{"block_sparse_moe.", "w1", "w3", "w2"}}) {
    const std::string moe = p + block;
    const Tensor router = optional_view(unit, flat, moe + "gate.weight");
    if (!router.defined()) continue;
    const int64_t experts = router.dim(0);
    w.router.weight_OI = router;
    // Expert parallelism: the experts are in a unit of their own (local_expert_weights).
    if (unit.find(fmt::format("{}experts.0.{}.weight", moe, gate)) < 0 &&
        unit.find(fmt::format("{}experts.{}.{}.weight", moe, experts - 1, gate)) < 0) {
      return true;
    }
    w.gate_EFC = experts_view(unit, flat, moe, experts, gate);
    w.up_EFC = experts_view(unit, flat, moe, experts, up);
    w.down_ECF = experts_view(unit, flat, moe, experts, down);
    return true;
  }
  return false;
}

}  // namespace

void local_expert_weights(const UnitLayout& unit, Tensor flat, MoeWeights& w) {
  SHARDTRAIN_CHECK(unit.experts && unit.params.size() % 3 == 0 && !unit.params.empty(),
                   "unit {} is not a unit of experts", unit.name);
  const size_t local = unit.params.size() / 3;
  const auto projection = [&](size_t first) {
    const Tensor one = param_view(unit, flat, unit.params[first].name);
    return Tensor(one.data(), one.dtype(),
                  Shape{static_cast<int64_t>(local), one.dim(0), one.dim(1)}, one.device());
  };
  w.gate_EFC = projection(0);
  w.up_EFC = projection(local);
  w.down_ECF = projection(2 * local);
}

BlockWeights block_weights(const UnitLayout& unit, Tensor flat, int64_t layer) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  const std::string attn = p + "self_attn.";
  BlockWeights w;
  const Tensor q = param_view(unit, flat, attn + "q_proj.weight");
  const Tensor k = param_view(unit, flat, attn + "k_proj.weight");
  const Tensor v = param_view(unit, flat, attn + "v_proj.weight");
  w.attention.qkv.weight_OI = packed_view({q, k, v});
  const Tensor q_bias = optional_view(unit, flat, attn + "q_proj.bias");
  if (q_bias.defined()) {
    w.attention.qkv.bias_O = packed_view({q_bias, param_view(unit, flat, attn + "k_proj.bias"),
                                          param_view(unit, flat, attn + "v_proj.bias")});
  }
  w.attention.o.weight_OI = param_view(unit, flat, attn + "o_proj.weight");
  w.attention.q_norm_D = optional_view(unit, flat, attn + "q_norm.weight");
  w.attention.k_norm_D = optional_view(unit, flat, attn + "k_norm.weight");
  if (!moe_weights(unit, flat, p, w.moe)) {
    w.mlp.gate.weight_OI = param_view(unit, flat, p + "mlp.gate_proj.weight");
    w.mlp.up.weight_OI = param_view(unit, flat, p + "mlp.up_proj.weight");
    w.mlp.down.weight_OI = param_view(unit, flat, p + "mlp.down_proj.weight");
  }
  w.input_norm_C = param_view(unit, flat, p + "input_layernorm.weight");
  w.post_attention_norm_C = param_view(unit, flat, p + "post_attention_layernorm.weight");
  w.pre_feedforward_norm_C = optional_view(unit, flat, p + "pre_feedforward_layernorm.weight");
  w.post_feedforward_norm_C = optional_view(unit, flat, p + "post_feedforward_layernorm.weight");
  return w;
}

std::vector<ElementRange> fp8_linear_weight_ranges(const UnitLayout& unit, int64_t layer) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  const auto spec = [&](const std::string& name) -> const ParamSpec& {
    const int index = unit.find(name);
    SHARDTRAIN_CHECK(index >= 0, "parameter {} not in unit {}", name, unit.name);
    return unit.params[index];
  };
  const auto whole = [&](const std::string& name) {
    const ParamSpec& s = spec(name);
    return ElementRange{s.offset, s.offset + s.numel()};
  };
  // q, k and v: one packed operand (block_weights checks that they lie back to back).
  std::vector<ElementRange> ranges{
      {spec(p + "self_attn.q_proj.weight").offset, whole(p + "self_attn.v_proj.weight").end},
      whole(p + "self_attn.o_proj.weight")};
  if (unit.find(p + "mlp.gate_proj.weight") >= 0) {  // dense
    for (const char* name :
         {"mlp.gate_proj.weight", "mlp.up_proj.weight", "mlp.down_proj.weight"}) {
      ranges.push_back(whole(p + name));
    }
  }
  return ranges;
}

RootWeights root_weights(const UnitLayout& unit, Tensor flat, bool tied) {
  RootWeights w;
  w.embed_tokens = param_view(unit, flat, "model.embed_tokens.weight");
  w.final_norm = param_view(unit, flat, "model.norm.weight");
  w.lm_head = tied ? w.embed_tokens : param_view(unit, flat, "lm_head.weight");
  return w;
}

}  // namespace shardtrain
