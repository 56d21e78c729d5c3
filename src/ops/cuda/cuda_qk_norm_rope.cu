// Per-head RMSNorm of q and k fused with the packed q/k/v split and the rotary embedding
// (cuda_kernels.h QkNormRope), forward and backward side by side.
//
// The work unit is one head row (D values) of one token. Rows are numbered token-major with the
// heads in packed order (q heads, k heads, then v heads), so neighbouring rows are neighbouring
// memory both in the packed row and in q, k, v; v rows are plain copies. A q/k row in forward:
// r = 1 / sqrt(mean(x^2) + eps) in fp32, y = the norm rounded as the unfused ops rounded it
// (Llama, Qwen3: bf16(w * bf16(x r)); Gemma, 1 + w: bf16(x r (1 + w))), then rotated in fp32 and
// rounded once. Backward rotates the gradient back (fp32, no rounding), recomputes r from the
// raw row with the forward's own summation (so it equals the forward's r bit for bit), and
// applies rmsnorm_backward's formula. Weight gradients: each lane sums its channels over the
// block's rows in registers (vector kernel) or in its warp's shared slice (scalar kernel), the
// block adds its warps in a fixed order into one partial row per block, and accumulate_partials
// adds the blocks in a fixed order: deterministic.
//
// Kernels (cuda_dispatch.h choose_qk_norm_rope): kVector (bf16, D 64 / 128 / 256): D / 16 lanes
// a row, each lane 8 rotation pairs, x[i0, i0 + 8) and x[half + i0, half + i0 + 8) in two
// 16-byte loads, the row's sums by xor shuffles inside its lanes; kScalar (f32 or bf16, any even
// D up to 512): a warp a row, lane-strided, re-reading the row (from L1) between its passes.
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::bf16;
using cuda_detail::from_float;
using cuda_detail::to_float;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPairsPerLane = 8;  // the vector kernel: one 16-byte load per half row
// Resident blocks an SM the vector kernels are compiled for (register caps of 64 and 128): a
// memory-bound pass wants many rows in flight; the backward's 32 weight-gradient sums a lane
// need the larger budget. The weights are read per row (L1 hits) rather than held.
constexpr int kVectorForwardBlocksPerSm = 4, kVectorBackwardBlocksPerSm = 2;
// Backward blocks (and weight-gradient partials, 2 * D floats a block): the vector kernel's
// resident blocks on an H100/H200's 132 SMs; the grid-stride loop covers the rest.
constexpr int64_t kMaxBackwardBlocks = 132 * kVectorBackwardBlocksPerSm;

// The row sizes and the norm's settings, by value into every kernel.
struct Params {
  int64_t tokens;
  int q_heads, kv_heads, head_dim, half;
  const int32_t* positions;
  const float* cos_table;
  const float* sin_table;
  float eps, weight_offset;  // offset 1: scale by 1 + weight
};

Params params_of(const QkNormRope& s) {
  return Params{s.tokens,
                static_cast<int>(s.q_heads),
                static_cast<int>(s.kv_heads),
                static_cast<int>(s.head_dim),
                static_cast<int>(s.head_dim / 2),
                s.positions_N,
                s.cos_PR,
                s.sin_PR,
                s.eps,
                s.one_plus_weight ? 1.0f : 0.0f};
}

enum class RowKind { kQ, kK, kV };

// Head j of a token's packed row: which tensor it belongs to and its head there.
struct Head {
  RowKind kind;
  int index;
};
__device__ __forceinline__ Head head_of(const Params& p, int j) {
  if (j < p.q_heads) return {RowKind::kQ, j};
  if (j < p.q_heads + p.kv_heads) return {RowKind::kK, j - p.q_heads};
  return {RowKind::kV, j - p.q_heads - p.kv_heads};
}
// Offset of (token n, head h) in a (tokens, heads, D) tensor.
__device__ __forceinline__ int64_t separate_offset(const Params& p, int64_t n, const Head& h) {
  const int heads = h.kind == RowKind::kQ ? p.q_heads : p.kv_heads;
  return (n * heads + h.index) * int64_t{p.head_dim};
}
__device__ __forceinline__ int64_t packed_offset(const Params& p, int64_t n, int j) {
  return (n * (p.q_heads + 2 * p.kv_heads) + j) * int64_t{p.head_dim};
}

