// LoRA kernels: a scaled copy of a column block between two row-major matrices, and dropout
// with a mask regenerated from (seed, index) (ops/lora_dropout.h). Grid-stride; memory-bound
// and small (rank-wide blocks, or one projection's slice of the packed q/k/v output).
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"
#include "ops/lora_dropout.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::from_float;
using cuda_detail::grid_for;
using cuda_detail::to_float;

constexpr int kThreads = 256;

template <typename T>
__global__ void copy_columns_kernel(const T* src, int64_t src_stride, T* dst, int64_t dst_stride,
                                    int64_t rows, int64_t width, float alpha, bool accumulate) {
  const int64_t n = rows * width;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / width, col = i % width;
    const float value = alpha * to_float(src[row * src_stride + col]);
    T* out = dst + row * dst_stride + col;
    *out = from_float<T>(accumulate ? to_float(*out) + value : value);
  }
}

template <typename T>
__global__ void dropout_kernel(const T* x, T* out, int64_t n, uint32_t threshold, float keep_scale,
                               uint64_t seed, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float value = lora_dropout_keep(seed, static_cast<uint64_t>(i), threshold)
                            ? to_float(x[i]) * keep_scale
                            : 0.0f;
    out[i] = from_float<T>(accumulate ? to_float(out[i]) + value : value);
  }
}

}  // namespace

void copy_columns(DType dtype, const void* src, int64_t src_stride, int64_t src_col, void* dst,
                  int64_t dst_stride, int64_t dst_col, int64_t rows, int64_t width, float alpha,
                  bool accumulate, cudaStream_t stream) {
  const int64_t n = rows * width;
  if (n == 0) return;
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    copy_columns_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(src) + src_col, src_stride, static_cast<T*>(dst) + dst_col,
        dst_stride, rows, width, alpha, accumulate);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void dropout(DType dtype, const void* x, void* out, int64_t n, float p, uint64_t seed,
             bool accumulate, cudaStream_t stream) {
  if (n == 0) return;
  const uint32_t threshold = lora_dropout_threshold(p);
  const float keep_scale = 1.0f / (1.0f - p);
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    dropout_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), static_cast<T*>(out), n, threshold, keep_scale, seed, accumulate);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
