// Elementwise kernels: add, scale, dtype casts. Grid-stride loops; memory-bound.
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::from_float;
using cuda_detail::grid_for;
using cuda_detail::to_float;

constexpr int kThreads = 256;

template <typename T>
__global__ void add_kernel(T* out, const T* a, const T* b, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
  }
}

using cuda_detail::bf16;
using cuda_detail::kBf16PerVector;

__global__ void add_vec_kernel(bf16* out, const bf16* a, const bf16* b, int64_t vectors) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vectors;
       i += int64_t{gridDim.x} * blockDim.x) {
    float x[kBf16PerVector], y[kBf16PerVector];
    cuda_detail::load8(a + i * kBf16PerVector, x);
    cuda_detail::load8(b + i * kBf16PerVector, y);
    for (int j = 0; j < kBf16PerVector; ++j) x[j] += y[j];
    cuda_detail::store8(out + i * kBf16PerVector, x);
  }
}

// f32 -> bf16 in vectors of 8 (two float4 loads, one 16-byte store).
__global__ void cast_f32_bf16_vec_kernel(bf16* dst, const float* src, int64_t vectors) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vectors;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float4 lo = reinterpret_cast<const float4*>(src)[2 * i];
    const float4 hi = reinterpret_cast<const float4*>(src)[2 * i + 1];
    const float values[kBf16PerVector] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    cuda_detail::store8(dst + i * kBf16PerVector, values);
  }
}

template <typename T>
__global__ void scale_kernel(T* x, float factor, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = from_float<T>(to_float(x[i]) * factor);
  }
}

template <typename Dst, typename Src>
__global__ void cast_kernel(Dst* dst, const Src* src, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = from_float<Dst>(to_float(src[i]));
  }
}

template <typename Dst, typename Src>
void launch_cast(void* dst, const void* src, int64_t n, cudaStream_t stream) {
  cast_kernel<Dst, Src><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
      static_cast<Dst*>(dst), static_cast<const Src*>(src), n);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void add(DType dtype, void* out, const void* a, const void* b, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (cuda_detail::bf16_vectorizable(dtype, n, {out, a, b})) {
    const int64_t vectors = n / kBf16PerVector;
    add_vec_kernel<<<grid_for(vectors, kThreads), kThreads, 0, stream>>>(
        static_cast<bf16*>(out), static_cast<const bf16*>(a), static_cast<const bf16*>(b), vectors);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    add_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void scale(DType dtype, void* x, float factor, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    scale_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(static_cast<T*>(x), factor, n);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void cast(DType dst_dtype, void* dst, DType src_dtype, const void* src, int64_t n,
          cudaStream_t stream) {
  if (n == 0) return;
  if (dst_dtype == src_dtype) {
    SHARDTRAIN_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dst_dtype),
                                          cudaMemcpyDeviceToDevice, stream));
    return;
  }
  if (src_dtype == DType::kF32 && dst_dtype == DType::kBF16) {
    if (cuda_detail::bf16_vectorizable(dst_dtype, n, {dst, src})) {
      const int64_t vectors = n / kBf16PerVector;
      cast_f32_bf16_vec_kernel<<<grid_for(vectors, kThreads), kThreads, 0, stream>>>(
          static_cast<bf16*>(dst), static_cast<const float*>(src), vectors);
      SHARDTRAIN_CUDA_CHECK_LAUNCH();
      return;
    }
    return launch_cast<bf16, float>(dst, src, n, stream);
  }
  if (src_dtype == DType::kF32 && dst_dtype == DType::kF16)
    return launch_cast<__half, float>(dst, src, n, stream);
  if (src_dtype == DType::kBF16 && dst_dtype == DType::kF32)
    return launch_cast<float, bf16>(dst, src, n, stream);
  if (src_dtype == DType::kF16 && dst_dtype == DType::kF32)
    return launch_cast<float, __half>(dst, src, n, stream);
  cuda_detail::unsupported_dtype(__FILE__, __LINE__, dst_dtype);
}

}  // namespace shardtrain::cuda_kernels
