// FP8 all-gather kernels (cuda_fp8_gather.h): amax, quantise and dequantise over one element
// range of a flat tensor. All are memory-bound grid-stride passes: the range's body of
// 8-element vectors (16-byte loads/stores of x and out, 8-byte ones of the bytes) where the
// base pointers allow it, then the unaligned head and tail one element at a time.
//
// __nv_cvt_float_to_fp8 compiles on every architecture of the fat build (emulated below sm_89)
// and rounds as the host's f32_to_e4m3 (core/fp8_e4m3.h) does; every e4m3 value is exact in
// fp16, so __nv_cvt_fp8_to_halfraw then __half2float decodes exactly.
#include <cuda_fp8.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/fp8_e4m3.h"
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_fp8_gather.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::bf16;
using cuda_detail::from_float;
using cuda_detail::to_float;

constexpr int kThreads = 256;
constexpr int kVector = cuda_detail::kBf16PerVector;  // 8 elements a vector access

// A range [begin, end) split into the vector body [body_begin, body_end) (multiples of kVector;
// empty where the pointers allow no vectors) and the single elements around it.
struct RangeSplit {
  int64_t begin, end, body_begin, body_end;

  __host__ __device__ int64_t vectors() const { return (body_end - body_begin) / kVector; }
  __host__ __device__ int64_t singles() const { return (body_begin - begin) + (end - body_end); }
  // The element index of single element k (head first, then tail).
  __device__ int64_t single(int64_t k) const {
    const int64_t head = body_begin - begin;
    return k < head ? begin + k : body_end + (k - head);
  }
};

RangeSplit split_range(int64_t begin, int64_t end, bool vectors) {
  if (!vectors) return {begin, end, end, end};
  const int64_t up = (begin + kVector - 1) / kVector * kVector;
  const int64_t body_begin = up < end ? up : end;
  const int64_t down = end / kVector * kVector;
  return {begin, end, body_begin, down > body_begin ? down : body_begin};
}

// fp8_gather_scale (core/fp8_e4m3.h) on the device: the same IEEE division.
__device__ __forceinline__ float gather_scale(const float* amax) {
  const float a = *amax;
  return a > 0.0f && isfinite(a) ? kE4m3Max / a : 1.0f;
}

__device__ __forceinline__ uint8_t to_e4m3(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float from_e4m3(uint8_t byte) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(byte, __NV_E4M3)));
}

// kVector consecutive elements as floats, and back. REQUIRES: p 16-byte aligned.
__device__ __forceinline__ void load_vector(const float* p, float (&v)[kVector]) {
  const float4 a = reinterpret_cast<const float4*>(p)[0];
  const float4 b = reinterpret_cast<const float4*>(p)[1];
  v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
  v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
}
__device__ __forceinline__ void load_vector(const bf16* p, float (&v)[kVector]) {
  cuda_detail::load8(p, v);
}
__device__ __forceinline__ void store_vector(float* p, const float (&v)[kVector]) {
  reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}
__device__ __forceinline__ void store_vector(bf16* p, const float (&v)[kVector]) {
  cuda_detail::store8(p, v);
}

template <typename T>
__global__ void range_amax_kernel(const T* x, RangeSplit s, unsigned* amax_bits) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  float m = 0.0f;  // fmaxf drops NaN
  for (int64_t k = first; k < s.vectors(); k += stride) {
    float v[kVector];
    load_vector(x + s.body_begin + k * kVector, v);
#pragma unroll
    for (int j = 0; j < kVector; ++j) m = fmaxf(m, fabsf(v[j]));
  }
  for (int64_t k = first; k < s.singles(); k += stride)
    m = fmaxf(m, fabsf(to_float(x[s.single(k)])));
  __shared__ float shared[32];
  m = cuda_detail::block_max(m, shared);
  // |x| >= 0, so float order is the order of the bits as unsigned.
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

