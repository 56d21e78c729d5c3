// Mlp: the gated feed-forward with the residual add in the down projection's epilogue:
//   out = residual + down(act(gate(x)) * up(x))
// act = silu (SwiGLU) or the tanh GELU (GeGLU: Gemma), as `activation` says. Without a residual
// (undefined residual_NC: Gemma normalises the MLP's output before its add) out = down(...).
// An MoE layer takes this slot in the block recipe when that family lands. Backward writes
// d(x) into dx_NC (overwritten) and the weights' gradients (overwritten or added to, as
// `accumulate` says); dout_NC is read only, and read before dx_NC is written (they may alias).
#pragma once

#include "model/layers/activation_plan.h"
#include "model/layers/layer_dims.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace shardtrain {

// Saved for backward, per block.
struct MlpSaved {
  Tensor gate_NF, up_NF;  // the two projections
  Tensor act_NF;          // act(gate) * up, the down projection's input

  static MlpSaved declare(ActivationPlan& plan, ActivationUse use, const LayerDims& d);
  MlpSaved sized(const LayerDims& d) const;
};

// Backward's scratch, shared by every block.
struct MlpScratch {
  Tensor dgate_NF, dup_NF, dact_NF;

  static MlpScratch declare(ActivationPlan& plan, const LayerDims& d);
  MlpScratch sized(const LayerDims& d) const;
};

struct Mlp {
  HiddenActivation activation = HiddenActivation::kSilu;

  void forward(Ops& ops, const MlpWeights& w, Tensor x_NC, Tensor residual_NC,
               const MlpSaved& saved, Tensor out_NC) const;
  void backward(Ops& ops, const MlpWeights& w, const MlpWeights& grad, bool accumulate,
                Tensor dout_NC, Tensor x_NC, const MlpSaved& saved, const MlpScratch& scratch,
                Tensor dx_NC) const;
};

}  // namespace shardtrain
