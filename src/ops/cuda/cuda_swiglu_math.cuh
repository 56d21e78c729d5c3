// SwiGLU's arithmetic in one place for every kernel that computes it: cuda_swiglu.cu, and the
// FP8 casts that fuse it (cuda_fp8.cu), whose FP8 values must come from the same bf16 roundings
// as the unfused path. Internal to ops/cuda (.cu files only).
#pragma once

#include <cuda_runtime.h>

namespace shardtrain::cuda_detail {

// silu(g) * u.
__device__ __forceinline__ float swiglu_value(float g, float u) {
  return g / (1.0f + expf(-g)) * u;
}

// The gradients of silu(g) * u given dy: dg and du, in fp32.
__device__ __forceinline__ void swiglu_gradients(float dy, float g, float u, float& dg, float& du) {
  const float sigmoid = 1.0f / (1.0f + expf(-g));
  const float silu = g * sigmoid;
  const float dsilu = sigmoid + g * sigmoid * (1.0f - sigmoid);
  dg = dy * u * dsilu;
  du = dy * silu;
}

}  // namespace shardtrain::cuda_detail