// The normalised value of x, rounded as the unfused norm rounds it (weight includes the offset).
template <typename T>
__device__ __forceinline__ float normed(float x, float r, float weight, float weight_offset) {
  if (weight_offset != 0) return to_float(from_float<T>(x * r * weight));
  return to_float(from_float<T>(weight * to_float(from_float<T>(x * r))));
}

__device__ __forceinline__ float rstd_of(float sum_squares, int channels, float eps) {
  return 1.0f / sqrtf(sum_squares / static_cast<float>(channels) + eps);
}

// Adds the block's per-warp weight-gradient sums (sums_W2D: [warp][q, k][D]) in warp order and
// writes this block's partial rows: q at partials[block * D], k at partials[(blocks + block) * D].
__device__ void store_block_partials(const float* sums_W2D, int head_dim, float* partials) {
  __syncthreads();
  for (int c = threadIdx.x; c < 2 * head_dim; c += blockDim.x) {
    float sum = 0;
    for (int w = 0; w < kWarps; ++w) sum += sums_W2D[w * 2 * head_dim + c];
    const int which = c / head_dim, channel = c % head_dim;
    partials[(int64_t{which} * gridDim.x + blockIdx.x) * head_dim + channel] = sum;
  }
}

// ---- the vector kernels (bf16, kLanes = D / 16 lanes a row) ----

template <int kLanes>
__device__ __forceinline__ float row_sum(float x) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  }
  return x;
}

// The lane's part of sum(x^2): its first-half values, then its second-half values.
__device__ __forceinline__ float lane_sum_squares(const float* first, const float* second) {
  float sum = 0;
  for (int j = 0; j < kPairsPerLane; ++j) sum += first[j] * first[j];
  for (int j = 0; j < kPairsPerLane; ++j) sum += second[j] * second[j];
  return sum;
}

__device__ __forceinline__ void unpack8(const uint4& raw, float* out) {
  const auto* pairs = reinterpret_cast<const __nv_bfloat162*>(&raw);
  for (int j = 0; j < kPairsPerLane / 2; ++j) {
    const float2 f = __bfloat1622float2(pairs[j]);
    out[2 * j] = f.x;
    out[2 * j + 1] = f.y;
  }
}

__device__ __forceinline__ void load_table8(const float* table, float* out) {
  *reinterpret_cast<float4*>(out) = *reinterpret_cast<const float4*>(table);
  *reinterpret_cast<float4*>(out + 4) = *reinterpret_cast<const float4*>(table + 4);
}

// The lane's 16 weights (with the offset) of one norm: [i0, i0 + 8) and [half + i0, ...).
template <typename W>
__device__ __forceinline__ void load_weights(const W* weight, int i0, int half, float offset,
                                             float* first, float* second) {
  for (int j = 0; j < kPairsPerLane; ++j) {
    first[j] = to_float(weight[i0 + j]) + offset;
    second[j] = to_float(weight[half + i0 + j]) + offset;
  }
}

