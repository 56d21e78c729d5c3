// Kernel launchers of the mixture-of-experts ops (cuda_moe.cu), the raw-pointer layer below
// CudaOps (cuda_moe_ops.cpp, which checks shapes and dtypes): routing in fp32 (one warp per
// token), the stable expert grouping (one block per expert: a deterministic permutation), and
// the row gathers and weighted combines. Asynchronous on `stream`; `act` is f32 or bf16.
// Internal to ops/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "core/dtype.h"

namespace shardtrain::cuda_moe {

// The most experts per token the routing kernels hold per warp.
inline constexpr int64_t kMaxTopK = 32;

// Ops::moe_route; prob_sum may be null.
void route(DType act, const void* logits, int64_t N, int64_t E, int64_t K, bool renormalize,
           int32_t* expert, float* weight, float* prob_sum, cudaStream_t stream);
// Ops::moe_route_backward; aux_grad may be null; dlogits in `act`.
void route_backward(DType act, const float* dweight, const void* logits, const int32_t* expert,
                    const float* weight, int64_t N, int64_t E, int64_t K, bool renormalize,
                    const float* aux_grad, void* dlogits, cudaStream_t stream);
// rows[e] = slots routed to expert e (int32, E entries, overwritten).
void count_rows(const int32_t* expert, int64_t slots, int64_t E, int32_t* rows,
                cudaStream_t stream);
// source[m] / row[slot] of Ops::moe_dispatch from the counts (device).
void group_rows(const int32_t* expert, int64_t slots, int64_t E, const int32_t* rows,
                int32_t* source, int32_t* row, cudaStream_t stream);
// Ops::moe_gather: x_MC[m] = x_NC[source[m] / K].
void gather(DType act, const void* x, const int32_t* source, int64_t M, int64_t K, int64_t C,
            void* out, cudaStream_t stream);
// Ops::moe_gather_backward.
void gather_backward(DType act, const void* dx_MC, const int32_t* row, int64_t N, int64_t K,
                     int64_t C, void* dx_NC, bool accumulate, cudaStream_t stream);
// Ops::moe_combine (out may alias residual).
void combine(DType act, const void* y, const int32_t* row, const float* weight,
             const void* residual, int64_t N, int64_t K, int64_t C, void* out, cudaStream_t stream);
// Ops::moe_combine_backward.
void combine_backward(DType act, const void* dout, const void* y, const int32_t* row,
                      const float* weight, int64_t N, int64_t K, int64_t C, void* dy,
                      float* dweight, cudaStream_t stream);
// ---- cuda_moe_wgrad.cu ----
// Whether expert_weight_gradients runs these operands: O and I multiples of 8, dout and x
// 16-byte aligned, dweight 8-byte aligned.
bool expert_weight_gradients_fit(int64_t O, int64_t I, const void* dout, const void* x,
                                 const float* dweight);
// Every expert's f32 weight gradient from bf16 rows in one launch (a few for more than 512
// experts): dweight[e] (O x I, row-major) = dout_e^T x_e, or += when accumulate, where dout_e and
// x_e are expert e's rows of dout (M x O) and x (M x I), the experts' rows back to back in
// rows_E's order. An expert without rows gets zero (or is left as it is when accumulating).
// REQUIRES: expert_weight_gradients_fit.
void expert_weight_gradients(const void* dout, const void* x, const std::vector<int64_t>& rows_E,
                             int64_t O, int64_t I, float* dweight, bool accumulate,
                             cudaStream_t stream);

}  // namespace shardtrain::cuda_moe
