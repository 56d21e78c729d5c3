#include "model/layers/lora.h"

#include "core/error.h"

namespace shardtrain {

LoraScratch LoraScratch::declare(ActivationPlan& plan, int64_t tokens, int64_t rank,
                                 int64_t max_slices, int64_t slice_width, int64_t max_in,
                                 bool dropout) {
  const ActivationUse use = ActivationUse::kScratch;
  const int64_t N = tokens;
  LoraScratch s;
  s.h_NS = plan.take(use, {N, max_slices * rank});
  s.dh_NS = plan.take(use, {N, max_slices * rank});
  s.hs_NR = plan.take(use, {N, rank});
  s.dhs_NR = plan.take(use, {N, rank});
  if (slice_width > 0) s.slice_NO = plan.take(use, {N, slice_width});
  if (dropout) {
    s.xd_NI = plan.take(use, {N, max_in});
    s.dxd_NI = plan.take(use, {N, max_in});
  }
  return s;
}

Tensor LoraAdapter::dropped_input(Ops& ops, Tensor x_NI) const {
  if (dropout <= 0.0f) return x_NI;
  const Tensor xd_NI = fit(scratch->xd_NI, x_NI.shape());
  ops.dropout(x_NI, xd_NI, dropout, dropout_seed, false);
  return xd_NI;
}

void LoraAdapter::forward(Ops& ops, Tensor x_NI, Tensor out_NO) const {
  const int64_t N = x_NI.dim(0), r = rank;
  const int64_t S = static_cast<int64_t>(slices.size());
  const Tensor h_NS = fit(scratch->h_NS, {N, S * r});
  ops.linear_forward(dropped_input(ops, x_NI), A_SI, Tensor(), h_NS);
  if (whole_output(out_NO)) {
    ops.copy_columns(h_NS, 0, h_NS, 0, r, scale, false);                // h *= scale, in place
    ops.linear_forward_residual(h_NS, slices[0].B_OR, out_NO, out_NO);  // out += h @ B^T
    return;
  }
  const Tensor hs_NR = fit(scratch->hs_NR, {N, r});
  for (int64_t s = 0; s < S; ++s) {
    const LoraSlice& slice = slices[s];
    const int64_t width = slice.B_OR.dim(0);
    const Tensor block_NO = fit(scratch->slice_NO, {N, width});
    ops.copy_columns(h_NS, s * r, hs_NR, 0, r, scale, false);
    ops.linear_forward(hs_NR, slice.B_OR, Tensor(), block_NO);
    ops.copy_columns(block_NO, 0, out_NO, slice.out_col, width, 1.0f, true);
  }
}

void LoraAdapter::backward(Ops& ops, const LoraAdapter& grad, bool accumulate_grad, Tensor dout_NO,
                           Tensor x_NI, Tensor dx_NI) const {
  const int64_t N = x_NI.dim(0), r = rank;
  const int64_t S = static_cast<int64_t>(slices.size());
  SHARDTRAIN_CHECK(grad.slices.size() == slices.size(), "LoRA gradient views");
  const Tensor xd_NI = dropped_input(ops, x_NI);
  const Tensor h_NS = fit(scratch->h_NS, {N, S * r});
  const Tensor dh_NS = fit(scratch->dh_NS, {N, S * r});
  const Tensor hs_NR = fit(scratch->hs_NR, {N, r});
  const Tensor dhs_NR = fit(scratch->dhs_NR, {N, r});
  ops.linear_forward(xd_NI, A_SI, Tensor(), h_NS);  // recomputed: nothing was saved
  const bool whole = whole_output(dout_NO);
  for (int64_t s = 0; s < S; ++s) {
    const LoraSlice& slice = slices[s];
    const int64_t width = slice.B_OR.dim(0);
    Tensor g_NO = dout_NO;
    if (!whole) {
      g_NO = fit(scratch->slice_NO, {N, width});
      ops.copy_columns(dout_NO, slice.out_col, g_NO, 0, width, 1.0f, false);
    }
    ops.copy_columns(h_NS, s * r, hs_NR, 0, r, scale, false);
    // dhs = g @ B (d of the scaled h); dB = g^T @ hs.
    ops.linear_backward(g_NO, hs_NR, slice.B_OR, dhs_NR, grad.slices[s].B_OR, Tensor(), false,
                        accumulate_grad);
    ops.copy_columns(dhs_NR, 0, dh_NS, s * r, r, scale, false);
  }
  if (!dx_NI.defined() || dropout <= 0.0f) {
    // dA = dh^T @ x; dx += dh @ A.
    ops.linear_backward(dh_NS, xd_NI, A_SI, dx_NI, grad.A_SI, Tensor(), true, accumulate_grad);
    return;
  }
  const Tensor dxd_NI = fit(scratch->dxd_NI, x_NI.shape());
  ops.linear_backward(dh_NS, xd_NI, A_SI, dxd_NI, grad.A_SI, Tensor(), false, accumulate_grad);
  ops.dropout(dxd_NI, dx_NI, dropout, dropout_seed, true);  // the same mask: d(x) += mask * dxd
}

}  // namespace shardtrain
