#include "model/param_layout.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/family_table.h"

namespace shardtrain {
namespace {

int64_t align_up(int64_t n) {
  return (n + kParamAlignElems - 1) / kParamAlignElems * kParamAlignElems;
}

// Appends a parameter at the unit's end. The next one starts at the following aligned offset,
// or right after this one when `packed_with_next` (q/k/v: one matrix for one GEMM).
void add_param(UnitLayout& unit, std::string name, Shape shape, bool decay,
               bool packed_with_next = false) {
  ParamSpec spec;
  spec.name = std::move(name);
  spec.shape = shape;
  spec.offset = unit.numel;
  spec.decay = decay;
  unit.numel = unit.numel + spec.numel();
  if (!packed_with_next) unit.numel = align_up(unit.numel);
  unit.params.push_back(std::move(spec));
}

// Norm weights that scale by 1 + weight start at 0 (the identity scale).
void mark_norms_zero_init(UnitLayout& unit) {
  const std::string suffix = "norm.weight";
  for (ParamSpec& spec : unit.params) {
    const std::string& n = spec.name;
    if (n.size() >= suffix.size() &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      spec.zero_init = true;
    }
  }
}

// Appends block `layer`'s adapters (make_param_layout's LoRA order) and freezes the base.
void add_lora_params(UnitLayout& block, const ModelConfig& c, const LoraConfig& lora,
                     int64_t layer) {
  for (ParamSpec& spec : block.params) spec.trainable = false;
  const int64_t r = lora.rank;
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  const auto shape_of = [&](const std::string& module) -> std::pair<int64_t, int64_t> {
    if (module == "q_proj") return {q_dim, c.hidden_size};
    if (module == "k_proj" || module == "v_proj") return {kv_dim, c.hidden_size};
    if (module == "o_proj") return {c.hidden_size, q_dim};
    if (module == "down_proj") return {c.hidden_size, c.intermediate_size};
    return {c.intermediate_size, c.hidden_size};  // gate_proj, up_proj
  };
  const std::vector<std::string> modules = lora.modules();
  std::vector<std::string> qkv, others;
  for (const std::string& m : modules) {
    (m == "q_proj" || m == "k_proj" || m == "v_proj" ? qkv : others).push_back(m);
  }
  const auto add = [&](const std::string& module, char which, bool packed_with_next) {
    const auto [out, in] = shape_of(module);
    const Shape shape = which == 'A' ? Shape{r, in} : Shape{out, r};
    add_param(block, lora_param_name(layer, module, which), shape, true, packed_with_next);
  };
  for (size_t i = 0; i < qkv.size(); ++i) add(qkv[i], 'A', i + 1 < qkv.size());
  for (const std::string& m : qkv) add(m, 'B', false);
  for (const std::string& m : others) {
    add(m, 'A', false);
    add(m, 'B', false);
  }
}

// A sparse block's router and experts (the Hub checkpoints' names, ModelFamily::Moe): each
// projection's E expert weights back to back, so they are one (E, O, I) tensor for the grouped
// GEMM (model/weights.h MoeWeights): gate (w1), then up (w3), then down (w2) of every expert,
// where HF's module order interleaves them per expert.
// With expert parallelism the experts [first, first + count) go into `experts` instead (a
// unit of their own), in the same order.
void add_moe_params(UnitLayout& block, UnitLayout* experts, const ModelConfig& c,
                    const std::string& p, int64_t first, int64_t count) {
  const bool mixtral = model_family(c).moe == ModelFamily::Moe::kMixtral;
  const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
  const int64_t E = c.moe.num_experts, F = c.moe.expert_intermediate, C = c.hidden_size;
  add_param(block, moe + "gate.weight", {E, C}, true);
  UnitLayout& target = experts != nullptr ? *experts : block;
  const auto projection = [&](const char* name, Shape shape) {
    for (int64_t e = first; e < first + count; ++e) {
      add_param(target, fmt::format("{}experts.{}.{}.weight", moe, e, name), shape, true,
                e + 1 < first + count);
    }
  };
  projection(mixtral ? "w1" : "gate_proj", {F, C});
  projection(mixtral ? "w3" : "up_proj", {F, C});
  projection(mixtral ? "w2" : "down_proj", {C, F});
}

}  // namespace

int UnitLayout::find(const std::string& param_name) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == param_name) return static_cast<int>(i);
  return -1;
}

int64_t ParamLayout::total_numel() const {
  int64_t n = 0;
  for (const auto& unit : units) n += unit.numel;
  return n;
}

int64_t ParamLayout::parameter_count() const {
  int64_t n = 0;
  for (const auto& unit : units)
    for (const auto& p : unit.params) n += p.numel();
  return n;
}