// Forward. kFromPacked: rows of `packed` (q, k, v heads) -> q_raw, k_raw, v copies and q, k;
// else rows of q_src, k_src -> q, k.
template <typename W, int kLanes, bool kFromPacked>
__global__ void __launch_bounds__(kThreads, kVectorForwardBlocksPerSm)
    norm_rope_vec_kernel(Params p, const W* q_weight, const W* k_weight, const bf16* packed,
                         const bf16* q_src, const bf16* k_src, bf16* q_raw, bf16* k_raw, bf16* v,
                         bf16* q, bf16* k) {
  constexpr int kRowsPerWarp = 32 / kLanes;
  const int lane = threadIdx.x % 32, i0 = lane % kLanes * kPairsPerLane;
  const int heads = p.q_heads + p.kv_heads * (kFromPacked ? 2 : 1);
  const int64_t rows = p.tokens * heads;
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  for (int64_t base = warp * kRowsPerWarp; base < rows; base += warps * kRowsPerWarp) {
    const int64_t row = base + lane / kLanes;
    const bool active = row < rows;
    const int64_t n = active ? row / heads : 0;
    const int j = active ? static_cast<int>(row - n * heads) : 0;
    const Head h = head_of(p, j);
    const bf16* src;
    if constexpr (kFromPacked) {
      src = packed + packed_offset(p, n, j);
    } else {
      src = (h.kind == RowKind::kQ ? q_src : k_src) + separate_offset(p, n, h);
    }
    uint4 raw1{}, raw2{};
    if (active) {
      raw1 = *reinterpret_cast<const uint4*>(src + i0);
      raw2 = *reinterpret_cast<const uint4*>(src + p.half + i0);
    }
    float x1[kPairsPerLane], x2[kPairsPerLane];
    unpack8(raw1, x1);
    unpack8(raw2, x2);
    // Every lane takes part in the row sums (inactive and v rows add zeros or are ignored).
    const float sum_squares = row_sum<kLanes>(lane_sum_squares(x1, x2));
    if (!active) continue;
    const int64_t at = separate_offset(p, n, h);
    if (h.kind == RowKind::kV) {
      if constexpr (kFromPacked) {
        *reinterpret_cast<uint4*>(v + at + i0) = raw1;
        *reinterpret_cast<uint4*>(v + at + p.half + i0) = raw2;
      }
      continue;
    }
    const bool is_q = h.kind == RowKind::kQ;
    if constexpr (kFromPacked) {
      bf16* raw_out = (is_q ? q_raw : k_raw) + at;
      *reinterpret_cast<uint4*>(raw_out + i0) = raw1;
      *reinterpret_cast<uint4*>(raw_out + p.half + i0) = raw2;
    }
    const float r = rstd_of(sum_squares, p.head_dim, p.eps);
    const int64_t table = int64_t{p.positions[n]} * p.half + i0;
    float c[kPairsPerLane], s[kPairsPerLane], w1[kPairsPerLane], w2[kPairsPerLane];
    load_table8(p.cos_table + table, c);
    load_table8(p.sin_table + table, s);
    load_weights(is_q ? q_weight : k_weight, i0, p.half, p.weight_offset, w1, w2);
    float out1[kPairsPerLane], out2[kPairsPerLane];
#pragma unroll
    for (int t = 0; t < kPairsPerLane; ++t) {
      const float y1 = normed<bf16>(x1[t], r, w1[t], p.weight_offset);
      const float y2 = normed<bf16>(x2[t], r, w2[t], p.weight_offset);
      out1[t] = y1 * c[t] - y2 * s[t];
      out2[t] = y2 * c[t] + y1 * s[t];
    }
    bf16* out = (is_q ? q : k) + at;
    cuda_detail::store8(out + i0, out1);
    cuda_detail::store8(out + p.half + i0, out2);
  }
}

