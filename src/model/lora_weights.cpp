#include "model/lora_weights.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace shardtrain {
namespace {

// View of parameter `name` in a buffer that starts at unit element `base`.
Tensor view_at(const UnitLayout& unit, Tensor flat, int64_t base, const std::string& name) {
  const int index = unit.find(name);
  SHARDTRAIN_CHECK(index >= 0, "parameter {} not in unit {}", name, unit.name);
  const ParamSpec& spec = unit.params[index];
  SHARDTRAIN_CHECK(spec.offset >= base && spec.offset - base + spec.numel() <= flat.numel(),
                   "unit {}: {} outside the buffer", unit.name, name);
  char* data = static_cast<char*>(flat.data()) + (spec.offset - base) * dtype_size(flat.dtype());
  return Tensor(data, flat.dtype(), spec.shape, flat.device());
}

uint64_t mix(uint64_t seed, uint64_t value) {
  uint64_t z = seed ^ (value + 0x9E3779B97F4A7C15ull + (seed << 6) + (seed >> 2));
  z = (z ^ (z >> 31)) * 0xD6E8FEB86659FD93ull;
  return z ^ (z >> 32);
}

// The adapters of the targeted modules among `modules` (one Linear: q/k/v packed, else one),
// output columns at `columns` (each module's first output column in the Linear).
LoraAdapter adapter_for(const UnitLayout& unit, Tensor flat, int64_t base, int64_t layer,
                        const std::vector<std::string>& modules,
                        const std::vector<int64_t>& columns, const LoraRun& run,
                        uint64_t linear_index) {
  const LoraConfig& config = *run.config;
  LoraAdapter adapter;
  Tensor first_A;
  int64_t rows = 0;
  for (size_t m = 0; m < modules.size(); ++m) {
    if (!config.targets(modules[m])) continue;
    const Tensor A = view_at(unit, flat, base, lora_param_name(layer, modules[m], 'A'));
    if (!first_A.defined()) first_A = A;
    // The layout packs a Linear's A matrices back to back (make_param_layout).
    SHARDTRAIN_CHECK(static_cast<const char*>(first_A.data()) +
                             rows * A.dim(1) * static_cast<int64_t>(dtype_size(A.dtype())) ==
                         A.data(),
                     "LoRA A matrices of layer {} are not packed", layer);
    rows += A.dim(0);
    adapter.slices.push_back(
        {view_at(unit, flat, base, lora_param_name(layer, modules[m], 'B')), columns[m]});
  }
  if (!first_A.defined()) return adapter;
  adapter.A_SI = Tensor(first_A.data(), first_A.dtype(), {rows, first_A.dim(1)}, first_A.device());
  adapter.rank = config.rank;
  adapter.scale = config.scale();
  adapter.dropout = run.training ? static_cast<float>(config.dropout) : 0.0f;
  adapter.dropout_seed = mix(mix(run.dropout_seed, static_cast<uint64_t>(layer)), linear_index);
  adapter.scratch = run.scratch;
  return adapter;
}

template <typename Visit>
void for_each_linear(BlockWeights& w, int64_t q_width, int64_t kv_width, Visit&& visit) {
  visit(w.attention.qkv, std::vector<std::string>{"q_proj", "k_proj", "v_proj"},
        std::vector<int64_t>{0, q_width, q_width + kv_width}, 0);
  visit(w.attention.o, std::vector<std::string>{"o_proj"}, std::vector<int64_t>{0}, 1);
  visit(w.mlp.gate, std::vector<std::string>{"gate_proj"}, std::vector<int64_t>{0}, 2);
  visit(w.mlp.up, std::vector<std::string>{"up_proj"}, std::vector<int64_t>{0}, 3);
  visit(w.mlp.down, std::vector<std::string>{"down_proj"}, std::vector<int64_t>{0}, 4);
}

int64_t rows_of(const UnitLayout& unit, const std::string& name) {
  const int index = unit.find(name);
  SHARDTRAIN_CHECK(index >= 0, "parameter {} not in unit {}", name, unit.name);
  return unit.params[index].shape[0];
}

}  // namespace

