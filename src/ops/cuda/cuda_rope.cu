// Rotary embedding (HF rotate-half), in place; one thread per (token, head, pair).
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::from_float;
using cuda_detail::to_float;

constexpr int kThreads = 256;

template <typename T>
__global__ void rope_kernel(T* x_NHD, const int32_t* positions_N, int64_t tokens, int64_t heads,
                            int64_t half, const float* cos_PR, const float* sin_PR,
                            float direction) {
  const int64_t pairs = tokens * heads * half;
  for (int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; index < pairs;
       index += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = index % half;
    const int64_t token_head = index / half;  // n * heads + h
    const int64_t n = token_head / heads;
    const int64_t p = positions_N[n];
    const float c = cos_PR[p * half + i];
    const float s = direction * sin_PR[p * half + i];
    T* head = x_NHD + token_head * 2 * half;
    const float first = to_float(head[i]);
    const float second = to_float(head[i + half]);
    head[i] = from_float<T>(first * c - second * s);
    head[i + half] = from_float<T>(second * c + first * s);
  }
}

}  // namespace

void rope(DType dtype, void* x_NHD, const int32_t* positions_N, int64_t tokens, int64_t heads,
          int64_t head_dim, const float* cos_PR, const float* sin_PR, float direction,
          cudaStream_t stream) {
  const int64_t pairs = tokens * heads * (head_dim / 2);
  if (pairs == 0) return;
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    rope_kernel<T><<<cuda_detail::grid_for(pairs, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(x_NHD), positions_N, tokens, heads, head_dim / 2, cos_PR, sin_PR,
        direction);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
