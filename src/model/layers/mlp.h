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

// Saved for backward, per block: the two projections and, when declared with save_product,
// act(gate) * up, the down projection's input. Without it (LoRA runs: model/decoder_model.cpp)
// backward recomputes the product from the projections when the down projection reads its
// input (a trained weight or an adapter): one elementwise pass, ~2.5% of a step, for an
// N x intermediate tensor per layer (3 GiB of Llama-2-7B's activations at seq 4096).
struct MlpSaved {
  Tensor gate_NF, up_NF;
  // Undefined: recomputed into MlpScratch::act_NF. Into an FP8 down projection its bytes may
  // hold the backend's FP8 copy of the product instead (Mlp::keeps_down_input_in_fp8).
  Tensor act_NF;

  static MlpSaved declare(ActivationPlan& plan, ActivationUse use, const LayerDims& d,
                          bool save_product);
  MlpSaved sized(const LayerDims& d) const;
};

// Scratch shared by every block: backward's gradients and, without a saved product, act_NF:
// act(gate) * up while one block's forward or backward uses it.
struct MlpScratch {
  Tensor dgate_NF, dup_NF, dact_NF;
  Tensor act_NF;

  static MlpScratch declare(ActivationPlan& plan, const LayerDims& d, bool product_saved);
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
  // Whether forward lets the backend keep the saved product as down's FP8 input
  // (Fp8Site::input_kept_in_fp8): SwiGLU into a plain FP8 down, the product saved (not
  // recomputed into the shared scratch, which backward would then overwrite with bf16). Forward
  // and backward both ask, so down's backward passes the site its forward did.
  bool keeps_down_input_in_fp8(const MlpWeights& w, const MlpSaved& saved) const;
  // Where act(gate) * up lives: saved, or the shared scratch.
  static Tensor product(const MlpSaved& saved, const MlpScratch& scratch) {
    return saved.act_NF.defined() ? saved.act_NF : scratch.act_NF;
  }
};

}  // namespace shardtrain
