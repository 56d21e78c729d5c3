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

// Saved for backward, per block: the two projections. act(gate) * up, the down projection's
// input, is not saved: backward recomputes it from them (one elementwise pass, ~1% of a step)
// when the down projection needs its input (a trained weight or a LoRA adapter). At seq 4096
// that is an N x intermediate bf16 tensor per layer: 3 GiB of Llama-2-7B's activations.
struct MlpSaved {
  Tensor gate_NF, up_NF;

  static MlpSaved declare(ActivationPlan& plan, ActivationUse use, const LayerDims& d);
  MlpSaved sized(const LayerDims& d) const;
};

// Scratch shared by every block: act_NF holds act(gate) * up while one block's forward or
// backward uses it; the rest are backward's gradients.
struct MlpScratch {
  Tensor dgate_NF, dup_NF, dact_NF;
  Tensor act_NF;

  static MlpScratch declare(ActivationPlan& plan, const LayerDims& d);
  MlpScratch sized(const LayerDims& d) const;
};

struct Mlp {
  HiddenActivation activation = HiddenActivation::kSilu;

  void forward(Ops& ops, const MlpWeights& w, Tensor x_NC, Tensor residual_NC,
               const MlpSaved& saved, const MlpScratch& scratch, Tensor out_NC) const;
  void backward(Ops& ops, const MlpWeights& w, const MlpWeights& grad, bool accumulate,
                Tensor dout_NC, Tensor x_NC, const MlpSaved& saved, const MlpScratch& scratch,
                Tensor dx_NC) const;

 private:
  void activate(Ops& ops, const MlpSaved& saved, Tensor act_NF) const;  // act(gate) * up
};

}  // namespace shardtrain
