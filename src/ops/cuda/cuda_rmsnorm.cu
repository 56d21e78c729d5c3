// RMSNorm forward and backward, statistics in fp32.
//
// Forward follows HF Llama in low precision: normalise in fp32, round the normalised row to the
// activation dtype, then multiply by the weight (in fp32 the two roundings vanish and this is
// exactly CpuOps). Backward: one block handles a strided set of rows; each thread owns fixed
// channels, so it accumulates its dweight partials in shared memory without atomics; the
// per-block partials are then summed in a fixed order (accumulate_partials): deterministic.
//
// Fast paths (bf16 activations, channels a multiple of 8, 16-byte aligned rows): the forward up
// to 2048 channels takes a warp per row (below); otherwise, and the backward, up to 8192
// channels a block per row, where each thread owns up to kMaxChunks chunks of 8 channels, loads
// them with 16-byte accesses, keeps the weight and its dweight partials in registers, and holds
// a whole row in registers between the row reduction and the store. The generic kernels below
// serve every other case.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::block_sum;
using cuda_detail::from_float;
using cuda_detail::to_float;

constexpr int kThreads = kRmsnormThreads;  // cuda_dispatch.h counts on it
// Backward blocks (also the partial count): 8 per SM on H100/H200, so 64 warps per SM keep
// enough rows in flight to approach memory bandwidth (2 per SM reached 1.6 TB/s at C = 1536).
// The extra partials cost one small pass (132 * 8 * C floats).
constexpr int64_t kBackwardBlocks = 132 * 8;

template <typename Act, typename Weight, typename Out>
__global__ void rmsnorm_forward_scalar_kernel(const Act* x_NC, const Weight* weight_C, float eps,
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
      const float normalized = to_float(from_float<Out>(to_float(x_row[c]) * rstd));
      out_row[c] = from_float<Out>(to_float(weight_C[c]) * normalized);
    }
  }
}

// With y = w * x * r:  dx_c = r w_c dy_c - x_c r^3 / C * sum_k dy_k w_k x_k;  dw_c += dy_c x_c r.
template <typename Act, typename Weight>
__global__ void rmsnorm_backward_scalar_kernel(const Act* dout_NC, const Act* x_NC,
                                               const Weight* weight_C, const float* rstd_N,
                                               int64_t rows, int64_t channels, Act* dx_NC,
                                               bool accumulate_dx, float* partials_PC) {
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
      weighted_dot += to_float(dout_row[c]) * to_float(weight_C[c]) * to_float(x_row[c]);
    }
    // block_sum's barriers also order this row's dout reads before dx writes (dx may alias dout).
    weighted_dot = block_sum(weighted_dot, shared);
    const float correction = weighted_dot * r * r * r / static_cast<float>(channels);
    for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
      const float dy = to_float(dout_row[c]);
      const float x = to_float(x_row[c]);
      const float grad = r * to_float(weight_C[c]) * dy - x * correction;
      dweight_partial[c] += dy * x * r;
      dx_row[c] = from_float<Act>(accumulate_dx ? to_float(dx_row[c]) + grad : grad);
    }
  }
  for (int64_t c = threadIdx.x; c < channels; c += blockDim.x) {
    partials_PC[blockIdx.x * channels + c] = dweight_partial[c];
  }
}

int64_t backward_blocks(int64_t rows) { return std::min(rows, kBackwardBlocks); }

constexpr int kVector = cuda_detail::kBf16PerVector;
constexpr int kMaxChunks = 4;
static_assert(int64_t{kThreads} * kVector * kMaxChunks == kRmsnormVectorMaxChannels,
              "cuda_dispatch.h picks this kernel up to its width");

using cuda_detail::bf16;
using cuda_detail::load8;
using cuda_detail::store8;

template <typename Weight>
__device__ __forceinline__ void load_weight8(const Weight* w, int64_t c, float* out) {
  for (int j = 0; j < kVector; ++j) out[j] = to_float(w[c + j]);
}