template <typename T>
__global__ void range_quantize_kernel(const T* x, RangeSplit s, const float* amax, uint8_t* bytes) {
  const float scale = gather_scale(amax);
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (int64_t k = first; k < s.vectors(); k += stride) {
    const int64_t i = s.body_begin + k * kVector;
    float v[kVector];
    load_vector(x + i, v);
    uint32_t word[2] = {0u, 0u};
#pragma unroll
    for (int j = 0; j < kVector; ++j)
      word[j / 4] |= uint32_t{to_e4m3(v[j] * scale)} << (8 * (j % 4));
    *reinterpret_cast<uint2*>(bytes + i) = make_uint2(word[0], word[1]);
  }
  for (int64_t k = first; k < s.singles(); k += stride) {
    const int64_t i = s.single(k);
    bytes[i] = to_e4m3(to_float(x[i]) * scale);
  }
}

template <typename T>
__global__ void range_dequantize_kernel(const uint8_t* bytes, RangeSplit s, const float* amax,
                                        T* out) {
  const float inverse = 1.0f / gather_scale(amax);
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (int64_t k = first; k < s.vectors(); k += stride) {
    const int64_t i = s.body_begin + k * kVector;
    const uint2 packed = *reinterpret_cast<const uint2*>(bytes + i);
    const uint32_t word[2] = {packed.x, packed.y};
    float v[kVector];
#pragma unroll
    for (int j = 0; j < kVector; ++j)
      v[j] = from_e4m3(static_cast<uint8_t>(word[j / 4] >> (8 * (j % 4)))) * inverse;
    store_vector(out + i, v);
  }
  for (int64_t k = first; k < s.singles(); k += stride) {
    const int64_t i = s.single(k);
    out[i] = from_float<T>(from_e4m3(bytes[i]) * inverse);
  }
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The launchers' own contract (CudaOps checks ranges with errors first): aborts naming the
// launcher and the range unless `ok`.
void require_range(bool ok, const char* launcher, int64_t begin, int64_t end) {
  if (ok) return;
  std::fprintf(stderr, "%s: %s of range [%lld, %lld) needs 0 <= begin <= end\n", __FILE__, launcher,
               static_cast<long long>(begin), static_cast<long long>(end));
  std::abort();
}

unsigned blocks_for(const RangeSplit& s) {
  return cuda_detail::grid_for(s.vectors() + s.singles(), kThreads);
}

}  // namespace

void fp8_range_amax(DType dtype, const void* x, int64_t begin, int64_t end, float* amax,
                    cudaStream_t stream) {
  require_range(0 <= begin && begin <= end, "fp8_range_amax", begin, end);
  if (begin == end) return;
  const RangeSplit s = split_range(begin, end, aligned(x, 16));
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T,
                            range_amax_kernel<T><<<blocks_for(s), kThreads, 0, stream>>>(
                                static_cast<const T*>(x), s, reinterpret_cast<unsigned*>(amax)));
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void fp8_range_quantize(DType dtype, const void* x, int64_t begin, int64_t end, const float* amax,
                        uint8_t* bytes, cudaStream_t stream) {
  require_range(0 <= begin && begin <= end, "fp8_range_quantize", begin, end);
  if (begin == end) return;
  const RangeSplit s = split_range(begin, end, aligned(x, 16) && aligned(bytes, 8));
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T,
                            range_quantize_kernel<T><<<blocks_for(s), kThreads, 0, stream>>>(
                                static_cast<const T*>(x), s, amax, bytes));
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void fp8_range_dequantize(const uint8_t* bytes, int64_t begin, int64_t end, const float* amax,
                          DType out_dtype, void* out, cudaStream_t stream) {
  require_range(0 <= begin && begin <= end, "fp8_range_dequantize", begin, end);
  if (begin == end) return;
  const RangeSplit s = split_range(begin, end, aligned(bytes, 8) && aligned(out, 16));
  SHARDTRAIN_DISPATCH_FLOAT(out_dtype, T,
                            range_dequantize_kernel<T><<<blocks_for(s), kThreads, 0, stream>>>(
                                bytes, s, amax, static_cast<T*>(out)));
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
