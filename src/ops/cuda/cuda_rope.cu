// Rotary embedding (HF rotate-half), one thread per (token, head, pair): in place, or from the
// rows of one buffer to another (packed q/k/v).
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::from_float;
using cuda_detail::to_float;

constexpr int kThreads = 256;

template <typename T>
__global__ void rope_kernel(const T* src, int64_t src_row, T* dst, int64_t dst_row,
                            const int32_t* positions_N, int64_t tokens, int64_t heads,
                            int64_t half, const float* cos_PR, const float* sin_PR,
                            float direction) {
  const int64_t pairs = tokens * heads * half;
  for (int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; index < pairs;
       index += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = index % half;
    const int64_t token_head = index / half;  // n * heads + h
    const int64_t n = token_head / heads, h = token_head % heads;
    const int64_t p = positions_N[n];
    const float c = cos_PR[p * half + i];
    const float s = direction * sin_PR[p * half + i];
    const T* in = src + n * src_row + h * 2 * half;
    T* out = dst + n * dst_row + h * 2 * half;
    const float first = to_float(in[i]);
    const float second = to_float(in[i + half]);
    out[i] = from_float<T>(first * c - second * s);
    out[i + half] = from_float<T>(second * c + first * s);
  }
}

}  // namespace

void rope_rows(DType dtype, const void* src, int64_t src_row, void* dst, int64_t dst_row,
               const int32_t* positions_N, int64_t tokens, int64_t heads, int64_t head_dim,
               const float* cos_PR, const float* sin_PR, float direction, cudaStream_t stream) {
  const int64_t pairs = tokens * heads * (head_dim / 2);
  if (pairs == 0) return;
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    rope_kernel<T><<<cuda_detail::grid_for(pairs, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(src), src_row, static_cast<T*>(dst), dst_row, positions_N, tokens,
        heads, head_dim / 2, cos_PR, sin_PR, direction);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void rope(DType dtype, void* x_NHD, const int32_t* positions_N, int64_t tokens, int64_t heads,
          int64_t head_dim, const float* cos_PR, const float* sin_PR, float direction,
          cudaStream_t stream) {
  rope_rows(dtype, x_NHD, heads * head_dim, x_NHD, heads * head_dim, positions_N, tokens, heads,
            head_dim, cos_PR, sin_PR, direction, stream);
}

}  // namespace shardtrain::cuda_kernels
