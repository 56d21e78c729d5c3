// LoRA's views of a block unit (model/param_layout.h make_param_layout with LoRA): the adapters
// attached to the block's Linears, and the gradient views of a unit whose base is frozen.
//
// The gradient buffer of such a unit (model/unit_access.h GradBuffer) starts at the first
// adapter (GradBuffer::offset): the base has no gradient, so its Linears get no weight-gradient
// view (the backends then run no weight-gradient GEMM), and its norms write their (unused)
// weight gradient into a sink the model owns.
#pragma once

#include <cstdint>

#include "model/layers/lora.h"
#include "model/lora_config.h"
#include "model/param_layout.h"
#include "model/unit_access.h"
#include "model/weights.h"

namespace shardtrain {

struct LoraRun {
  const LoraConfig* config = nullptr;
  const LoraScratch* scratch = nullptr;
  bool training = false;      // dropout applies in training only
  uint64_t dropout_seed = 0;  // this micro-batch's (every Linear mixes in its own index)
  Tensor grad_sink;           // fp32, at least max(hidden, head_dim): frozen norms' gradients
  // Flat; where this block's adapters save hs for backward (LoraAdapter::h_store), at least
  // tokens x lora_saved_columns; undefined: nothing saved, backward recomputes it.
  Tensor h_store;
};

// The columns of hs that one block's adapters save: every targeted projection's rank.
int64_t lora_saved_columns(const LoraConfig& lora);

// Marks every Linear of `w` frozen and attaches the adapters, viewed in `flat` (the gathered
// unit), of the modules the config targets, saving hs in run.h_store (one Linear after another).
void attach_lora(BlockWeights& w, const UnitLayout& unit, Tensor flat, int64_t layer,
                 const LoraRun& run);

// Gradient views of block `layer`: adapters at their place in grads.flat (which starts at unit
// element grads.offset), base Linears without views, norms on the sink.
BlockWeights lora_block_grads(const UnitLayout& unit, const GradBuffer& grads, int64_t layer,
                              const LoraRun& run);

// The scratch LoRA's Linears share, for micro-batches of `tokens` rows.
LoraScratch declare_lora_scratch(ActivationPlan& plan, const ModelConfig& config,
                                 const LoraConfig& lora, int64_t tokens);

}  // namespace shardtrain
