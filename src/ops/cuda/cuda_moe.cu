// Mixture-of-experts kernels (launchers: cuda_moe_kernels.h): fp32 routing, one warp per token
// (softmax, top-k by repeated warp arg-max with the lower expert first on ties, renormalised
// weights; backward through both), the expert grouping (one block per expert scans every slot in
// order, so the permutation is stable and deterministic), and the row gathers and weighted
// combines (fp32 sums, one rounding to the activation dtype).
// The gathers and combines are memory bound: bf16 rows whose width is a multiple of 8 take the
// vector kernels (one warp per row, 16-byte loads and stores, no per-element index division);
// other dtypes and widths the scalar ones, which sum in the same order (identical results).
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_moe_kernels.h"

namespace shardtrain::cuda_moe {
namespace {

using cuda_detail::bf16;
using cuda_detail::from_float;
using cuda_detail::grid_for;
using cuda_detail::kBf16PerVector;
using cuda_detail::load8;
using cuda_detail::store8;
using cuda_detail::to_float;
using cuda_detail::warp_max;
using cuda_detail::warp_sum;

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;

unsigned warp_blocks(int64_t warps) {
  return static_cast<unsigned>((warps + kWarpsPerBlock - 1) / kWarpsPerBlock);
}

// The row's softmax statistics: max and sum of exp(l - max), over all E (every lane has them).
template <typename T>
__device__ void softmax_stats(const T* logits, int64_t E, float& max, float& sum) {
  const int lane = threadIdx.x % 32;
  max = -INFINITY;
  for (int64_t e = lane; e < E; e += 32) max = fmaxf(max, to_float(logits[e]));
  max = warp_max(max);
  sum = 0;
  for (int64_t e = lane; e < E; e += 32) sum += expf(to_float(logits[e]) - max);
  sum = warp_sum(sum);
}

// The k-th choice of the warp's token: the largest p among experts not in chosen[0..k), the
// lower expert on ties. Every lane returns the same (p, e).
template <typename T>
__device__ void next_choice(const T* logits, int64_t E, float max, float sum, const int* chosen,
                            int k, float& best_p, int& best_e) {
  const int lane = threadIdx.x % 32;
  best_p = -1.0f;
  best_e = 0x7fffffff;
  for (int64_t e = lane; e < E; e += 32) {
    bool taken = false;
    for (int j = 0; j < k; ++j) taken |= chosen[j] == e;
    if (taken) continue;
    const float p = expf(to_float(logits[e]) - max) / sum;
    if (p > best_p || (p == best_p && e < best_e)) {
      best_p = p;
      best_e = static_cast<int>(e);
    }
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_p = __shfl_xor_sync(0xffffffffu, best_p, offset);
    const int other_e = __shfl_xor_sync(0xffffffffu, best_e, offset);
    if (other_p > best_p || (other_p == best_p && other_e < best_e)) {
      best_p = other_p;
      best_e = other_e;
    }
  }
}

// prob_sum: each block sums its tokens' probabilities in shared memory (E floats, dynamic) and
// adds them with one atomic per expert, not one per token and expert.
template <typename T>
__global__ void route_kernel(const T* logits, int64_t N, int64_t E, int K, bool renormalize,
                             int32_t* expert, float* weight, float* prob_sum) {
  extern __shared__ float block_prob_sum[];
  const int64_t n = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (prob_sum != nullptr) {
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) block_prob_sum[e] = 0;
    __syncthreads();
  }
  if (n < N) {
    const T* row = logits + n * E;
    float max, sum;
    softmax_stats(row, E, max, sum);
    if (prob_sum != nullptr) {
      for (int64_t e = lane; e < E; e += 32) {
        atomicAdd(block_prob_sum + e, expf(to_float(row[e]) - max) / sum);
      }
    }
    int chosen[kMaxTopK];
    float p[kMaxTopK];
    float total = 0;
    for (int k = 0; k < K; ++k) {
      next_choice(row, E, max, sum, chosen, k, p[k], chosen[k]);
      total += p[k];
    }
    if (lane == 0) {
      for (int k = 0; k < K; ++k) {
        expert[n * K + k] = chosen[k];
        weight[n * K + k] = renormalize ? p[k] / total : p[k];
      }
    }
  }
  if (prob_sum != nullptr) {
    __syncthreads();
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x)
      atomicAdd(prob_sum + e, block_prob_sum[e]);
  }
}

