// Typed views of one unit's parameters (or gradients: same layout) inside its flat buffer, as
// the layers take them (model/layers/).
#pragma once

#include <vector>

#include "core/tensor.h"
#include "model/layers/linear.h"
#include "model/param_layout.h"

namespace shardtrain {

struct AttentionWeights {
  // q, k and v as one Linear ((H+2K)*D, C), bias ((H+2K)*D) or undefined: the layout packs the
  // three projections back to back, so one GEMM computes them.
  Linear qkv;
  Linear o;                   // (C, H*D)
  Tensor q_norm_D, k_norm_D;  // per-head RMSNorm weights (qwen3), or undefined
};

struct MlpWeights {
  Linear gate, up;  // (F, C)
  Linear down;      // (C, F)
};

// A sparse block's MLP: the router and every expert's projections, each projection's experts
// one (E, O, I) tensor (the layout packs them back to back: model/param_layout.cpp).
struct MoeWeights {
  Linear router;            // (E, C): mlp.gate / block_sparse_moe.gate
  Tensor gate_EFC, up_EFC;  // experts' gate_proj (w1) and up_proj (w3)
  Tensor down_ECF;          // experts' down_proj (w2)
  // Gradient views under expert parallelism only: the experts' gradients are another unit's
  // buffer, overwritten (0) or added to (1) as that unit's GradBuffer says, which may differ
  // from the block's (e.g. an expert shard group of one accumulates in place while the block's
  // buffer is fresh each micro-batch). -1: the block's flag.
  int experts_accumulate = -1;
};

struct BlockWeights {
  Tensor input_norm_C, post_attention_norm_C;
  // Gemma (BlockRecipe::sandwich_norms), else undefined: the MLP's input norm (Llama's
  // post_attention_norm_C does that job; Gemma's normalises the attention output) and the
  // norm of the MLP's output.
  Tensor pre_feedforward_norm_C, post_feedforward_norm_C;
  AttentionWeights attention;
  MlpWeights mlp;  // dense blocks
  MoeWeights moe;  // sparse blocks (BlockRecipe::moe); undefined tensors elsewhere
};

struct RootWeights {
  Tensor embed_tokens;  // (V, C)
  Tensor final_norm;    // (C)
  Tensor lm_head;       // (V, C); the same memory as embed_tokens when tied
};

// View of the parameter `name` (a layout entry) inside `flat` (1-D, the unit's buffer).
Tensor param_view(const UnitLayout& unit, Tensor flat, const std::string& name);
// Block `layer`'s views; biases and q/k norms where the layout has them.
BlockWeights block_weights(const UnitLayout& unit, Tensor flat, int64_t layer);
RootWeights root_weights(const UnitLayout& unit, Tensor flat, bool tied);
// The weights of block `layer`'s five linears that run in FP8 (DecoderModel::weights_of) as
// unit element ranges, one per GEMM operand (so each is quantised with one scale): q/k/v packed,
// o, and in a dense block gate, up and down. A sparse block's experts run bf16: not listed.
std::vector<ElementRange> fp8_linear_weight_ranges(const UnitLayout& unit, int64_t layer);

// Expert parallelism: w's experts (gate_EFC, up_EFC, down_ECF, E = this rank's experts) from a
// unit of experts (UnitLayout::experts: gate, then up, then down projections, back to back).
void local_expert_weights(const UnitLayout& unit, Tensor flat, MoeWeights& w);

}  // namespace shardtrain