// Backward: rows of dq, dk (with q_raw, k_raw) and dv -> packed; weight-gradient partials.
template <typename W, int kLanes>
__global__ void __launch_bounds__(kThreads, kVectorBackwardBlocksPerSm)
    norm_rope_backward_vec_kernel(Params p, const W* q_weight, const W* k_weight, const bf16* dq,
                                  const bf16* dk, const bf16* dv, const bf16* q_raw,
                                  const bf16* k_raw, bf16* packed, float* partials) {
  constexpr int kRowsPerWarp = 32 / kLanes, kHeadDim = 16 * kLanes;
  __shared__ float sums_W2D[kWarps * 2 * kHeadDim];
  const int lane = threadIdx.x % 32, i0 = lane % kLanes * kPairsPerLane;
  const int heads = p.q_heads + 2 * p.kv_heads;
  const int64_t rows = p.tokens * heads;
  // This lane's weight-gradient sums: [q, k][first half, second half][pair].
  float dw[2][2][kPairsPerLane] = {};
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  for (int64_t base = warp * kRowsPerWarp; base < rows; base += warps * kRowsPerWarp) {
    const int64_t row = base + lane / kLanes;
    const bool active = row < rows;
    const int64_t n = active ? row / heads : 0;
    const int j = active ? static_cast<int>(row - n * heads) : 0;
    const Head h = head_of(p, j);
    const int64_t at = separate_offset(p, n, h);
    bf16* out = packed + packed_offset(p, n, j);
    const bool is_q = h.kind == RowKind::kQ;
    const bool norm_row = active && h.kind != RowKind::kV;
    if (active && h.kind == RowKind::kV) {
      *reinterpret_cast<uint4*>(out + i0) = *reinterpret_cast<const uint4*>(dv + at + i0);
      *reinterpret_cast<uint4*>(out + p.half + i0) =
          *reinterpret_cast<const uint4*>(dv + at + p.half + i0);
    }
    float g1[kPairsPerLane] = {}, g2[kPairsPerLane] = {}, x1[kPairsPerLane] = {},
          x2[kPairsPerLane] = {}, c[kPairsPerLane] = {}, s[kPairsPerLane] = {};
    if (norm_row) {
      const bf16* grad = (is_q ? dq : dk) + at;
      const bf16* x = (is_q ? q_raw : k_raw) + at;
      cuda_detail::load8(grad + i0, g1);
      cuda_detail::load8(grad + p.half + i0, g2);
      cuda_detail::load8(x + i0, x1);
      cuda_detail::load8(x + p.half + i0, x2);
      const int64_t table = int64_t{p.positions[n]} * p.half + i0;
      load_table8(p.cos_table + table, c);
      load_table8(p.sin_table + table, s);
    }
    float w1[kPairsPerLane], w2[kPairsPerLane], dy1[kPairsPerLane], dy2[kPairsPerLane], dot = 0;
    load_weights(is_q ? q_weight : k_weight, i0, p.half, p.weight_offset, w1, w2);
#pragma unroll
    for (int t = 0; t < kPairsPerLane; ++t) {  // the rotation by -angle
      dy1[t] = g1[t] * c[t] + g2[t] * s[t];
      dy2[t] = g2[t] * c[t] - g1[t] * s[t];
      dot += dy1[t] * w1[t] * x1[t] + dy2[t] * w2[t] * x2[t];
    }
    const float sum_squares = row_sum<kLanes>(lane_sum_squares(x1, x2));
    dot = row_sum<kLanes>(dot);
    if (!norm_row) continue;
    // With y = w x r:  dx_c = r w_c dy_c - x_c r^3 / D * sum_k dy_k w_k x_k;  dw_c += dy_c x_c r.
    const float r = rstd_of(sum_squares, p.head_dim, p.eps);
    const float correction = dot * r * r * r / static_cast<float>(p.head_dim);
    float dx1[kPairsPerLane], dx2[kPairsPerLane];
#pragma unroll
    for (int t = 0; t < kPairsPerLane; ++t) {
      dx1[t] = r * w1[t] * dy1[t] - x1[t] * correction;
      dx2[t] = r * w2[t] * dy2[t] - x2[t] * correction;
      // Constant indices in both branches: the sums stay in registers.
      if (is_q) {
        dw[0][0][t] += dy1[t] * x1[t] * r;
        dw[0][1][t] += dy2[t] * x2[t] * r;
      } else {
        dw[1][0][t] += dy1[t] * x1[t] * r;
        dw[1][1][t] += dy2[t] * x2[t] * r;
      }
    }
    cuda_detail::store8(out + i0, dx1);
    cuda_detail::store8(out + p.half + i0, dx2);
  }
  // The warp's rows: add the lanes that own the same channels (one per row slot), fixed order.
#pragma unroll
  for (int which = 0; which < 2; ++which) {
#pragma unroll
    for (int part = 0; part < 2; ++part) {
#pragma unroll
      for (int t = 0; t < kPairsPerLane; ++t) {
        float sum = dw[which][part][t];
        for (int offset = kLanes; offset < 32; offset *= 2) {
          sum += __shfl_xor_sync(0xffffffffu, sum, offset);
        }
        if (lane < kLanes) {
          sums_W2D[(threadIdx.x / 32 * 2 + which) * kHeadDim + part * p.half + i0 + t] = sum;
        }
      }
    }
  }
  store_block_partials(sums_W2D, kHeadDim, partials);
}

// ---- the scalar kernels (any float dtype, any even D up to kQkNormRopeMaxHeadDim) ----