template <typename T>
__global__ void route_backward_kernel(const float* dweight, const T* logits, const int32_t* expert,
                                      const float* weight, int64_t N, int64_t E, int K,
                                      bool renormalize, const float* aux_grad, T* dlogits) {
  const int64_t n = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (n >= N) return;
  const int lane = threadIdx.x % 32;
  const T* row = logits + n * E;
  float max, sum;
  softmax_stats(row, E, max, sum);
  // w_k = p_k / Z (Z: the chosen p's sum, or 1): dp_k = (dw_k - sum_j dw_j w_j) / Z.
  float dot = 0, chosen_sum = 0;
  for (int k = 0; k < K; ++k) {
    dot += dweight[n * K + k] * weight[n * K + k];
    chosen_sum += expf(to_float(row[expert[n * K + k]]) - max) / sum;
  }
  // dp_e, then the softmax backward dl_e = p_e (dp_e - sum_j p_j dp_j).
  float mean = 0;
  for (int64_t e = lane; e < E; e += 32) {
    float dp = aux_grad != nullptr ? aux_grad[e] : 0.0f;
    for (int k = 0; k < K; ++k) {
      if (expert[n * K + k] == e) {
        const float dw = dweight[n * K + k];
        dp += renormalize ? (dw - dot) / chosen_sum : dw;
      }
    }
    mean += expf(to_float(row[e]) - max) / sum * dp;
  }
  mean = warp_sum(mean);
  for (int64_t e = lane; e < E; e += 32) {
    float dp = aux_grad != nullptr ? aux_grad[e] : 0.0f;
    for (int k = 0; k < K; ++k) {
      if (expert[n * K + k] == e) {
        const float dw = dweight[n * K + k];
        dp += renormalize ? (dw - dot) / chosen_sum : dw;
      }
    }
    const float p = expf(to_float(row[e]) - max) / sum;
    dlogits[n * E + e] = from_float<T>(p * (dp - mean));
  }
}

// The grouping kernels: one block per expert; each pass covers kGroupThreads x kSlotsPerThread
// slots, thread t its kSlotsPerThread consecutive ones (so the order within a pass is the
// thread order, then the order within a thread).
constexpr int kGroupThreads = 1024;
constexpr int kGroupWarps = kGroupThreads / 32;
constexpr int kSlotsPerThread = 4;

// Which of the thread's slots in the pass starting at `base` chose expert e (bit j: slot
// base + kSlotsPerThread * threadIdx.x + j).
__device__ __forceinline__ unsigned matches_in_pass(const int32_t* expert, int64_t slots,
                                                    int64_t base, int e) {
  const int64_t first = base + int64_t{kSlotsPerThread} * threadIdx.x;
  unsigned bits = 0;
  if (first + kSlotsPerThread <= slots && reinterpret_cast<uintptr_t>(expert + first) % 16 == 0) {
    const int4 v = *reinterpret_cast<const int4*>(expert + first);
    bits = (v.x == e) | (v.y == e) << 1 | (v.z == e) << 2 | (v.w == e) << 3;
  } else {
    for (int j = 0; j < kSlotsPerThread; ++j) {
      if (first + j < slots && expert[first + j] == e) bits |= 1u << j;
    }
  }
  return bits;
}

// The block's exclusive prefix of per-thread counts, and the block total.
__device__ __forceinline__ int block_exclusive_scan(int count, int* warp_totals, int& total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int inclusive = count;
  for (int offset = 1; offset < 32; offset *= 2) {
    const int up = __shfl_up_sync(0xffffffffu, inclusive, offset);
    if (lane >= offset) inclusive += up;
  }
  if (lane == 31) warp_totals[warp] = inclusive;
  __syncthreads();
  int before = 0;
  total = 0;
  for (int w = 0; w < kGroupWarps; ++w) {
    if (w < warp) before += warp_totals[w];
    total += warp_totals[w];
  }
  __syncthreads();  // warp_totals is rewritten by the next pass
  return before + inclusive - count;
}