template <typename Weight, typename Out, int kChunks>
__global__ void rmsnorm_forward_vec_kernel(const bf16* x_NC, const Weight* weight_C, float eps,
                                           int64_t rows, int channels, Out* out_NC, float* rstd_N) {
  __shared__ float shared[32];
  const int chunks = channels / kVector;
  float w[kChunks][kVector];
  for (int k = 0; k < kChunks; ++k) {
    const int chunk = threadIdx.x + k * blockDim.x;
    if (chunk < chunks) load_weight8(weight_C, int64_t{chunk} * kVector, w[k]);
  }
  for (int64_t n = blockIdx.x; n < rows; n += gridDim.x) {
    const bf16* x_row = x_NC + n * channels;
    float x[kChunks][kVector];
    float sum_squares = 0;
    for (int k = 0; k < kChunks; ++k) {
      const int chunk = threadIdx.x + k * blockDim.x;
      if (chunk >= chunks) continue;
      load8(x_row + chunk * kVector, x[k]);
      for (int j = 0; j < kVector; ++j) sum_squares += x[k][j] * x[k][j];
    }
    sum_squares = block_sum(sum_squares, shared);
    const float rstd = 1.0f / sqrtf(sum_squares / static_cast<float>(channels) + eps);
    if (threadIdx.x == 0) rstd_N[n] = rstd;
    Out* out_row = out_NC + n * channels;
    for (int k = 0; k < kChunks; ++k) {
      const int chunk = threadIdx.x + k * blockDim.x;
      if (chunk >= chunks) continue;
      float y[kVector];
      for (int j = 0; j < kVector; ++j) {
        y[j] = w[k][j] * to_float(from_float<Out>(x[k][j] * rstd));
      }
      if constexpr (sizeof(Out) == 2) {
        store8(reinterpret_cast<bf16*>(out_row + chunk * kVector), y);
      } else {
        for (int j = 0; j < kVector; ++j) out_row[chunk * kVector + j] = y[j];
      }
    }
  }
}

template <typename Weight, int kChunks>
__global__ void rmsnorm_backward_vec_kernel(const bf16* dout_NC, const bf16* x_NC,
                                            const Weight* weight_C, const float* rstd_N,
                                            int64_t rows, int channels, bf16* dx_NC,
                                            bool accumulate_dx, float* partials_PC) {
  __shared__ float shared[32];
  const int chunks = channels / kVector;
  float w[kChunks][kVector], dweight[kChunks][kVector];
  for (int k = 0; k < kChunks; ++k) {
    const int chunk = threadIdx.x + k * blockDim.x;
    for (int j = 0; j < kVector; ++j) dweight[k][j] = 0;
    if (chunk < chunks) load_weight8(weight_C, int64_t{chunk} * kVector, w[k]);
  }
  for (int64_t n = blockIdx.x; n < rows; n += gridDim.x) {
    const int64_t row = n * channels;
    const float r = rstd_N[n];
    float dy[kChunks][kVector], x[kChunks][kVector];
    float weighted_dot = 0;
    for (int k = 0; k < kChunks; ++k) {
      const int chunk = threadIdx.x + k * blockDim.x;
      if (chunk >= chunks) continue;
      load8(dout_NC + row + chunk * kVector, dy[k]);
      load8(x_NC + row + chunk * kVector, x[k]);
      for (int j = 0; j < kVector; ++j) weighted_dot += dy[k][j] * w[k][j] * x[k][j];
    }
    // Every thread has read its part of the row before anyone writes dx (dx may alias dout).
    weighted_dot = block_sum(weighted_dot, shared);
    const float correction = weighted_dot * r * r * r / static_cast<float>(channels);
    for (int k = 0; k < kChunks; ++k) {
      const int chunk = threadIdx.x + k * blockDim.x;
      if (chunk >= chunks) continue;
      float grad[kVector], old[kVector];
      if (accumulate_dx) load8(dx_NC + row + chunk * kVector, old);
      for (int j = 0; j < kVector; ++j) {
        grad[j] = r * w[k][j] * dy[k][j] - x[k][j] * correction;
        if (accumulate_dx) grad[j] += old[j];
        dweight[k][j] += dy[k][j] * x[k][j] * r;
      }
      store8(dx_NC + row + chunk * kVector, grad);
    }
  }
  for (int k = 0; k < kChunks; ++k) {
    const int chunk = threadIdx.x + k * blockDim.x;
    if (chunk >= chunks) continue;
    for (int j = 0; j < kVector; ++j) {
      partials_PC[blockIdx.x * int64_t{channels} + chunk * kVector + j] = dweight[k][j];
    }
  }
}