// sum(x^2) of one row, lane-strided, then across the warp: the same order in every kernel.
template <typename T>
__device__ __forceinline__ float warp_row_sum_squares(const T* x, int head_dim, int lane) {
  float sum = 0;
  for (int c = lane; c < head_dim; c += 32) {
    const float value = to_float(x[c]);
    sum += value * value;
  }
  return cuda_detail::warp_sum(sum);
}

template <typename T, typename W, bool kFromPacked>
__global__ void __launch_bounds__(kThreads)
    norm_rope_scalar_kernel(Params p, const W* q_weight, const W* k_weight, const T* packed,
                            const T* q_src, const T* k_src, T* q_raw, T* k_raw, T* v, T* q, T* k) {
  const int lane = threadIdx.x % 32;
  const int heads = p.q_heads + p.kv_heads * (kFromPacked ? 2 : 1);
  const int64_t rows = p.tokens * heads;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  for (int64_t row = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; row < rows;
       row += warps) {  // a warp a row: the branches below are uniform in the warp
    const int64_t n = row / heads;
    const int j = static_cast<int>(row - n * heads);
    const Head h = head_of(p, j);
    const int64_t at = separate_offset(p, n, h);
    const T* src;
    if constexpr (kFromPacked) {
      src = packed + packed_offset(p, n, j);
    } else {
      src = (h.kind == RowKind::kQ ? q_src : k_src) + at;
    }
    if (h.kind == RowKind::kV) {
      for (int c = lane; c < p.head_dim; c += 32) v[at + c] = src[c];
      continue;
    }
    const bool is_q = h.kind == RowKind::kQ;
    const float r = rstd_of(warp_row_sum_squares(src, p.head_dim, lane), p.head_dim, p.eps);
    const W* weight = is_q ? q_weight : k_weight;
    const float* cos_row = p.cos_table + int64_t{p.positions[n]} * p.half;
    const float* sin_row = p.sin_table + int64_t{p.positions[n]} * p.half;
    T* out = (is_q ? q : k) + at;
    for (int i = lane; i < p.half; i += 32) {
      const float x1 = to_float(src[i]), x2 = to_float(src[i + p.half]);
      if constexpr (kFromPacked) {
        T* raw_out = (is_q ? q_raw : k_raw) + at;
        raw_out[i] = src[i];
        raw_out[i + p.half] = src[i + p.half];
      }
      const float y1 = normed<T>(x1, r, to_float(weight[i]) + p.weight_offset, p.weight_offset);
      const float y2 =
          normed<T>(x2, r, to_float(weight[i + p.half]) + p.weight_offset, p.weight_offset);
      out[i] = from_float<T>(y1 * cos_row[i] - y2 * sin_row[i]);
      out[i + p.half] = from_float<T>(y2 * cos_row[i] + y1 * sin_row[i]);
    }
  }
}

