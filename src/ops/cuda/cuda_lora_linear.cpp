// CudaOps::lora_linear_forward / lora_linear_backward: LoRA's products through cuBLASLt with the
// scale as the GEMM's alpha (CudaOps::scaled_linear_*: no scaling pass over h or d(h)). In CUDA
// graphs on one H100 these products run at 2.1-3.5 TB/s (bench/RESULTS.md, 2026-12-06): their
// cost in a step is launches, not bandwidth.
// Opt-in (SHARDTRAIN_LORA_KERNELS=1): products with a rank-wide side (<= cuda_lora::kMaxThin) on
// bf16 tensors run as the memory-bound kernels of cuda_lora_gemm.cu instead, the scale folded
// into them. They are slower than cuBLASLt at Llama-3.2-1B's shapes (one H200, seq 4096, r 16,
// op profile per step: LoRA's products 20.5 ms against 11.9 ms; each shape 1.0-2.4x slower, at
// 0.7-1.2 TB/s), hence opt-in.
//
// Which kernel, for weight (O, I) and N rows:
//   forward  O <= max: thin_out (x @ A^T);  I <= max: thin_in (h @ B^T, + bias or residual)
//   dx       I <= max: thin_out (d(out) @ B);  O <= max: thin_in (d(h) @ A, + dx)
//   dweight  O <= max: thin_grad into (O, I) (d(A) = d(h)^T @ x);
//            I <= max: thin_grad into its transpose (d(B) = d(out)^T @ hs)
#include <algorithm>
#include <initializer_list>

#include "core/error.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_lora_gemm.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/ops_switches.h"