void attach_lora(BlockWeights& w, const UnitLayout& unit, Tensor flat, int64_t layer,
                 const LoraRun& run) {
  const std::string attn = "model.layers." + std::to_string(layer) + ".self_attn.";
  const int64_t q_width = rows_of(unit, attn + "q_proj.weight");
  const int64_t kv_width = rows_of(unit, attn + "k_proj.weight");
  int64_t saved = 0;  // columns of hs the Linears before this one save
  for_each_linear(w, q_width, kv_width,
                  [&](Linear& linear, const std::vector<std::string>& modules,
                      const std::vector<int64_t>& columns, uint64_t index) {
                    linear.frozen = true;
                    linear.lora = adapter_for(unit, flat, 0, layer, modules, columns, run, index);
                    if (!linear.lora.defined()) return;
                    linear.lora.h_store = run.h_store;
                    linear.lora.h_first = saved;
                    saved += linear.lora.A_SI.dim(0);
                  });
}

int64_t lora_saved_columns(const LoraConfig& lora) {
  return static_cast<int64_t>(lora.modules().size()) * lora.rank;
}

BlockWeights lora_block_grads(const UnitLayout& unit, const GradBuffer& grads, int64_t layer,
                              const LoraRun& run) {
  BlockWeights g;
  const Tensor sink = run.grad_sink;
  const auto sink_of = [&sink](int64_t n) { return fit(sink, {n}); };
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const int64_t hidden = unit.params[unit.find(p + "input_layernorm.weight")].numel();
  g.input_norm_C = sink_of(hidden);
  g.post_attention_norm_C = sink_of(hidden);
  // Gemma's sandwich norms: the MLP's input and output norms are frozen too.
  if (unit.find(p + "pre_feedforward_layernorm.weight") >= 0) {
    g.pre_feedforward_norm_C = sink_of(hidden);
    g.post_feedforward_norm_C = sink_of(hidden);
  }
  const int q_norm = unit.find(p + "self_attn.q_norm.weight");
  if (q_norm >= 0) {
    g.attention.q_norm_D = sink_of(unit.params[q_norm].numel());
    g.attention.k_norm_D = sink_of(unit.params[q_norm].numel());
  }
  const int64_t q_width = rows_of(unit, p + "self_attn.q_proj.weight");
  const int64_t kv_width = rows_of(unit, p + "self_attn.k_proj.weight");
  for_each_linear(g, q_width, kv_width,
                  [&](Linear& linear, const std::vector<std::string>& modules,
                      const std::vector<int64_t>& columns, uint64_t index) {
                    linear.frozen = true;  // weight_OI and bias_O stay undefined
                    linear.lora = adapter_for(unit, grads.flat, grads.offset, layer, modules,
                                              columns, run, index);
                  });
  return g;
}

LoraScratch declare_lora_scratch(ActivationPlan& plan, const ModelConfig& c, const LoraConfig& lora,
                                 int64_t tokens) {
  const int64_t q_width = c.num_attention_heads * c.head_dim;
  const int64_t kv_width = c.num_key_value_heads * c.head_dim;
  int64_t qkv_slices = 0;
  for (const char* module : {"q_proj", "k_proj", "v_proj"}) qkv_slices += lora.targets(module);
  // q/k/v is one packed Linear: a block-diagonal B whenever one of them has an adapter.
  const int64_t packed_width = qkv_slices > 0 ? q_width + 2 * kv_width : 0;
  const int64_t max_in = std::max({c.hidden_size, c.intermediate_size, q_width});
  return LoraScratch::declare(plan, tokens, lora.rank, std::max<int64_t>(qkv_slices, 1),
                              packed_width, max_in, lora.dropout > 0.0);
}

}  // namespace shardtrain