// ---- forward, a warp per row (bf16, channels a multiple of 8, at most 2048) ----
// A row per warp instead of per block: no block barriers, and every warp of the SM has its
// row's loads in flight. Lane l owns chunks l, l + 32, ... of 8 channels. Measured on the H200
// at 8192 x 1536: 0.027 ms (block per row) -> 0.018 ms. The backward stays a block per row:
// the same scheme there (dweight sums in registers, per-block partials) measured 0.057 ms
// against the block kernel's 0.046 (0.077 / 0.055 at 2048 channels).
constexpr int kMaxWarpChunks = 8;  // per lane: 32 * 8 * 8 = 2048 channels
static_assert(int64_t{32} * kVector * kMaxWarpChunks == kRmsnormWarpMaxChannels,
              "cuda_dispatch.h picks this kernel up to its width");
constexpr int kWarpsPerBlock = kThreads / 32;

template <typename Weight>
__device__ __forceinline__ void weight8(const Weight* w, int64_t c, float* out) {
  if constexpr (std::is_same_v<Weight, bf16>) {
    load8(w + c, out);
  } else {
    load_weight8(w, c, out);
  }
}

__device__ __forceinline__ void unpack8(const uint4& raw, float* out) {
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
  for (int j = 0; j < kVector / 2; ++j) {
    const float2 f = __bfloat1622float2(pairs[j]);
    out[2 * j] = f.x;
    out[2 * j + 1] = f.y;
  }
}

template <typename Weight, typename Out, int kChunks>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_forward_warp_kernel(const bf16* x_NC, const Weight* weight_C, float eps, int64_t rows,
                                int channels, Out* out_NC, float* rstd_N) {
  const int lane = threadIdx.x % 32, chunks = channels / kVector;
  const int64_t first = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x / 32;
  for (int64_t n = first; n < rows; n += stride) {
    const bf16* x_row = x_NC + n * channels;
    uint4 raw[kChunks];
    float sum_squares = 0;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int chunk = lane + 32 * k;
      if (chunk < chunks) raw[k] = *reinterpret_cast<const uint4*>(x_row + chunk * kVector);
    }
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      if (lane + 32 * k >= chunks) continue;
      float x[kVector];
      unpack8(raw[k], x);
      for (int j = 0; j < kVector; ++j) sum_squares += x[j] * x[j];
    }
    sum_squares = cuda_detail::warp_sum(sum_squares);
    const float rstd = 1.0f / sqrtf(sum_squares / static_cast<float>(channels) + eps);
    if (lane == 0) rstd_N[n] = rstd;
    Out* out_row = out_NC + n * channels;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int chunk = lane + 32 * k;
      if (chunk >= chunks) continue;
      float x[kVector], w[kVector], y[kVector];
      unpack8(raw[k], x);
      weight8(weight_C, int64_t{chunk} * kVector, w);
      for (int j = 0; j < kVector; ++j) y[j] = w[j] * to_float(from_float<Out>(x[j] * rstd));
      if constexpr (sizeof(Out) == 2) {
        store8(reinterpret_cast<bf16*>(out_row + chunk * kVector), y);
      } else {
        for (int j = 0; j < kVector; ++j) out_row[chunk * kVector + j] = y[j];
      }
    }
  }
}

// Runs `launch` with kChunks = 2, 4, 6 or 8, the fewest of those chunks per lane that cover
// `channels`.
template <typename Launch>
void with_warp_chunks(int64_t channels, Launch&& launch) {
  const int64_t per_lane = (channels / kVector + 31) / 32;
  if (per_lane <= 2) {
    launch(std::integral_constant<int, 2>{});
  } else if (per_lane <= 4) {
    launch(std::integral_constant<int, 4>{});
  } else if (per_lane <= 6) {
    launch(std::integral_constant<int, 6>{});
  } else {
    launch(std::integral_constant<int, 8>{});
  }
}

// Runs `launch` with kChunks = the fewest chunks per thread (1, 2 or 4) that cover `channels`.
template <typename Launch>
void with_chunks(int64_t channels, Launch&& launch) {
  const int64_t chunks_per_thread = (channels / kVector + kThreads - 1) / kThreads;
  if (chunks_per_thread <= 1) {
    launch(std::integral_constant<int, 1>{});
  } else if (chunks_per_thread <= 2) {
    launch(std::integral_constant<int, 2>{});
  } else {
    launch(std::integral_constant<int, 4>{});
  }
}

}  // namespace

