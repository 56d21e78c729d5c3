// Cross-entropy over one chunk of logits, one block per row. A single read pass keeps each
// thread's running (max, sum of exp) pair (online softmax), the pairs merge across the block,
// the row's loss is added atomically into the fp32 accumulator, and a second pass writes
// dlogits = (softmax - onehot) * grad_scale over the logits.
// bf16 rows that are 16-byte aligned with a vocab divisible by 8 (every real vocab) take the
// vector kernel: 8 logits per load and store, one max and one exp2 per logit in the log2
// domain. It is memory-bound: two reads and one write of the chunk.
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::bf16;
using cuda_detail::from_float;
using cuda_detail::kBf16PerVector;
using cuda_detail::load8;
using cuda_detail::store8;
using cuda_detail::to_float;

constexpr int kThreads = 512;
constexpr int32_t kIgnoreIndex = -100;

struct MaxSum {
  float max, sum;  // sum of exp(x - max)
};

__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float max = fmaxf(a.max, b.max);
  if (max == -INFINITY) return {max, 0.0f};
  return {max, a.sum * expf(a.max - max) + b.sum * expf(b.max - max)};
}

__device__ MaxSum block_merge(MaxSum value, MaxSum* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const MaxSum other{__shfl_xor_sync(0xffffffffu, value.max, offset),
                       __shfl_xor_sync(0xffffffffu, value.sum, offset)};
    value = merge(value, other);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = value;
  __syncthreads();
  MaxSum total{-INFINITY, 0.0f};
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) total = merge(total, shared[w]);
  return total;
}

template <typename T>
__global__ void cross_entropy_kernel(T* logits_NV, const int32_t* targets_N, int64_t rows,
                                     int64_t vocab, float grad_scale, float* loss_sum_1,
                                     bool compute_grad) {
  __shared__ MaxSum shared[32];
  for (int64_t n = blockIdx.x; n < rows; n += gridDim.x) {
    T* row = logits_NV + n * vocab;
    const int32_t target = targets_N[n];
    if (target == kIgnoreIndex) {
      if (compute_grad) {
        for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) row[j] = from_float<T>(0.0f);
      }
      continue;
    }
    const float target_logit = to_float(row[target]);
    MaxSum local{-INFINITY, 0.0f};
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float x = to_float(row[j]);
      if (x > local.max) {
        local.sum = local.sum * expf(local.max - x) + 1.0f;
        local.max = x;
      } else {
        local.sum += expf(x - local.max);
      }
    }
    const MaxSum total = block_merge(local, shared);  // its barrier orders reads before writes
    const float log_sum_exp = total.max + logf(total.sum);
    if (threadIdx.x == 0 && loss_sum_1 != nullptr)
      atomicAdd(loss_sum_1, log_sum_exp - target_logit);
    if (compute_grad) {
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
        const float prob = expf(to_float(row[j]) - log_sum_exp);
        const float onehot = j == target ? 1.0f : 0.0f;
        row[j] = from_float<T>((prob - onehot) * grad_scale);
      }
    }
    __syncthreads();  // `shared` is reused by the next row
  }
}

// The same contract as cross_entropy_kernel for bf16 rows of 8-logit vectors.
__global__ void cross_entropy_bf16x8_kernel(bf16* logits_NV, const int32_t* targets_N,
                                            int64_t rows, int64_t vocab, float grad_scale,
                                            float* loss_sum_1, bool compute_grad) {
  __shared__ MaxSum shared[32];
  constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
  const int64_t vectors = vocab / kBf16PerVector;
  for (int64_t n = blockIdx.x; n < rows; n += gridDim.x) {
    bf16* row = logits_NV + n * vocab;
    const int32_t target = targets_N[n];
    if (target == kIgnoreIndex) {
      if (compute_grad) {
        const float zeros[kBf16PerVector] = {};
        for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x) {
          store8(row + j * kBf16PerVector, zeros);
        }
      }
      continue;
    }
    const float target_logit = to_float(row[target]);
    // Running (max, sum of 2^(x - max)) of x = logit * log2(e).
    MaxSum local{-INFINITY, 0.0f};
    for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x) {
      float x[kBf16PerVector];
      load8(row + j * kBf16PerVector, x);
      float vector_max = x[0] * kLog2e;
#pragma unroll
      for (int e = 0; e < kBf16PerVector; ++e) {
        x[e] *= kLog2e;
        vector_max = fmaxf(vector_max, x[e]);
      }
      const float max = fmaxf(local.max, vector_max);
      float sum = local.sum * exp2f(local.max - max);
#pragma unroll
      for (int e = 0; e < kBf16PerVector; ++e) sum += exp2f(x[e] - max);
      local = {max, sum};
    }
    // block_merge works in natural-log units: convert the running max back.
    local.max = local.max == -INFINITY ? local.max : local.max * kLn2;
    const MaxSum total = block_merge(local, shared);  // its barrier orders reads before writes
    const float log_sum_exp = total.max + logf(total.sum);
    if (threadIdx.x == 0 && loss_sum_1 != nullptr)
      atomicAdd(loss_sum_1, log_sum_exp - target_logit);
    if (compute_grad) {
      const float log2_sum_exp = log_sum_exp * kLog2e;
      for (int64_t j = threadIdx.x; j < vectors; j += blockDim.x) {
        float x[kBf16PerVector];
        load8(row + j * kBf16PerVector, x);
#pragma unroll
        for (int e = 0; e < kBf16PerVector; ++e) {
          const float prob = exp2f(x[e] * kLog2e - log2_sum_exp);
          const float onehot = j * kBf16PerVector + e == target ? 1.0f : 0.0f;
          x[e] = (prob - onehot) * grad_scale;
        }
        store8(row + j * kBf16PerVector, x);
      }
    }
    __syncthreads();  // `shared` is reused by the next row
  }
}

}  // namespace

void cross_entropy(DType dtype, void* logits_NV, const int32_t* targets_N, int64_t rows,
                   int64_t vocab, float grad_scale, float* loss_sum_1, bool compute_grad,
                   cudaStream_t stream) {
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
  if (cuda_detail::bf16_vectorizable(dtype, vocab, {logits_NV})) {
    cross_entropy_bf16x8_kernel<<<blocks, kThreads, 0, stream>>>(
        static_cast<bf16*>(logits_NV), targets_N, rows, vocab, grad_scale, loss_sum_1,
        compute_grad);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    cross_entropy_kernel<T><<<blocks, kThreads, 0, stream>>>(
        static_cast<T*>(logits_NV), targets_N, rows, vocab, grad_scale, loss_sum_1, compute_grad);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
