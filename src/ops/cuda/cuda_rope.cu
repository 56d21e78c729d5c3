// Rotary embedding (HF rotate-half), one thread per (token, head, pair), or per two adjacent
// pairs for bf16 (4-byte accesses): in place, or from the rows of one buffer to another (packed
// q/k/v).
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

// The bf16 kernel for even half dims: each thread rotates two adjacent pairs (i, i + 1) with
// 4-byte loads and stores. REQUIRES: 4-byte aligned rows (even strides, aligned bases).
__global__ void rope_bf16x2_kernel(const cuda_detail::bf16* src, int64_t src_row,
                                   cuda_detail::bf16* dst, int64_t dst_row,
                                   const int32_t* positions_N, int64_t tokens, int64_t heads,
                                   int64_t half, const float* cos_PR, const float* sin_PR,
                                   float direction) {
  const int64_t pair_twos = tokens * heads * (half / 2);
  for (int64_t index = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; index < pair_twos;
       index += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = 2 * (index % (half / 2));
    const int64_t token_head = index / (half / 2);  // n * heads + h
    const int64_t n = token_head / heads, h = token_head % heads;
    const int64_t p = positions_N[n];
    const float2 c = *reinterpret_cast<const float2*>(cos_PR + p * half + i);
    const float2 sin = *reinterpret_cast<const float2*>(sin_PR + p * half + i);
    const float2 s{direction * sin.x, direction * sin.y};
    const cuda_detail::bf16* in = src + n * src_row + h * 2 * half;
    cuda_detail::bf16* out = dst + n * dst_row + h * 2 * half;
    const float2 first = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(in + i));
    const float2 second =
        __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(in + i + half));
    *reinterpret_cast<__nv_bfloat162*>(out + i) =
        __floats2bfloat162_rn(first.x * c.x - second.x * s.x, first.y * c.y - second.y * s.y);
    *reinterpret_cast<__nv_bfloat162*>(out + i + half) =
        __floats2bfloat162_rn(second.x * c.x + first.x * s.x, second.y * c.y + first.y * s.y);
  }
}

}  // namespace

void rope_rows(DType dtype, const void* src, int64_t src_row, void* dst, int64_t dst_row,
               const int32_t* positions_N, int64_t tokens, int64_t heads, int64_t head_dim,
               const float* cos_PR, const float* sin_PR, float direction, cudaStream_t stream) {
  const int64_t pairs = tokens * heads * (head_dim / 2);
  if (pairs == 0) return;
  const auto aligned4 = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 4 == 0; };
  const bool pairs_of_two = (head_dim / 2) % 2 == 0 && src_row % 2 == 0 && dst_row % 2 == 0 &&
                            aligned4(src) && aligned4(dst) &&
                            reinterpret_cast<uintptr_t>(cos_PR) % 8 == 0 &&
                            reinterpret_cast<uintptr_t>(sin_PR) % 8 == 0;
  if (dtype == DType::kBF16 && pairs_of_two) {
    rope_bf16x2_kernel<<<cuda_detail::grid_for(pairs / 2, kThreads), kThreads, 0, stream>>>(
        static_cast<const cuda_detail::bf16*>(src), src_row, static_cast<cuda_detail::bf16*>(dst),
        dst_row, positions_N, tokens, heads, head_dim / 2, cos_PR, sin_PR, direction);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
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
