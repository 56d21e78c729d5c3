#include "model/layers/lora.h"

#include <utility>

#include "core/error.h"

namespace shardtrain {

LoraScratch LoraScratch::declare(ActivationPlan& plan, int64_t tokens, int64_t rank,
                                 int64_t max_slices, int64_t packed_width, int64_t max_in,
                                 bool dropout) {
  const ActivationUse use = ActivationUse::kScratch;
  const int64_t N = tokens;
  LoraScratch s;
  s.h_NS = plan.take(use, {N, max_slices * rank});
  s.dh_NS = plan.take(use, {N, max_slices * rank});
  if (packed_width > 0) {
    s.B_OS = plan.take(use, {packed_width, max_slices * rank});
    // fp32 like every parameter gradient (fsdp's full gradients): its blocks are copied there.
    s.dB_OS = plan.take(use, DType::kF32, {packed_width, max_slices * rank});
  }
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

Tensor LoraAdapter::block_diagonal_B(Ops& ops, int64_t out_width) const {
  const int64_t S = static_cast<int64_t>(slices.size()) * rank;
  const Tensor B_OS = fit(scratch->B_OS, {out_width, S});
  std::vector<int64_t> layout{out_width, S};
  for (const LoraSlice& slice : slices) {
    layout.push_back(slice.out_col);
    layout.push_back(slice.B_OR.dim(0));
  }
  if (layout != *scratch->B_zeroed_layout) {
    ops.fill_zero(B_OS);
    *scratch->B_zeroed_layout = std::move(layout);
  }
  for (size_t s = 0; s < slices.size(); ++s) {
    const LoraSlice& slice = slices[s];
    ops.copy_columns(slice.B_OR, 0, B_OS.rows(slice.out_col, slice.out_col + slice.B_OR.dim(0)),
                     static_cast<int64_t>(s) * rank, rank, 1.0f, false);
  }
  return B_OS;
}

Tensor LoraAdapter::saved_h(int64_t N) const {
  const int64_t S = A_SI.dim(0);
  if (!h_store.defined() || N * (h_first + S) > h_store.numel()) return Tensor();
  char* data = static_cast<char*>(h_store.data()) +
               N * h_first * static_cast<int64_t>(dtype_size(h_store.dtype()));
  return Tensor(data, h_store.dtype(), {N, S}, h_store.device());
}

void LoraAdapter::project(Ops& ops, Tensor xd_NI, Tensor h_NS) const {
  ops.lora_linear_forward(xd_NI, A_SI, scale, Tensor(), Tensor(), h_NS);
}

void LoraAdapter::forward(Ops& ops, Tensor x_NI, Tensor bias_O, Tensor residual_NO,
                          Tensor out_NO) const {
  SHARDTRAIN_CHECK(!(bias_O.defined() && residual_NO.defined()),
                   "LoRA forward: a bias or a residual, not both");
  const int64_t N = x_NI.dim(0), S = A_SI.dim(0);
  Tensor h_NS = saved_h(N);
  if (!h_NS.defined()) h_NS = fit(scratch->h_NS, {N, S});
  project(ops, dropped_input(ops, x_NI), h_NS);
  const Tensor B_OS = whole_output(out_NO) ? slices[0].B_OR : block_diagonal_B(ops, out_NO.dim(1));
  // out = hs @ B^T (+ bias or + residual)
  ops.lora_linear_forward(h_NS, B_OS, 1.0f, bias_O, residual_NO, out_NO);
}

void LoraAdapter::backward(Ops& ops, const LoraAdapter& grad, bool accumulate_grad, Tensor dout_NO,
                           Tensor x_NI, Tensor dx_NI, bool accumulate_dx) const {
  const int64_t N = x_NI.dim(0), S = A_SI.dim(0);
  SHARDTRAIN_CHECK(grad.slices.size() == slices.size(), "LoRA gradient views");
  const Tensor xd_NI = dropped_input(ops, x_NI);
  Tensor h_NS = saved_h(N);
  if (!h_NS.defined()) {  // nothing saved: recompute hs
    h_NS = fit(scratch->h_NS, {N, S});
    project(ops, xd_NI, h_NS);
  }
  const Tensor dh_NS = fit(scratch->dh_NS, {N, S});
  // dh = scale * g @ B; dB = g^T @ hs: straight into the gradient of a single B, else into the
  // block-diagonal gradient, whose diagonal blocks go to the slices' gradients.
  if (whole_output(dout_NO)) {
    ops.lora_linear_backward(dout_NO, h_NS, slices[0].B_OR, scale, dh_NS, grad.slices[0].B_OR,
                             false, accumulate_grad);
  } else {
    const Tensor dB_OS = fit(scratch->dB_OS, {dout_NO.dim(1), S});
    ops.lora_linear_backward(dout_NO, h_NS, block_diagonal_B(ops, dout_NO.dim(1)), scale, dh_NS,
                             dB_OS, false, false);
    for (size_t s = 0; s < slices.size(); ++s) {
      const int64_t first = slices[s].out_col, width = slices[s].B_OR.dim(0);
      ops.copy_columns(dB_OS.rows(first, first + width), static_cast<int64_t>(s) * rank,
                       grad.slices[s].B_OR, 0, rank, 1.0f, accumulate_grad);
    }
  }
  if (!dx_NI.defined() || dropout <= 0.0f) {
    // dA = dh^T @ x; dx = (or +=) dh @ A.
    ops.lora_linear_backward(dh_NS, xd_NI, A_SI, 1.0f, dx_NI, grad.A_SI, accumulate_dx,
                             accumulate_grad);
    return;
  }
  const Tensor dxd_NI = fit(scratch->dxd_NI, x_NI.shape());
  ops.lora_linear_backward(dh_NS, xd_NI, A_SI, 1.0f, dxd_NI, grad.A_SI, false, accumulate_grad);
  // The same mask: d(x) = (or +=) mask * dxd.
  ops.dropout(dxd_NI, dx_NI, dropout, dropout_seed, accumulate_dx);
}

}  // namespace shardtrain