// One block per expert: how many slots chose it.
__global__ void count_rows_kernel(const int32_t* expert, int64_t slots, int32_t* rows) {
  __shared__ int warp_totals[kGroupWarps];
  const int e = blockIdx.x;
  int count = 0;
  for (int64_t base = 0; base < slots; base += int64_t{kGroupThreads} * kSlotsPerThread) {
    count += __popc(matches_in_pass(expert, slots, base, e));
  }
  int total = 0;
  block_exclusive_scan(count, warp_totals, total);
  if (threadIdx.x == 0) rows[e] = total;
}

// One block per expert: its slots in slot order, written from the expert's first row on.
__global__ void group_rows_kernel(const int32_t* expert, int64_t slots, const int32_t* rows,
                                  int32_t* source, int32_t* row) {
  __shared__ int warp_totals[kGroupWarps];
  const int e = blockIdx.x;
  int64_t next = 0;
  for (int j = 0; j < e; ++j) next += rows[j];
  for (int64_t base = 0; base < slots; base += int64_t{kGroupThreads} * kSlotsPerThread) {
    unsigned bits = matches_in_pass(expert, slots, base, e);
    int total = 0;
    int64_t position = next + block_exclusive_scan(__popc(bits), warp_totals, total);
    const int64_t first = base + int64_t{kSlotsPerThread} * threadIdx.x;
    for (; bits != 0; bits &= bits - 1) {
      const int64_t i = first + __ffs(bits) - 1;
      source[position] = static_cast<int32_t>(i);
      row[i] = static_cast<int32_t>(position);
      ++position;
    }
    next += total;
  }
}

template <typename T>
__global__ void gather_kernel(const T* x, const int32_t* source, int64_t M, int64_t K, int64_t C,
                              T* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < M * C;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t m = i / C, c = i % C;
    out[i] = x[(source[m] / K) * C + c];
  }
}

// The vector kernels: 16-byte units of bf16 rows (C a multiple of 8), one warp per output row,
// its lanes striding over the row's units.
constexpr int kRowsPerBlock = kWarpsPerBlock;

unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

__global__ void gather_vec_kernel(const uint4* x, const int32_t* source, int64_t M, int64_t K,
                                  int64_t units, uint4* out) {
  const int64_t m = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  if (m >= M) return;
  const uint4* from = x + (source[m] / K) * units;
  uint4* to = out + m * units;
  for (int64_t u = threadIdx.x % 32; u < units; u += 32) to[u] = from[u];
}

// d(x)[n] (+)= sum over k of dx_MC[row[n, k]].
__global__ void gather_backward_vec_kernel(const bf16* dx_MC, const int32_t* row, int64_t N,
                                           int64_t K, int64_t C, bf16* dx_NC, bool accumulate) {
  const int64_t n = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  if (n >= N) return;
  for (int64_t c = int64_t{threadIdx.x % 32} * kBf16PerVector; c < C; c += 32 * kBf16PerVector) {
    float sum[kBf16PerVector], v[kBf16PerVector];
    if (accumulate) {
      load8(dx_NC + n * C + c, sum);
    } else {
      for (int j = 0; j < kBf16PerVector; ++j) sum[j] = 0;
    }
    for (int64_t k = 0; k < K; ++k) {
      load8(dx_MC + int64_t{row[n * K + k]} * C + c, v);
      for (int j = 0; j < kBf16PerVector; ++j) sum[j] += v[j];
    }
    store8(dx_NC + n * C + c, sum);
  }
}

// out[n] = residual[n] + sum over k of weight[n, k] y[row[n, k]].
__global__ void combine_vec_kernel(const bf16* y, const int32_t* row, const float* weight,
                                   const bf16* residual, int64_t N, int64_t K, int64_t C,
                                   bf16* out) {
  const int64_t n = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  if (n >= N) return;
  for (int64_t c = int64_t{threadIdx.x % 32} * kBf16PerVector; c < C; c += 32 * kBf16PerVector) {
    float sum[kBf16PerVector] = {}, v[kBf16PerVector];
    for (int64_t k = 0; k < K; ++k) {
      const float w = weight[n * K + k];
      load8(y + int64_t{row[n * K + k]} * C + c, v);
      for (int j = 0; j < kBf16PerVector; ++j) sum[j] += w * v[j];
    }
    load8(residual + n * C + c, v);
    for (int j = 0; j < kBf16PerVector; ++j) sum[j] = v[j] + sum[j];
    store8(out + n * C + c, sum);
  }
}