ParamLayout make_param_layout(const ModelConfig& c, const LoraConfig& lora,
                              ExpertPlacement placement) {
  if (lora.enabled && c.moe.enabled()) {  // the grouped expert GEMMs have no frozen path
    fail(
        "lora.enabled = true is not supported for the mixture-of-experts model_type '{}' (its "
        "experts train in full only); HINT: set lora.enabled = false",
        c.model_type);
  }
  // Here, not only in the model, so plan, export and eval refuse what training would.
  if (lora.enabled) check_lora_supports(c);
  ParamLayout layout;
  SHARDTRAIN_CHECK(
      placement.size >= 1 && placement.rank >= 0 && placement.rank < placement.size &&
          (placement.size == 1 || (c.moe.enabled() && c.moe.num_experts % placement.size == 0)),
      "expert placement {}/{} for {} experts", placement.rank, placement.size, c.moe.num_experts);
  layout.expert_parallel = placement.size;
  layout.expert_unit.assign(c.num_hidden_layers, -1);
  std::vector<UnitLayout> expert_units;
  const int64_t local_experts = c.moe.num_experts / placement.size;
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;

  UnitLayout root;
  root.name = "root";
  add_param(root, "model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, true);
  add_param(root, "model.norm.weight", {c.hidden_size}, false);
  if (!c.tie_word_embeddings)
    add_param(root, "lm_head.weight", {c.vocab_size, c.hidden_size}, true);
  if (model_family(c).gemma_blocks) mark_norms_zero_init(root);
  if (lora.enabled) {
    for (ParamSpec& spec : root.params) spec.trainable = false;
  }
  layout.units.push_back(std::move(root));

  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    UnitLayout block;
    block.name = fmt::format("layers.{}", l);
    const std::string p = fmt::format("model.layers.{}.", l);
    // q, k, v weights back to back (a (H+2K)*D x C matrix), then their biases likewise.
    add_param(block, p + "self_attn.q_proj.weight", {q_dim, c.hidden_size}, true, true);
    add_param(block, p + "self_attn.k_proj.weight", {kv_dim, c.hidden_size}, true, true);
    add_param(block, p + "self_attn.v_proj.weight", {kv_dim, c.hidden_size}, true);
    if (c.attention_bias) {
      add_param(block, p + "self_attn.q_proj.bias", {q_dim}, false, true);
      add_param(block, p + "self_attn.k_proj.bias", {kv_dim}, false, true);
      add_param(block, p + "self_attn.v_proj.bias", {kv_dim}, false);
    }
    add_param(block, p + "self_attn.o_proj.weight", {c.hidden_size, q_dim}, true);
    if (block_recipe(c, l).qk_norm) {  // per-head norms: one weight of head_dim each
      add_param(block, p + "self_attn.q_norm.weight", {c.head_dim}, false);
      add_param(block, p + "self_attn.k_norm.weight", {c.head_dim}, false);
    }
    if (block_recipe(c, l).moe && placement.size > 1) {
      UnitLayout& experts = expert_units.emplace_back();
      experts.name = block.name + ".experts";
      experts.experts = true;
      add_moe_params(block, &experts, c, p, placement.rank * local_experts, local_experts);
      // After the root and every block (ParamLayout::units).
      layout.expert_unit[l] = static_cast<int>(1 + c.num_hidden_layers + expert_units.size() - 1);
    } else if (block_recipe(c, l).moe) {
      add_moe_params(block, nullptr, c, p, 0, c.moe.num_experts);
    } else {
      add_param(block, p + "mlp.gate_proj.weight", {c.intermediate_size, c.hidden_size}, true);
      add_param(block, p + "mlp.up_proj.weight", {c.intermediate_size, c.hidden_size}, true);
      add_param(block, p + "mlp.down_proj.weight", {c.hidden_size, c.intermediate_size}, true);
    }
    add_param(block, p + "input_layernorm.weight", {c.hidden_size}, false);
    add_param(block, p + "post_attention_layernorm.weight", {c.hidden_size}, false);
    if (block_recipe(c, l).sandwich_norms) {  // Gemma: the MLP's input norm and its output norm
      add_param(block, p + "pre_feedforward_layernorm.weight", {c.hidden_size}, false);
      add_param(block, p + "post_feedforward_layernorm.weight", {c.hidden_size}, false);
    }
    if (block_recipe(c, l).one_plus_norm_weights) mark_norms_zero_init(block);
    if (lora.enabled) add_lora_params(block, c, lora, l);
    layout.units.push_back(std::move(block));
  }
  for (UnitLayout& experts : expert_units) layout.units.push_back(std::move(experts));
  return layout;
}

}  // namespace shardtrain