void rmsnorm_forward(DType x_dtype, const void* x_NC, DType weight_dtype, const void* weight_C,
                     float eps, int64_t rows, int64_t channels, DType out_dtype, void* out_NC,
                     float* rstd_N, cudaStream_t stream) {
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, 65535));
  const RmsnormKernel variant = choose_rmsnorm_forward(
      x_dtype, channels, cuda_detail::aligned16(x_NC) && cuda_detail::aligned16(out_NC),
      weight_dtype != DType::kBF16 || cuda_detail::aligned16(weight_C));
  const bool warp = variant == RmsnormKernel::kWarpPerRow;
  if (variant != RmsnormKernel::kBlockPerRowScalar) {
    // A warp per row (rows / 8 blocks of 8 warps) or a block per row; same arguments.
    const unsigned grid = warp ? static_cast<unsigned>(std::min<int64_t>(
                                     (rows + kWarpsPerBlock - 1) / kWarpsPerBlock, 65535))
                               : blocks;
    SHARDTRAIN_DISPATCH_FLOAT(weight_dtype, Weight, {
      SHARDTRAIN_DISPATCH_FLOAT(out_dtype, Out, {
        const auto launch = [&](auto kernel) {
          kernel<<<grid, kThreads, 0, stream>>>(
              static_cast<const bf16*>(x_NC), static_cast<const Weight*>(weight_C), eps, rows,
              static_cast<int>(channels), static_cast<Out*>(out_NC), rstd_N);
        };
        if (warp) {
          with_warp_chunks(channels, [&](auto chunks) {
            launch(rmsnorm_forward_warp_kernel<Weight, Out, decltype(chunks)::value>);
          });
        } else {
          with_chunks(channels, [&](auto chunks) {
            launch(rmsnorm_forward_vec_kernel<Weight, Out, decltype(chunks)::value>);
          });
        }
      });
    });
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  SHARDTRAIN_DISPATCH_FLOAT(x_dtype, Act, {
    SHARDTRAIN_DISPATCH_FLOAT(weight_dtype, Weight, {
      SHARDTRAIN_DISPATCH_FLOAT(out_dtype, Out, {
        rmsnorm_forward_scalar_kernel<Act, Weight, Out><<<blocks, kThreads, 0, stream>>>(
            static_cast<const Act*>(x_NC), static_cast<const Weight*>(weight_C), eps, rows,
            channels, static_cast<Out*>(out_NC), rstd_N);
      });
    });
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

size_t rmsnorm_backward_scratch_floats(int64_t rows, int64_t channels) {
  return static_cast<size_t>(backward_blocks(rows) * channels);
}

void rmsnorm_backward(DType act_dtype, const void* dout_NC, const void* x_NC, DType weight_dtype,
                      const void* weight_C, const float* rstd_N, int64_t rows, int64_t channels,
                      void* dx_NC, bool accumulate_dx, DType dweight_dtype, void* dweight_C,
                      bool accumulate_dweight, float* scratch, cudaStream_t stream) {
  if (rows == 0) return;
  const int64_t blocks = backward_blocks(rows);
  using cuda_detail::aligned16;
  if (choose_rmsnorm_backward(act_dtype, channels,
                              aligned16(dout_NC) && aligned16(x_NC) && aligned16(dx_NC)) ==
      RmsnormKernel::kBlockPerRowVector) {
    SHARDTRAIN_DISPATCH_FLOAT(weight_dtype, Weight, {
      with_chunks(channels, [&](auto chunks) {
        rmsnorm_backward_vec_kernel<Weight, decltype(chunks)::value>
            <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
                static_cast<const bf16*>(dout_NC), static_cast<const bf16*>(x_NC),
                static_cast<const Weight*>(weight_C), rstd_N, rows, static_cast<int>(channels),
                static_cast<bf16*>(dx_NC), accumulate_dx, scratch);
      });
    });
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    accumulate_partials(scratch, blocks, channels, dweight_dtype, dweight_C, accumulate_dweight,
                        stream);
    return;
  }
  const size_t shared_bytes = static_cast<size_t>(channels) * sizeof(float);
  require_rmsnorm_backward_fits(channels, device_limits());  // Error when it cannot run here
  SHARDTRAIN_DISPATCH_FLOAT(act_dtype, Act, {
    SHARDTRAIN_DISPATCH_FLOAT(weight_dtype, Weight, {
      auto kernel = rmsnorm_backward_scalar_kernel<Act, Weight>;
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