template <typename T, typename W>
__global__ void __launch_bounds__(kThreads)
    norm_rope_backward_scalar_kernel(Params p, const W* q_weight, const W* k_weight, const T* dq,
                                     const T* dk, const T* dv, const T* q_raw, const T* k_raw,
                                     T* packed, float* partials) {
  extern __shared__ float sums_W2D[];  // [warp][q, k][D]
  const int lane = threadIdx.x % 32;
  float* warp_sums = sums_W2D + threadIdx.x / 32 * 2 * p.head_dim;
  for (int c = lane; c < 2 * p.head_dim; c += 32) warp_sums[c] = 0;
  __syncwarp();  // a lane adds into channels another lane zeroed
  const int heads = p.q_heads + 2 * p.kv_heads;
  const int64_t rows = p.tokens * heads;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  for (int64_t row = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32; row < rows;
       row += warps) {
    const int64_t n = row / heads;
    const int j = static_cast<int>(row - n * heads);
    const Head h = head_of(p, j);
    const int64_t at = separate_offset(p, n, h);
    T* out = packed + packed_offset(p, n, j);
    if (h.kind == RowKind::kV) {
      for (int c = lane; c < p.head_dim; c += 32) out[c] = dv[at + c];
      continue;
    }
    const bool is_q = h.kind == RowKind::kQ;
    const T* grad = (is_q ? dq : dk) + at;
    const T* x = (is_q ? q_raw : k_raw) + at;
    const W* weight = is_q ? q_weight : k_weight;
    const float* cos_row = p.cos_table + int64_t{p.positions[n]} * p.half;
    const float* sin_row = p.sin_table + int64_t{p.positions[n]} * p.half;
    // d(norm out) of pair i: the rotation by -angle.
    const auto dy_of = [&](int i, float& dy1, float& dy2) {
      const float g1 = to_float(grad[i]), g2 = to_float(grad[i + p.half]);
      dy1 = g1 * cos_row[i] + g2 * sin_row[i];
      dy2 = g2 * cos_row[i] - g1 * sin_row[i];
    };
    float dot = 0;
    for (int i = lane; i < p.half; i += 32) {
      float dy1, dy2;
      dy_of(i, dy1, dy2);
      dot += dy1 * (to_float(weight[i]) + p.weight_offset) * to_float(x[i]) +
             dy2 * (to_float(weight[i + p.half]) + p.weight_offset) * to_float(x[i + p.half]);
    }
    dot = cuda_detail::warp_sum(dot);
    const float r = rstd_of(warp_row_sum_squares(x, p.head_dim, lane), p.head_dim, p.eps);
    const float correction = dot * r * r * r / static_cast<float>(p.head_dim);
    float* dweight = warp_sums + (is_q ? 0 : p.head_dim);
    for (int i = lane; i < p.half; i += 32) {
      float dy1, dy2;
      dy_of(i, dy1, dy2);
      const float x1 = to_float(x[i]), x2 = to_float(x[i + p.half]);
      const float w1 = to_float(weight[i]) + p.weight_offset;
      const float w2 = to_float(weight[i + p.half]) + p.weight_offset;
      out[i] = from_float<T>(r * w1 * dy1 - x1 * correction);
      out[i + p.half] = from_float<T>(r * w2 * dy2 - x2 * correction);
      dweight[i] += dy1 * x1 * r;
      dweight[i + p.half] += dy2 * x2 * r;
    }
  }
  store_block_partials(sums_W2D, p.head_dim, partials);
}

bool all_aligned(std::initializer_list<const void*> pointers) {
  return std::all_of(pointers.begin(), pointers.end(),
                     [](const void* pointer) { return cuda_detail::aligned16(pointer); });
}

// Runs `launch` with kLanes = D / 16 for the vector kernel's head dims (64, 128, 256).
template <typename Launch>
void with_lanes(int64_t head_dim, Launch&& launch) {
  if (head_dim == 64) {
    launch(std::integral_constant<int, 4>{});
  } else if (head_dim == 128) {
    launch(std::integral_constant<int, 8>{});
  } else {
    launch(std::integral_constant<int, 16>{});
  }
}

int64_t backward_blocks(const QkNormRope& s) {
  const int64_t rows = s.tokens * (s.q_heads + 2 * s.kv_heads);
  return std::max<int64_t>(1, std::min((rows + kWarps - 1) / kWarps, kMaxBackwardBlocks));
}

