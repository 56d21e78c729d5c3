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
  using cuda_detail::bf16;
  if (src_dtype == DType::kF32 && dst_dtype == DType::kBF16)
    return launch_cast<bf16, float>(dst, src, n, stream);
  if (src_dtype == DType::kF32 && dst_dtype == DType::kF16)
    return launch_cast<__half, float>(dst, src, n, stream);
  if (src_dtype == DType::kBF16 && dst_dtype == DType::kF32)
    return launch_cast<float, bf16>(dst, src, n, stream);
  if (src_dtype == DType::kF16 && dst_dtype == DType::kF32)
    return launch_cast<float, __half>(dst, src, n, stream);
  cuda_detail::unsupported_dtype(__FILE__, __LINE__, dst_dtype);
}

}  // namespace shardtrain::cuda_kernels
