// Typed views of one unit's parameters (or gradients: same layout) inside its flat buffer.
#pragma once

#include "core/tensor.h"
#include "model/param_layout.h"

namespace shardtrain {

struct BlockWeights {
  Tensor q_proj, q_bias;        // (H*D, C), (H*D) or undefined
  Tensor k_proj, k_bias;        // (K*D, C), (K*D) or undefined
  Tensor v_proj, v_bias;        // (K*D, C), (K*D) or undefined
  // The three projections as one matrix ((H+2K)*D, C) and bias ((H+2K)*D, or undefined): the
  // same memory as q/k/v above (the layout packs them back to back).
  Tensor qkv_proj, qkv_bias;
  Tensor o_proj;                // (C, H*D)
  Tensor gate_proj, up_proj;    // (F, C)
  Tensor down_proj;             // (C, F)
  Tensor input_norm, post_attention_norm;  // (C)
};

struct RootWeights {
  Tensor embed_tokens;  // (V, C)
  Tensor final_norm;    // (C)
  Tensor lm_head;       // (V, C); the same memory as embed_tokens when tied
};

// View of the parameter `name` (a layout entry) inside `flat` (1-D, the unit's buffer).
Tensor param_view(const UnitLayout& unit, Tensor flat, const std::string& name);
BlockWeights block_weights(const UnitLayout& unit, Tensor flat, int64_t layer, bool has_bias);
RootWeights root_weights(const UnitLayout& unit, Tensor flat, bool tied);

}  // namespace shardtrain
