// The experts' bf16 GEMMs of a grouped linear in one launch on Hopper (sm_90a, cuda_moe_gemm.cu):
// forward out_e = x_e W_e^T and input gradient dx_e = dout_e W_e for every expert e, where x_e /
// dout_e are expert e's rows (the experts' rows back to back in rows_E's order) and W_e is the
// (O x I) row-major slice e of an (E, O, I) weight. f32 accumulation, bf16 out, written or added
// (rounded once: bf16(old + product), as cuBLAS with beta 1). Replaces the cuBLAS grouped GEMM
// (cuda_grouped_gemm.h) where expert_gemm_fit says so; CudaOps::grouped_linear_* (cuda_moe_ops.cpp)
// choose. Internal to ops/cuda.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

namespace shardtrain::cuda_moe {

enum class ExpertGemm {
  kForward,        // a = x (M x I), out (M x O) = x_e W_e^T
  kInputGradient,  // a = dout (M x O), out (M x I) = dout_e W_e
};

// Whether expert_gemm runs these operands here: a build with sm_90a and a compute capability 9.0
// device, O and I multiples of 64, a, w and out 16-byte aligned, every index in int32.
bool expert_gemm_fit(int64_t M, int64_t E, int64_t O, int64_t I, const void* a, const void* w,
                     const void* out);
// The GEMMs of all experts (one launch per 256 experts); experts without rows are skipped (their
// out rows do not exist). tile_n: the output tile width, 128 or 256, or 0 for the default (128;
// the timing test compares them). False, having launched nothing, when the TMA descriptors
// cannot be made (then the caller runs cuBLAS). REQUIRES: expert_gemm_fit; a, w and out bf16.
bool expert_gemm(ExpertGemm kind, const void* a, const void* w, const std::vector<int64_t>& rows_E,
                 int64_t O, int64_t I, void* out, bool accumulate, cudaStream_t stream,
                 int tile_n = 0);

}  // namespace shardtrain::cuda_moe
