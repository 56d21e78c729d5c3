#include "model/layers/mlp.h"

namespace shardtrain {

MlpSaved MlpSaved::declare(ActivationPlan& plan, ActivationUse use, const LayerDims& d,
                           bool save_product) {
  const int64_t N = d.tokens(), F = d.intermediate;
  MlpSaved s{plan.take(use, {N, F}), plan.take(use, {N, F})};
  if (save_product) s.act_NF = plan.take(use, {N, F});
  return s;
}

MlpSaved MlpSaved::sized(const LayerDims& d) const {
  const Shape NF{d.tokens(), d.intermediate};
  return MlpSaved{fit(gate_NF, NF), fit(up_NF, NF), act_NF.defined() ? fit(act_NF, NF) : Tensor()};
}

MlpScratch MlpScratch::declare(ActivationPlan& plan, const LayerDims& d, bool product_saved) {
  const int64_t N = d.tokens(), F = d.intermediate;
  const ActivationUse use = ActivationUse::kScratch;
  MlpScratch s{plan.take(use, {N, F}), plan.take(use, {N, F}), plan.take(use, {N, F})};
  if (!product_saved) s.act_NF = plan.take(use, {N, F});
  return s;
}

MlpScratch MlpScratch::sized(const LayerDims& d) const {
  const Shape NF{d.tokens(), d.intermediate};
  return MlpScratch{fit(dgate_NF, NF), fit(dup_NF, NF), fit(dact_NF, NF),
                    act_NF.defined() ? fit(act_NF, NF) : Tensor()};
}

void Mlp::activate(Ops& ops, const MlpSaved& saved, Tensor act_NF) const {
  if (activation == HiddenActivation::kGeluTanh) {
    ops.geglu_forward(saved.gate_NF, saved.up_NF, act_NF);
  } else {
    ops.swiglu_forward(saved.gate_NF, saved.up_NF, act_NF);
  }
}

namespace {

// A plain FP8 linear (no bias, no adapters): the fused SwiGLU ops take its place; backward's
// also needs it trained.
bool plain_fp8(const Linear& linear) {
  return linear.fp8 && !linear.bias_O.defined() && !linear.lora.defined();
}

}  // namespace

bool Mlp::keeps_down_input_in_fp8(const MlpWeights& w, const MlpSaved& saved) const {
  return activation != HiddenActivation::kGeluTanh && plain_fp8(w.down) && saved.act_NF.defined();
}

void Mlp::forward(Ops& ops, const MlpWeights& w, Tensor x_NC, Tensor residual_NC,
                  const MlpSaved& saved, const MlpScratch& scratch, Tensor out_NC) const {
  w.gate.forward(ops, x_NC, saved.gate_NF);
  w.up.forward(ops, x_NC, saved.up_NF);
  const Tensor act_NF = product(saved, scratch);
  // SwiGLU into an FP8 down projection: one op, so the backend can cast act to FP8 in the
  // SwiGLU kernel (Ops::swiglu_linear_forward_fp8). With the product saved, nothing but down's
  // backward reads it, so the backend may keep it there as its FP8 copy for down's weight
  // gradient instead (Fp8Site::input_kept_in_fp8).
  const Linear& down = w.down;
  if (activation != HiddenActivation::kGeluTanh && plain_fp8(down)) {
    Fp8Site site = down.fp8_site;
    site.input_kept_in_fp8 = keeps_down_input_in_fp8(w, saved);
    ops.swiglu_linear_forward_fp8(saved.gate_NF, saved.up_NF, act_NF, down.weight_OI, residual_NC,
                                  out_NC, site);
    return;
  }
  activate(ops, saved, act_NF);
  if (!residual_NC.defined()) {
    w.down.forward(ops, act_NF, out_NC);
    return;
  }
  w.down.forward_residual(ops, act_NF, residual_NC, out_NC);  // out = residual + down(act)
}

void Mlp::backward(Ops& ops, const MlpWeights& w, const MlpWeights& grad, bool accumulate,
                   Tensor dout_NC, Tensor x_NC, const MlpSaved& saved, const MlpScratch& scratch,
                   Tensor dx_NC) const {
  // Unsaved, the product is recomputed when down reads its input: its weight gradient and its
  // adapters' gradients do (a frozen down without adapters reads its shape, not its values).
  const Tensor act_NF = product(saved, scratch);
  if (!saved.act_NF.defined() && (!w.down.frozen || w.down.lora.defined())) {
    activate(ops, saved, act_NF);
  }
  Linear down = w.down;  // forward's site, so the backend reads what it kept
  down.fp8_site.input_kept_in_fp8 = keeps_down_input_in_fp8(w, saved);
  down.backward(ops, grad.down, accumulate, dout_NC, act_NF, scratch.dact_NF, false);
  // SwiGLU with gate and up both plain FP8 linears: one op, so the backend can write SwiGLU's
  // gradients in FP8 directly (Ops::swiglu_linears_backward_fp8).
  if (activation != HiddenActivation::kGeluTanh && plain_fp8(w.gate) && plain_fp8(w.up) &&
      !w.gate.frozen && !w.up.frozen) {
    ops.swiglu_linears_backward_fp8(scratch.dact_NF, saved.gate_NF, saved.up_NF, x_NC,
                                    w.gate.weight_OI, w.up.weight_OI, scratch.dgate_NF,
                                    scratch.dup_NF, dx_NC, grad.gate.weight_OI, grad.up.weight_OI,
                                    accumulate, w.gate.fp8_site, w.up.fp8_site);
    return;
  }
  if (activation == HiddenActivation::kGeluTanh) {
    ops.geglu_backward(scratch.dact_NF, saved.gate_NF, saved.up_NF, scratch.dgate_NF,
                       scratch.dup_NF);
  } else {
    ops.swiglu_backward(scratch.dact_NF, saved.gate_NF, saved.up_NF, scratch.dgate_NF,
                        scratch.dup_NF);
  }
  // x feeds gate and up: the second adds its part of d(x) to the first's.
  w.gate.backward(ops, grad.gate, accumulate, scratch.dgate_NF, x_NC, dx_NC, false);
  w.up.backward(ops, grad.up, accumulate, scratch.dup_NF, x_NC, dx_NC, true);
}

}  // namespace shardtrain
