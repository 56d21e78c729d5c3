// Kernel launchers of LoRA's rank-wide products (cuda_lora_gemm.cu), the raw-pointer layer below
// CudaOps::lora_linear_forward / lora_linear_backward (cuda_lora_linear.cpp, which checks shapes
// and picks them). One dimension of each product is a rank-wide S <= kMaxThin (the adapters' h
// columns: r, or 3r for a packed q/k/v), so each is memory bound: one pass over the wide N x K
// operand, bf16 tensor-core MMAs with fp32 accumulation, the rank-wide operand from L2.
//   thin_out:  y_NS = alpha * x_NK @ w^T            (x @ A^T, d(out) @ B: a rank-wide output)
//   thin_in:   y_NO = alpha * h_NS @ w^T (+ ...)    (h @ B^T, d(h) @ A: a rank-wide inner dim)
//   thin_grad: g_SK = alpha * p_NS^T @ x_NK         (d(A), d(B): reduced over the tokens)
// Long reductions are split over blocks; the partial sums (fp32, in `scratch`) are added in a
// fixed order by a second kernel, so results are deterministic. Asynchronous on `stream`.
// Activations and weights are bf16; gradients f32 or bf16. Internal to ops/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace shardtrain::cuda_lora {

// The widest rank-wide dimension the kernels take.
inline constexpr int64_t kMaxThin = 128;

// A small bf16 matrix read with strides: element (i, j) at data[i * stride_i + j * stride_j]
// (a weight or its transpose, without a copy).
struct Strided {
  const void* data = nullptr;
  int64_t stride_i = 0, stride_j = 0;
};

// y (N x S, row stride ldy) = (or += when accumulate) alpha * x (N x K, row stride ldx) @ w^T,
// w(s, k) strided. REQUIRES: N, K >= 1, 1 <= S <= kMaxThin; scratch holds
// thin_out_scratch_floats(N, K, S) floats (may be null when that is 0).
int64_t thin_out_scratch_floats(int64_t N, int64_t K, int64_t S);
void thin_out(const void* x, int64_t ldx, Strided w, int64_t N, int64_t K, int64_t S, float alpha,
              void* y, int64_t ldy, bool accumulate, float* scratch, cudaStream_t stream);

// y (N x O, row stride ldy) = alpha * h (N x S, row stride ldh) @ w^T + bias (length O, or null)
// + c (N x O with y's layout, or null; may be y itself, or a residual y aliases), w(o, s)
// strided. REQUIRES: N, O >= 1, 1 <= S <= kMaxThin.
void thin_in(const void* h, int64_t ldh, Strided w, int64_t N, int64_t O, int64_t S, float alpha,
             const void* bias, const void* c, void* y, int64_t ldy, cudaStream_t stream);

// g(s, k) = (or += when accumulate) alpha * sum_n p[n][s] x[n][k]: p (N x S, row stride ldp), x
// (N x K, row stride ldx), g at g[s * g_stride_s + k * g_stride_k] of g_dtype (f32 or bf16).
// REQUIRES: N, K >= 1, 1 <= S <= kMaxThin; scratch holds thin_grad_scratch_floats(N, K, S).
int64_t thin_grad_scratch_floats(int64_t N, int64_t K, int64_t S);
void thin_grad(const void* p, int64_t ldp, const void* x, int64_t ldx, int64_t N, int64_t K,
               int64_t S, float alpha, DType g_dtype, void* g, int64_t g_stride_s,
               int64_t g_stride_k, bool accumulate, float* scratch, cudaStream_t stream);

}  // namespace shardtrain::cuda_lora
