// ParamLayout: where every parameter of a model lives inside flat unit buffers.
//
// Units (DESIGN.md "Flat units"): unit kRootUnit (0) is the root (embed_tokens, final norm,
// lm_head unless tied); units block_unit(0..L-1) = 1..L are the transformer blocks. Within a unit,
// parameters follow Hugging Face module order (the order of `model.named_parameters()`), each
// starting at an offset that is a multiple of kParamAlignElems elements (128 bytes in bf16), with
// one exception: a block's q_proj, k_proj and v_proj weights are packed back to back, then their
// biases, so one GEMM computes all three projections (BlockWeights::qkv_proj). LoRA adapters
// follow a block's base parameters (make_param_layout below). The layout is a pure
// function of the ModelConfig, so it is identical on every rank and across runs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/lora_config.h"
#include "model/model_config.h"

namespace shardtrain {

inline constexpr int64_t kParamAlignElems = 64;

// Elements [begin, end) of a unit.
struct ElementRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

struct ParamSpec {
  std::string name;    // Hugging Face name, e.g. "model.layers.3.self_attn.q_proj.weight"
  Shape shape;         // e.g. [out_features, in_features]
  int64_t offset = 0;  // in elements, within the unit
  bool decay = true;   // AdamW weight decay applies (false for norms and biases)
  // false: frozen (fsdp/shard_plan.h: no fp32 master, no moments, no gradient). A unit's frozen
  // parameters come first: they fill [0, first trainable offset).
  bool trainable = true;
  // Random init (model/init_weights.h): zeros instead of a norm's ones or a matrix's normal
  // draws (Gemma's norms scale by 1 + weight: transformers initialises their weights to 0).
  bool zero_init = false;
  int64_t numel() const { return shape.numel(); }
};

struct UnitLayout {
  std::string name;               // "root", "layers.3" or "layers.3.experts"
  std::vector<ParamSpec> params;  // in HF module order (q/k/v packed, see above)
  int64_t numel = 0;              // padded total, a multiple of kParamAlignElems
  // A unit of one rank's experts (expert parallelism, ExpertPlacement below): its contents
  // differ between the ranks of an expert group, so FSDP shards it over the ranks that hold
  // the same experts (fsdp/shard_plan.h).
  bool experts = false;
  // Index into `params` of the parameter named `name`; -1 if absent.
  int find(const std::string& name) const;
};

// Indices into ParamLayout::units: the root unit, and the unit of transformer block `layer`.
inline constexpr int kRootUnit = 0;
constexpr int block_unit(int64_t layer) { return static_cast<int>(1 + layer); }

// Expert parallelism (fsdp.expert_parallel, docs/fsdp.md): `size` ranks share each sparse
// block's E experts, rank `rank` holding experts [rank * E / size, (rank + 1) * E / size).
struct ExpertPlacement {
  int size = 1;
  int rank = 0;
};

struct ParamLayout {
  std::vector<UnitLayout> units;  // [kRootUnit] = root, [block_unit(l)] = block l, then the
                                  // units of experts (expert parallelism)
  // Expert parallelism: ExpertPlacement::size, and per block the unit of this rank's experts
  // (-1 for a dense block, and for every block when size is 1: the experts are in the block).
  int expert_parallel = 1;
  std::vector<int> expert_unit;
  int64_t total_numel() const;      // padded, all units
  int64_t parameter_count() const;  // unpadded
};

// With LoRA (lora.enabled): every base parameter is frozen (ParamSpec::trainable = false) and
// each block unit ends with its adapters, trainable: per targeted linear lora_A (r, I) and
// lora_B (O, r) (model/lora_config.h lora_param_name). The A matrices of the targeted q, k and
// v projections lie back to back (one GEMM computes all three, as for their weights), then
// their B matrices; then o, gate, up and down, A then B each. The root unit is all frozen.
//
// With placement.size > 1 a sparse block's unit keeps its router, and its experts of
// `placement.rank` (E / size of them, under their Hugging Face names) form a unit of their own,
// "layers.L.experts", after all blocks: the same sizes on every rank, different experts.
// REQUIRES: size divides E (train/train_config.cpp refuses the key otherwise).
ParamLayout make_param_layout(const ModelConfig& config, const LoraConfig& lora = LoraConfig(),
                              ExpertPlacement placement = ExpertPlacement());

}  // namespace shardtrain
