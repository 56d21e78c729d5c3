// RMSNorm scaled by 1 + weight (Gemma), forward and backward, statistics in fp32.
//
// Unlike cuda_rmsnorm.cu's Llama rounding (normalised row rounded to the activation dtype, then
// times the weight), transformers' Gemma3RMSNorm multiplies the fp32 normalised row by the fp32
// 1 + weight and rounds once: this kernel does that. One block per row (grid-stride over rows);
// backward keeps each block's dweight partials in shared memory (channels floats, checked by
// require_rmsnorm_backward_fits) and sums them in a fixed order (accumulate_partials), so the
// result is deterministic.
#include <algorithm>
#include <cstdint>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::block_sum;
using cuda_detail::from_float;
using cuda_detail::to_float;

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 132 * 8;  // as cuda_rmsnorm.cu: enough rows in flight per SM

int64_t block_count(int64_t rows) { return std::min(rows, kMaxBlocks); }

template <typename Act, typename Weight, typename Out>
__global__ void rmsnorm1p_forward_kernel(const Act* x_NC, const Weight* weight_C, float eps,
                                         int64_t rows, int64_t channels, Out* out_NC,
                                         float* rstd_N) {
  __shared__ float shared[32];
  for (int64_t n = blockIdx.x; n < rows; n += gridDim.x) {
    const Act* x_row = x_NC + n * channels;
    float sum_squares = 0;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      const float x = to_float(x_row[c]);
      sum_squares += x * x;
    }
    sum_squares = block_sum(sum_squares, shared);
    const float rstd = 1.0f / sqrtf(sum_squares / static_cast<float>(channels) + eps);
    if (threadIdx.x == 0) rstd_N[n] = rstd;
    Out* out_row = out_NC + n * channels;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      out_row[c] = from_float<Out>(to_float(x_row[c]) * rstd * (1.0f + to_float(weight_C[c])));
    }
  }
}

// With y = (1 + w) x r:  dx_c = r (1 + w_c) dy_c - x_c r^3 / C * sum_k dy_k (1 + w_k) x_k;
// dw_c += dy_c x_c r.
template <typename Act, typename Weight>
__global__ void rmsnorm1p_backward_kernel(const Act* dout_NC, const Act* x_NC,
                                          const Weight* weight_C, const float* rstd_N, int64_t rows,
                                          int64_t channels, Act* dx_NC, bool accumulate_dx,
                                          float* partials_PC) {
  extern __shared__ float dweight_partial[];  // [channels]
  __shared__ float shared[32];
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) dweight_partial[c] = 0;
  for (int64_t n = blockIdx.x; n < rows; n += gridDim.x) {
    const Act* dout_row = dout_NC + n * channels;
    const Act* x_row = x_NC + n * channels;
    Act* dx_row = dx_NC + n * channels;
    const float r = rstd_N[n];
    float weighted_dot = 0;
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      weighted_dot += to_float(dout_row[c]) * (1.0f + to_float(weight_C[c])) * to_float(x_row[c]);
    }
    // block_sum's barriers also order this row's dout reads before dx writes (dx may alias dout).
    weighted_dot = block_sum(weighted_dot, shared);
    const float correction = weighted_dot * r * r * r / static_cast<float>(channels);
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      const float dy = to_float(dout_row[c]);
      const float x = to_float(x_row[c]);
      const float grad = r * (1.0f + to_float(weight_C[c])) * dy - x * correction;
      dweight_partial[c] += dy * x * r;
      dx_row[c] = from_float<Act>(accumulate_dx ? to_float(dx_row[c]) + grad : grad);
    }
  }
  // Each thread wrote only its own channels' partials: no barrier needed before the copy.
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    partials_PC[blockIdx.x * channels + c] = dweight_partial[c];
  }
}

}  // namespace

void rmsnorm1p_forward(DType x_dtype, const void* x_NC, DType weight_dtype, const void* weight_C,
                       float eps, int64_t rows, int64_t channels, DType out_dtype, void* out_NC,
                       float* rstd_N, cudaStream_t stream) {
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(block_count(rows));
  SHARDTRAIN_DISPATCH_FLOAT(x_dtype, Act, {
    SHARDTRAIN_DISPATCH_FLOAT(weight_dtype, Weight, {
      SHARDTRAIN_DISPATCH_FLOAT(out_dtype, Out, {
        rmsnorm1p_forward_kernel<Act, Weight, Out><<<blocks, kThreads, 0, stream>>>(
            static_cast<const Act*>(x_NC), static_cast<const Weight*>(weight_C), eps, rows,
            channels, static_cast<Out*>(out_NC), rstd_N);
      });
    });
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

size_t rmsnorm1p_backward_scratch_floats(int64_t rows, int64_t channels) {
  return static_cast<size_t>(block_count(rows) * channels);
}

void rmsnorm1p_backward(DType act_dtype, const void* dout_NC, const void* x_NC, DType weight_dtype,
                        const void* weight_C, const float* rstd_N, int64_t rows, int64_t channels,
                        void* dx_NC, bool accumulate_dx, DType dweight_dtype, void* dweight_C,
                        bool accumulate_dweight, float* scratch, cudaStream_t stream) {
  if (rows == 0) return;
  require_rmsnorm_backward_fits(channels, device_limits());  // Error when it cannot run here
  const int64_t blocks = block_count(rows);
  const size_t shared_bytes = static_cast<size_t>(channels) * sizeof(float);
  SHARDTRAIN_DISPATCH_FLOAT(act_dtype, Act, {
    SHARDTRAIN_DISPATCH_FLOAT(weight_dtype, Weight, {
      auto kernel = rmsnorm1p_backward_kernel<Act, Weight>;
      if (shared_bytes > 48 * 1024) {
        SHARDTRAIN_CUDA_CHECK(cudaFuncSetAttribute(
            kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared_bytes)));
      }
      kernel<<<static_cast<unsigned>(blocks), kThreads, shared_bytes, stream>>>(
          static_cast<const Act*>(dout_NC), static_cast<const Act*>(x_NC),
          static_cast<const Weight*>(weight_C), rstd_N, rows, channels, static_cast<Act*>(dx_NC),
          accumulate_dx, scratch);
    });
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
  accumulate_partials(scratch, blocks, channels, dweight_dtype, dweight_C, accumulate_dweight,
                      stream);
}

}  // namespace shardtrain::cuda_kernels