namespace shardtrain {
namespace {

using cuda_lora::kMaxThin;

// Whether the opt-in kernels take these tensors: the switch is read on every call (cheap next to
// a GEMM), so a test can take both paths in one process.
bool all_bf16(std::initializer_list<const Tensor*> tensors) {
  if (!lora_kernels_switch()) return false;
  return std::all_of(tensors.begin(), tensors.end(), [](const Tensor* t) {
    return !t->defined() || (t->dtype() == DType::kBF16 && t->device() == Device::kCuda);
  });
}

// The weight's (O, I) and the row count N of x_NI, checked against the other tensors.
struct LoraShape {
  int64_t O = 0, I = 0, N = 0;
};
LoraShape shape_of(const Tensor& x_NI, const Tensor& weight_OI) {
  LoraShape s;
  s.O = weight_OI.shape().rank() == 0 ? 1 : weight_OI.dim(0);
  s.I = s.O > 0 ? weight_OI.numel() / s.O : 0;
  s.N = s.I > 0 ? x_NI.numel() / s.I : 0;
  SHARDTRAIN_CHECK(s.I > 0 && x_NI.numel() == s.N * s.I, "LoRA linear: x {} for weight {}",
                   x_NI.shape().to_string(), weight_OI.shape().to_string());
  return s;
}

}  // namespace

void CudaOps::lora_linear_forward(Tensor x_NI, Tensor weight_OI, float alpha, Tensor bias_O,
                                  Tensor residual_NO, Tensor out_NO) {
  const LoraShape s = shape_of(x_NI, weight_OI);
  const bool fast = s.N > 0 && s.O > 0 && out_NO.numel() == s.N * s.O &&
                    (!bias_O.defined() || bias_O.numel() == s.O) &&
                    (!residual_NO.defined() || residual_NO.numel() == s.N * s.O) &&
                    all_bf16({&x_NI, &weight_OI, &bias_O, &residual_NO, &out_NO}) &&
                    !(bias_O.defined() && residual_NO.defined());
  if (fast && s.O <= kMaxThin && !bias_O.defined() && !residual_NO.defined()) {
    float* scratch = scratch_floats(cuda_lora::thin_out_scratch_floats(s.N, s.I, s.O));
    cuda_lora::thin_out(x_NI.data(), s.I, {weight_OI.data(), s.I, 1}, s.N, s.I, s.O, alpha,
                        out_NO.data(), s.O, false, scratch, stream_);
    return;
  }
  if (fast && s.I <= kMaxThin) {
    cuda_lora::thin_in(x_NI.data(), s.I, {weight_OI.data(), s.I, 1}, s.N, s.O, s.I, alpha,
                       bias_O.defined() ? bias_O.data() : nullptr,
                       residual_NO.defined() ? residual_NO.data() : nullptr, out_NO.data(), s.O,
                       stream_);
    return;
  }
  SHARDTRAIN_CHECK(!(bias_O.defined() && residual_NO.defined()),
                   "lora_linear_forward: a bias or a residual, not both");
  SHARDTRAIN_CHECK(alpha == 1.0f || (!bias_O.defined() && !residual_NO.defined()),
                   "lora_linear_forward: alpha {} with a bias or a residual", alpha);
  scaled_linear_forward(x_NI, weight_OI, alpha, bias_O, residual_NO, out_NO);
}

void CudaOps::lora_linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, float alpha,
                                   Tensor dx_NI, Tensor dweight_OI, bool accumulate_dx,
                                   bool accumulate_dweight) {
  const LoraShape s = shape_of(x_NI, weight_OI);
  const bool fast = s.N > 0 && s.O > 0 && dout_NO.numel() == s.N * s.O &&
                    all_bf16({&dout_NO, &x_NI, &weight_OI});
  bool dx_done = !dx_NI.defined();
  if (fast && !dx_done && dx_NI.numel() == s.N * s.I && all_bf16({&dx_NI})) {
    if (s.I <= kMaxThin) {  // d(x) = alpha * dout @ W: W(i, o) = weight[o * I + i]
      float* scratch = scratch_floats(cuda_lora::thin_out_scratch_floats(s.N, s.O, s.I));
      cuda_lora::thin_out(dout_NO.data(), s.O, {weight_OI.data(), 1, s.I}, s.N, s.O, s.I, alpha,
                          dx_NI.data(), s.I, accumulate_dx, scratch, stream_);
      dx_done = true;
    } else if (s.O <= kMaxThin) {  // y(n, i) = sum_o dout(n, o) weight(o, i)
      cuda_lora::thin_in(dout_NO.data(), s.O, {weight_OI.data(), 1, s.I}, s.N, s.I, s.O, alpha,
                         nullptr, accumulate_dx ? dx_NI.data() : nullptr, dx_NI.data(), s.I,
                         stream_);
      dx_done = true;
    }
  }
  const bool grad_dtype_ok = dweight_OI.defined() && dweight_OI.device() == Device::kCuda &&
                             (dweight_OI.dtype() == DType::kF32 ||
                              dweight_OI.dtype() == DType::kBF16) &&
                             dweight_OI.numel() == s.O * s.I;
  bool dweight_done = !dweight_OI.defined();
  if (fast && !dweight_done && grad_dtype_ok) {
    if (s.O <= kMaxThin) {  // d(W)(o, i) = sum_n dout(n, o) x(n, i)
      float* scratch = scratch_floats(cuda_lora::thin_grad_scratch_floats(s.N, s.I, s.O));
      cuda_lora::thin_grad(dout_NO.data(), s.O, x_NI.data(), s.I, s.N, s.I, s.O, 1.0f,
                           dweight_OI.dtype(), dweight_OI.data(), s.I, 1, accumulate_dweight,
                           scratch, stream_);
      dweight_done = true;
    } else if (s.I <= kMaxThin) {  // its transpose: g(i, o) = sum_n x(n, i) dout(n, o)
      float* scratch = scratch_floats(cuda_lora::thin_grad_scratch_floats(s.N, s.O, s.I));
      cuda_lora::thin_grad(x_NI.data(), s.I, dout_NO.data(), s.O, s.N, s.O, s.I, 1.0f,
                           dweight_OI.dtype(), dweight_OI.data(), 1, s.I, accumulate_dweight,
                           scratch, stream_);
      dweight_done = true;
    }
  }
  if (dx_done && dweight_done) return;
  SHARDTRAIN_CHECK(alpha == 1.0f || dx_done || !accumulate_dx,
                   "lora_linear_backward: alpha {} with an accumulated dx", alpha);
  // An undefined dweight skips the weight gradient (linear_backward's frozen weight).
  scaled_linear_backward(dout_NO, x_NI, weight_OI, alpha, dx_done ? Tensor() : dx_NI,
                         dweight_done ? Tensor() : dweight_OI, Tensor(), accumulate_dx,
                         accumulate_dweight);
}

}  // namespace shardtrain
