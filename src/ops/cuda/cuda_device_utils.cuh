// Device-side helpers shared by the kernel files (.cu only): element conversions, warp and
// block reductions, grid sizing and the dtype dispatch that turns a runtime DType into a
// template argument. Kernels load every element as fp32, compute in fp32, and round once on
// store.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <initializer_list>

#include "core/dtype.h"
#include "ops/cuda/cuda_check.h"

namespace shardtrain::cuda_detail {

using bf16 = __nv_bfloat16;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_float<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
__device__ __forceinline__ float warp_max(float x) {
  for (int offset = 16; offset > 0; offset >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Sum over the whole block, returned to every thread. REQUIRES: blockDim.x a multiple of 32,
// at most 1024; every thread of the block calls it. `shared` holds 32 floats.
__device__ __forceinline__ float block_sum(float x, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  x = warp_sum(x);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  const int warps = blockDim.x / 32;
  x = lane < warps ? shared[lane] : 0.0f;
  return warp_sum(x);
}

__device__ __forceinline__ float block_max(float x, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  x = warp_max(x);
  __syncthreads();
  if (lane == 0) shared[warp] = x;
  __syncthreads();
  const int warps = blockDim.x / 32;
  x = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(x);
}

// *address += (value.x, value.y) as two fp32 atomic adds, one instruction on sm_90 (the float2
// atomicAdd overload exists only there), two scalar ones on sm_80-89. REQUIRES: 8-byte aligned.
__device__ __forceinline__ void atomic_add_float2(float* address, float2 value) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(address), value);
#else
  atomicAdd(address, value.x);
  atomicAdd(address + 1, value.y);
#endif
}

// 16-byte vector access to 8 bf16 values (memory-bound kernels: one load instruction instead of
// eight). REQUIRES: 16-byte aligned addresses.
constexpr int kBf16PerVector = 8;
struct alignas(16) Bf16x8 {
  bf16 values[kBf16PerVector];
};
__device__ __forceinline__ void load8(const bf16* p, float* out) {
  const Bf16x8 v = *reinterpret_cast<const Bf16x8*>(p);
  for (int j = 0; j < kBf16PerVector; ++j) out[j] = to_float(v.values[j]);
}
__device__ __forceinline__ void store8(bf16* p, const float* in) {
  Bf16x8 v;
  for (int j = 0; j < kBf16PerVector; ++j) v.values[j] = from_float<bf16>(in[j]);
  *reinterpret_cast<Bf16x8*>(p) = v;
}
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// True when n elements of `dtype` at every pointer can be processed as Bf16x8 vectors.
inline bool bf16_vectorizable(DType dtype, int64_t n, std::initializer_list<const void*> pointers) {
  if (dtype != DType::kBF16 || n % kBf16PerVector != 0) return false;
  for (const void* p : pointers) {
    if (!aligned16(p)) return false;
  }
  return true;
}

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, never more than needed.
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  constexpr int64_t kMaxBlocks = 132 * 32;  // H100/H200 SMs x resident blocks; loops cover the rest
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxBlocks ? kMaxBlocks : blocks));
}

[[noreturn]] inline void unsupported_dtype(const char* file, int line, DType dtype) {
  std::fprintf(stderr, "%s:%d: dtype %d is not supported by this CUDA kernel\n", file, line,
               static_cast<int>(dtype));
  std::abort();
}

}  // namespace shardtrain::cuda_detail

// Runs the statement with `T` bound to the C++ type of a float-like DType (f32 or bf16).
#define SHARDTRAIN_DISPATCH_FLOAT(dtype, T, ...)                                 \
  do {                                                                           \
    switch (dtype) {                                                             \
      case ::shardtrain::DType::kF32: {                                          \
        using T = float;                                                         \
        __VA_ARGS__;                                                             \
        break;                                                                   \
      }                                                                          \
      case ::shardtrain::DType::kBF16: {                                         \
        using T = ::shardtrain::cuda_detail::bf16;                               \
        __VA_ARGS__;                                                             \
        break;                                                                   \
      }                                                                          \
      default:                                                                   \
        ::shardtrain::cuda_detail::unsupported_dtype(__FILE__, __LINE__, dtype); \
    }                                                                            \
  } while (0)