// The forward of both entry points: from packed (q_src, k_src null) or from q_src / k_src.
template <bool kFromPacked>
void forward(DType dtype, const QkNormRope& s, const void* packed, const void* q_src,
             const void* k_src, void* q_raw, void* k_raw, void* v, void* q, void* k,
             cudaStream_t stream) {
  if (s.tokens == 0) return;
  const Params p = params_of(s);
  const int64_t rows = s.tokens * (s.q_heads + s.kv_heads * (kFromPacked ? 2 : 1));
  const bool aligned =
      all_aligned({packed, q_src, k_src, q_raw, k_raw, v, q, k, s.cos_PR, s.sin_PR});
  if (choose_qk_norm_rope(dtype, s.head_dim, aligned) == QkNormRopeKernel::kVector) {
    const auto bf = [](const void* pointer) {
      return static_cast<bf16*>(const_cast<void*>(pointer));
    };
    SHARDTRAIN_DISPATCH_FLOAT(s.weight_dtype, W, {
      with_lanes(s.head_dim, [&](auto lanes) {
        constexpr int kLanes = decltype(lanes)::value;
        norm_rope_vec_kernel<W, kLanes, kFromPacked>
            <<<cuda_detail::grid_for(rows * kLanes, kThreads), kThreads, 0, stream>>>(
                p, static_cast<const W*>(s.q_weight_D), static_cast<const W*>(s.k_weight_D),
                bf(packed), bf(q_src), bf(k_src), bf(q_raw), bf(k_raw), bf(v), bf(q), bf(k));
      });
    });
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    SHARDTRAIN_DISPATCH_FLOAT(s.weight_dtype, W, {
      const auto t = [](const void* pointer) {
        return static_cast<T*>(const_cast<void*>(pointer));
      };
      norm_rope_scalar_kernel<T, W, kFromPacked>
          <<<cuda_detail::grid_for(rows * 32, kThreads), kThreads, 0, stream>>>(
              p, static_cast<const W*>(s.q_weight_D), static_cast<const W*>(s.k_weight_D),
              t(packed), t(q_src), t(k_src), t(q_raw), t(k_raw), t(v), t(q), t(k));
    });
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace

void split_qkv_norm_rope(DType dtype, const QkNormRope& shape, const void* packed, void* q_raw,
                         void* k_raw, void* v, void* q, void* k, cudaStream_t stream) {
  forward<true>(dtype, shape, packed, nullptr, nullptr, q_raw, k_raw, v, q, k, stream);
}

void qk_norm_rope(DType dtype, const QkNormRope& shape, const void* q_raw, const void* k_raw,
                  void* q, void* k, cudaStream_t stream) {
  forward<false>(dtype, shape, nullptr, q_raw, k_raw, nullptr, nullptr, nullptr, q, k, stream);
}

size_t qk_norm_rope_backward_scratch_floats(const QkNormRope& shape) {
  return static_cast<size_t>(2 * backward_blocks(shape) * shape.head_dim);
}

void pack_qkv_norm_rope_backward(DType dtype, const QkNormRope& shape, const void* dq,
                                 const void* dk, const void* dv, const void* q_raw,
                                 const void* k_raw, DType dweight_dtype, void* dq_weight_D,
                                 void* dk_weight_D, bool accumulate_dweight, void* packed,
                                 float* scratch, cudaStream_t stream) {
  const int64_t blocks = backward_blocks(shape);
  const int64_t D = shape.head_dim;
  const Params p = params_of(shape);
  const bool aligned = all_aligned({dq, dk, dv, q_raw, k_raw, packed, shape.cos_PR, shape.sin_PR});
  if (shape.tokens > 0 && choose_qk_norm_rope(dtype, D, aligned) == QkNormRopeKernel::kVector) {
    const auto bf = [](const void* pointer) {
      return static_cast<bf16*>(const_cast<void*>(pointer));
    };
    SHARDTRAIN_DISPATCH_FLOAT(shape.weight_dtype, W, {
      with_lanes(D, [&](auto lanes) {
        norm_rope_backward_vec_kernel<W, decltype(lanes)::value>
            <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
                p, static_cast<const W*>(shape.q_weight_D), static_cast<const W*>(shape.k_weight_D),
                bf(dq), bf(dk), bf(dv), bf(q_raw), bf(k_raw), bf(packed), scratch);
      });
    });
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
  } else {
    const size_t shared_bytes = static_cast<size_t>(kWarps * 2 * D) * sizeof(float);
    SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
      SHARDTRAIN_DISPATCH_FLOAT(shape.weight_dtype, W, {
        const auto t = [](const void* pointer) {
          return static_cast<T*>(const_cast<void*>(pointer));
        };
        norm_rope_backward_scalar_kernel<T, W>
            <<<static_cast<unsigned>(blocks), kThreads, shared_bytes, stream>>>(
                p, static_cast<const W*>(shape.q_weight_D), static_cast<const W*>(shape.k_weight_D),
                t(dq), t(dk), t(dv), t(q_raw), t(k_raw), t(packed), scratch);
      });
    });
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
  }
  // q's and k's partial rows, each added in block order (they may share a buffer: two launches).
  accumulate_partials(scratch, blocks, D, dweight_dtype, dq_weight_D, accumulate_dweight, stream);
  accumulate_partials(scratch + blocks * D, blocks, D, dweight_dtype, dk_weight_D,
                      accumulate_dweight, stream);
}

}  // namespace shardtrain::cuda_kernels