// One warp per (token, slot): dy[row] = weight * dout[n] and d(weight) = <dout[n], y[row]>, in
// one pass over the three rows.
__global__ void combine_backward_vec_kernel(const bf16* dout, const bf16* y, const int32_t* row,
                                            const float* weight, int64_t N, int64_t K, int64_t C,
                                            bf16* dy, float* dweight) {
  const int64_t slot = blockIdx.x * int64_t{kRowsPerBlock} + threadIdx.x / 32;
  if (slot >= N * K) return;
  const bf16* g = dout + (slot / K) * C;
  const int64_t r = int64_t{row[slot]} * C;
  const float w = weight[slot];
  float dot = 0;
  for (int64_t c = int64_t{threadIdx.x % 32} * kBf16PerVector; c < C; c += 32 * kBf16PerVector) {
    float gv[kBf16PerVector], yv[kBf16PerVector], out[kBf16PerVector];
    load8(g + c, gv);
    load8(y + r + c, yv);
    for (int j = 0; j < kBf16PerVector; ++j) {
      dot += gv[j] * yv[j];
      out[j] = w * gv[j];
    }
    store8(dy + r + c, out);
  }
  dot = warp_sum(dot);
  if (threadIdx.x % 32 == 0) dweight[slot] = dot;
}

template <typename T>
__global__ void gather_backward_kernel(const T* dx_MC, const int32_t* row, int64_t N, int64_t K,
                                       int64_t C, T* dx_NC, bool accumulate) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N * C;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    float sum = accumulate ? to_float(dx_NC[i]) : 0.0f;
    for (int64_t k = 0; k < K; ++k) sum += to_float(dx_MC[int64_t{row[n * K + k]} * C + c]);
    dx_NC[i] = from_float<T>(sum);
  }
}

template <typename T>
__global__ void combine_kernel(const T* y, const int32_t* row, const float* weight,
                               const T* residual, int64_t N, int64_t K, int64_t C, T* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N * C;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / C, c = i % C;
    float sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      sum += weight[n * K + k] * to_float(y[int64_t{row[n * K + k]} * C + c]);
    }
    out[i] = from_float<T>(to_float(residual[i]) + sum);
  }
}

template <typename T>
__global__ void combine_dy_kernel(const T* dout, const int32_t* row, const float* weight, int64_t N,
                                  int64_t K, int64_t C, T* dy) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N * K * C;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t slot = i / C, c = i % C, n = slot / K;
    dy[int64_t{row[slot]} * C + c] = from_float<T>(weight[slot] * to_float(dout[n * C + c]));
  }
}

// One warp per (token, slot): <dout[n], y[row]>.
template <typename T>
__global__ void combine_dweight_kernel(const T* dout, const T* y, const int32_t* row, int64_t N,
                                       int64_t K, int64_t C, float* dweight) {
  const int64_t slot = blockIdx.x * int64_t{kWarpsPerBlock} + threadIdx.x / 32;
  if (slot >= N * K) return;
  const int lane = threadIdx.x % 32;
  const T* a = dout + (slot / K) * C;
  const T* b = y + int64_t{row[slot]} * C;
  float dot = 0;
  for (int64_t c = lane; c < C; c += 32) dot += to_float(a[c]) * to_float(b[c]);
  dot = warp_sum(dot);
  if (lane == 0) dweight[slot] = dot;
}

}  // namespace

void route(DType act, const void* logits, int64_t N, int64_t E, int64_t K, bool renormalize,
           int32_t* expert, float* weight, float* prob_sum, cudaStream_t stream) {
  if (N == 0) return;
  SHARDTRAIN_DISPATCH_FLOAT(act, T, {
    route_kernel<T>
        <<<warp_blocks(N), kThreads, prob_sum != nullptr ? E * sizeof(float) : 0, stream>>>(
            static_cast<const T*>(logits), N, E, static_cast<int>(K), renormalize, expert, weight,
            prob_sum);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void route_backward(DType act, const float* dweight, const void* logits, const int32_t* expert,
                    const float* weight, int64_t N, int64_t E, int64_t K, bool renormalize,
                    const float* aux_grad, void* dlogits, cudaStream_t stream) {
  if (N == 0) return;
  SHARDTRAIN_DISPATCH_FLOAT(act, T, {
    route_backward_kernel<T><<<warp_blocks(N), kThreads, 0, stream>>>(
        dweight, static_cast<const T*>(logits), expert, weight, N, E, static_cast<int>(K),
        renormalize, aux_grad, static_cast<T*>(dlogits));
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void count_rows(const int32_t* expert, int64_t slots, int64_t E, int32_t* rows,
                cudaStream_t stream) {
  count_rows_kernel<<<static_cast<unsigned>(E), kGroupThreads, 0, stream>>>(expert, slots, rows);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void group_rows(const int32_t* expert, int64_t slots, int64_t E, const int32_t* rows,
                int32_t* source, int32_t* row, cudaStream_t stream) {
  group_rows_kernel<<<static_cast<unsigned>(E), kGroupThreads, 0, stream>>>(expert, slots, rows,
                                                                            source, row);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void gather(DType act, const void* x, const int32_t* source, int64_t M, int64_t K, int64_t C,
            void* out, cudaStream_t stream) {
  if (M == 0 || C == 0) return;
  if (cuda_detail::bf16_vectorizable(act, C, {x, out})) {
    const int64_t units = C / cuda_detail::kBf16PerVector;
    gather_vec_kernel<<<row_blocks(M), kThreads, 0, stream>>>(
        static_cast<const uint4*>(x), source, M, K, units, static_cast<uint4*>(out));
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  SHARDTRAIN_DISPATCH_FLOAT(act, T, {
    gather_kernel<T><<<grid_for(M * C, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(x), source, M, K, C, static_cast<T*>(out));
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void gather_backward(DType act, const void* dx_MC, const int32_t* row, int64_t N, int64_t K,
                     int64_t C, void* dx_NC, bool accumulate, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  if (cuda_detail::bf16_vectorizable(act, C, {dx_MC, dx_NC})) {
    gather_backward_vec_kernel<<<row_blocks(N), kThreads, 0, stream>>>(
        static_cast<const bf16*>(dx_MC), row, N, K, C, static_cast<bf16*>(dx_NC), accumulate);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  SHARDTRAIN_DISPATCH_FLOAT(act, T, {
    gather_backward_kernel<T><<<grid_for(N * C, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(dx_MC), row, N, K, C, static_cast<T*>(dx_NC), accumulate);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void combine(DType act, const void* y, const int32_t* row, const float* weight,
             const void* residual, int64_t N, int64_t K, int64_t C, void* out,
             cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  if (cuda_detail::bf16_vectorizable(act, C, {y, residual, out})) {
    combine_vec_kernel<<<row_blocks(N), kThreads, 0, stream>>>(
        static_cast<const bf16*>(y), row, weight, static_cast<const bf16*>(residual), N, K, C,
        static_cast<bf16*>(out));
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  SHARDTRAIN_DISPATCH_FLOAT(act, T, {
    combine_kernel<T><<<grid_for(N * C, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(y), row, weight, static_cast<const T*>(residual), N, K, C,
        static_cast<T*>(out));
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void combine_backward(DType act, const void* dout, const void* y, const int32_t* row,
                      const float* weight, int64_t N, int64_t K, int64_t C, void* dy,
                      float* dweight, cudaStream_t stream) {
  if (N == 0 || C == 0) return;
  if (cuda_detail::bf16_vectorizable(act, C, {dout, y, dy})) {
    combine_backward_vec_kernel<<<row_blocks(N * K), kThreads, 0, stream>>>(
        static_cast<const bf16*>(dout), static_cast<const bf16*>(y), row, weight, N, K, C,
        static_cast<bf16*>(dy), dweight);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  SHARDTRAIN_DISPATCH_FLOAT(act, T, {
    combine_dy_kernel<T><<<grid_for(N * K * C, kThreads), kThreads, 0, stream>>>(
        static_cast<const T*>(dout), row, weight, N, K, C, static_cast<T*>(dy));
    combine_dweight_kernel<T><<<warp_blocks(N * K), kThreads, 0, stream>>>(
        static_cast<const T*>(dout), static_cast<const T*>(y), row, N, K, C, dweight);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_moe
