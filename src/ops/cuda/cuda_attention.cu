// Causal grouped-query attention, flash style: the T x T score matrix never exists. Tiles of 64
// queries x 64 keys live in shared memory (as fp32); the forward keeps an online softmax (running
// max and sum per row) and saves the log-sum-exp; the backward recomputes probabilities from it.
//
// This is the simple, correct SIMT version (fp32 FMAs on CUDA cores, no tensor cores): every
// head dim that is even and <= 128 takes the same path, templated on ceil(D / 32) so that the
// per-lane accumulators stay in registers. Work split (block = 8 warps):
//   forward   block = (64-query tile, head, batch); warp owns 8 query rows; for scores a lane
//             holds keys lane and lane+32, for the output a lane holds dims lane + 32c.
//   dq        same split as forward; dq_i = scale * sum_j dS_ij k_j.
//   dk, dv    block = (64-key tile, kv head, batch); loops over the group's query heads and the
//             query tiles at or after the key tile; warp owns 8 keys; no atomics, dk/dv written
//             once (overwrite).
// The mask (cuda_attention_mask.cuh: causal, window, documents) bounds the tile loops: a query
// tile's key tiles start at its first row's first key, a key tile's query tiles end at the
// last query that sees its last key; elements are masked per row inside those bounds.
// With P = softmax(S), S = q k^T * scale, delta_i = rowsum(dO_i * O_i):
//   dP = dO v^T; dS = P * (dP - delta); dq = dS k * scale; dk = dS^T q * scale; dv = P^T dO.
// With a logit soft cap (Gemma; AttentionShape::logit_softcap) S is cap * tanh(q k^T * scale /
// cap) and dS is multiplied by 1 - tanh^2 (attention_mask::soft_capped, soft_cap_slope).
#include <algorithm>
#include <type_traits>

#include "ops/cuda/cuda_attention_mask.cuh"
#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::from_float;
using cuda_detail::to_float;
using cuda_detail::warp_max;
using cuda_detail::warp_sum;

constexpr int kTile = 64;  // queries and keys per tile
static_assert(kTile == kSimtTile, "cuda_dispatch.h counts this kernel's shared memory");
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = kTile / kWarps;  // 8

// Row-major tile offsets: q/out/dq at (b, t, h), k/v at (b, t, kv head).
struct Strides {
  int64_t q_token, kv_token, q_batch, kv_batch;
  __host__ __device__ Strides(const AttentionShape& s)
      : q_token(int64_t{s.heads} * s.head_dim),
        kv_token(int64_t{s.kv_heads} * s.head_dim),
        q_batch(int64_t{s.seq} * s.heads * s.head_dim),
        kv_batch(int64_t{s.seq} * s.kv_heads * s.head_dim) {}
};

// Copies rows [first, first + kTile) of one head (row stride `token_stride`) into a shared tile
// with row pitch `pitch` floats; rows at or past `seq` become zeros.
template <typename T>
__device__ void load_tile(float* tile, int pitch, const T* head_base, int64_t token_stride,
                          int first, int seq, int head_dim) {
  for (int index = threadIdx.x; index < kTile * head_dim; index += blockDim.x) {
    const int row = index / head_dim, d = index % head_dim;
    const int t = first + row;
    tile[row * pitch + d] = t < seq ? to_float(head_base[int64_t{t} * token_stride + d]) : 0.0f;
  }
}

// ---- forward ----

// acc[r][c] += sum over the tile's kTile rows j of weights[r][j] * tile[j][lane + 32 c]: this
// warp's kRowsPerWarp rows of weights (pitch kTile) times a [kTile][D] tile of pitch `pitch`.
template <int kChunks>
__device__ __forceinline__ void accumulate_weighted_rows(float (&acc)[kRowsPerWarp][kChunks],
                                                         const float* weights, const float* tile,
                                                         int pitch, int D, int lane) {
  for (int j = 0; j < kTile; ++j) {
    float x[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + 32 * c;
      x[c] = d < D ? tile[j * pitch + d] : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float w = weights[r * kTile + j];
#pragma unroll
      for (int c = 0; c < kChunks; ++c) acc[r][c] += w * x[c];
    }
  }
}

template <typename T, int kChunks>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(const T* q_BTHD, const T* k_BTKD, const T* v_BTKD, float scale,
                             AttentionShape shape, T* out_BTHD, float* lse_BHT) {
  const int D = shape.head_dim, seq = shape.seq;
  const int q_tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int kv_head = h / (shape.heads / shape.kv_heads);
  const Strides strides(shape);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  extern __shared__ float shared[];
  float* q_tile_s = shared;                                             // [kTile][D]
  float* k_tile_s = q_tile_s + kTile * D;                               // [kTile][D + 1]
  float* v_tile_s = k_tile_s + kTile * (D + 1);                         // [kTile][D]
  float* probs_s = v_tile_s + kTile * D + warp * kRowsPerWarp * kTile;  // this warp's [8][kTile]

  const T* q_base = q_BTHD + b * strides.q_batch + int64_t{h} * D;
  const T* k_base = k_BTKD + b * strides.kv_batch + int64_t{kv_head} * D;
  const T* v_base = v_BTKD + b * strides.kv_batch + int64_t{kv_head} * D;
  const int first_query = q_tile * kTile;
  load_tile(q_tile_s, D, q_base, strides.q_token, first_query, seq, D);

  float row_max[kRowsPerWarp], row_sum[kRowsPerWarp], acc[kRowsPerWarp][kChunks];
  int row_first[kRowsPerWarp];  // first key of each row (the mask)
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    row_max[r] = -INFINITY;
    row_sum[r] = 0;
    row_first[r] = attention_mask::first_key(shape, b, first_query + warp * kRowsPerWarp + r);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc[r][c] = 0;
  }

  const int first_kv_tile = attention_mask::first_key(shape, b, first_query) / kTile;
  for (int kv_tile = first_kv_tile; kv_tile <= q_tile; ++kv_tile) {
    const int first_key = kv_tile * kTile;
    __syncthreads();  // previous tile fully consumed
    load_tile(k_tile_s, D + 1, k_base, strides.kv_token, first_key, seq, D);
    load_tile(v_tile_s, D, v_base, strides.kv_token, first_key, seq, D);
    __syncthreads();

    float score[kRowsPerWarp][2];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) score[r][0] = score[r][1] = 0;
    for (int d = 0; d < D; ++d) {
      const float k0 = k_tile_s[lane * (D + 1) + d];
      const float k1 = k_tile_s[(lane + 32) * (D + 1) + d];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float q = q_tile_s[(warp * kRowsPerWarp + r) * D + d];
        score[r][0] += q * k0;
        score[r][1] += q * k1;
      }
    }
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int query = first_query + warp * kRowsPerWarp + r;
      float s[2];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int key = first_key + lane + 32 * half;
        s[half] = (key <= query && key < seq && key >= row_first[r])
                      ? attention_mask::soft_capped(shape, score[r][half] * scale)
                      : -INFINITY;
      }
      const float new_max = fmaxf(row_max[r], warp_max(fmaxf(s[0], s[1])));
      float p0 = 0, p1 = 0, correction = 1;
      if (new_max != -INFINITY) {
        p0 = expf(s[0] - new_max);
        p1 = expf(s[1] - new_max);
        correction = expf(row_max[r] - new_max);
      }
      row_sum[r] = row_sum[r] * correction + warp_sum(p0 + p1);
      row_max[r] = new_max;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) acc[r][c] *= correction;
      probs_s[r * kTile + lane] = p0;
      probs_s[r * kTile + lane + 32] = p1;
    }
    __syncwarp();
    accumulate_weighted_rows<kChunks>(acc, probs_s, v_tile_s, D, D, lane);
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int query = first_query + warp * kRowsPerWarp + r;
    if (query >= seq) continue;
    const float inverse_sum = 1.0f / row_sum[r];
    T* out_row = out_BTHD + b * strides.q_batch + int64_t{query} * strides.q_token + int64_t{h} * D;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + 32 * c;
      if (d < D) out_row[d] = from_float<T>(acc[r][c] * inverse_sum);
    }
    if (lane == 0) {
      lse_BHT[(int64_t{b} * shape.heads + h) * seq + query] = row_max[r] + logf(row_sum[r]);
    }
  }
}

// ---- backward ----

// delta_BHT[b][h][t] = sum_d dout * out; one warp per (b, t, h) row.
template <typename T>
__global__ void attention_delta_kernel(const T* dout_BTHD, const T* out_BTHD, AttentionShape shape,
                                       float* delta_BHT) {
  const int64_t rows = int64_t{shape.batch} * shape.seq * shape.heads;
  const int64_t row = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together
  const int D = shape.head_dim;
  float dot = 0;
  for (int d = lane; d < D; d += 32) {
    dot += to_float(dout_BTHD[row * D + d]) * to_float(out_BTHD[row * D + d]);
  }
  dot = warp_sum(dot);
  if (lane == 0) {
    const int64_t h = row % shape.heads;
    const int64_t t = (row / shape.heads) % shape.seq;
    const int64_t b = row / (int64_t{shape.heads} * shape.seq);
    delta_BHT[(b * shape.heads + h) * shape.seq + t] = dot;
  }
}

// The backward kernels' two dot products per (row, key) pair: this warp's kRowsPerWarp rows of
// the narrow tiles (pitch D) against the lane's rows lane and lane + 32 of the wide tiles (pitch
// D + 1): first[r][h] = narrow_a[r] . wide_a[lane + 32 h], second[r][h] = narrow_b[r] . wide_b[..].
__device__ __forceinline__ void warp_rows_dot_lane_rows(const float* narrow_a,
                                                        const float* narrow_b, const float* wide_a,
                                                        const float* wide_b, int D, int warp,
                                                        int lane, float (&first)[kRowsPerWarp][2],
                                                        float (&second)[kRowsPerWarp][2]) {
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
    first[r][0] = first[r][1] = second[r][0] = second[r][1] = 0;
  for (int d = 0; d < D; ++d) {
    const float a0 = wide_a[lane * (D + 1) + d];
    const float a1 = wide_a[(lane + 32) * (D + 1) + d];
    const float b0 = wide_b[lane * (D + 1) + d];
    const float b1 = wide_b[(lane + 32) * (D + 1) + d];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const float x = narrow_a[(warp * kRowsPerWarp + r) * D + d];
      const float y = narrow_b[(warp * kRowsPerWarp + r) * D + d];
      first[r][0] += x * a0;
      first[r][1] += x * a1;
      second[r][0] += y * b0;
      second[r][1] += y * b1;
    }
  }
}

template <typename T, int kChunks>
__global__ void __launch_bounds__(kThreads)
    attention_dq_kernel(const T* dout_BTHD, const T* q_BTHD, const T* k_BTKD, const T* v_BTKD,
                        const float* lse_BHT, const float* delta_BHT, float scale,
                        AttentionShape shape, T* dq_BTHD) {
  const int D = shape.head_dim, seq = shape.seq;
  const int q_tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int kv_head = h / (shape.heads / shape.kv_heads);
  const Strides strides(shape);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  extern __shared__ float shared[];
  float* q_tile_s = shared;                                                     // [kTile][D]
  float* dout_tile_s = q_tile_s + kTile * D;                                    // [kTile][D]
  float* k_tile_s = dout_tile_s + kTile * D;                                    // [kTile][D + 1]
  float* v_tile_s = k_tile_s + kTile * (D + 1);                                 // [kTile][D + 1]
  float* dscores_s = v_tile_s + kTile * (D + 1) + warp * kRowsPerWarp * kTile;  // [8][kTile]

  const int64_t q_offset = b * strides.q_batch + int64_t{h} * D;
  const T* k_base = k_BTKD + b * strides.kv_batch + int64_t{kv_head} * D;
  const T* v_base = v_BTKD + b * strides.kv_batch + int64_t{kv_head} * D;
  const int first_query = q_tile * kTile;
  load_tile(q_tile_s, D, q_BTHD + q_offset, strides.q_token, first_query, seq, D);
  load_tile(dout_tile_s, D, dout_BTHD + q_offset, strides.q_token, first_query, seq, D);

  float row_lse[kRowsPerWarp], row_delta[kRowsPerWarp], acc[kRowsPerWarp][kChunks];
  int row_first[kRowsPerWarp];  // first key of each row (the mask)
  const int64_t stats_offset = (int64_t{b} * shape.heads + h) * seq;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int query = first_query + warp * kRowsPerWarp + r;
    row_first[r] = attention_mask::first_key(shape, b, query);
    row_lse[r] = query < seq ? lse_BHT[stats_offset + query] : 0.0f;
    row_delta[r] = query < seq ? delta_BHT[stats_offset + query] : 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) acc[r][c] = 0;
  }

  const int first_kv_tile = attention_mask::first_key(shape, b, first_query) / kTile;
  for (int kv_tile = first_kv_tile; kv_tile <= q_tile; ++kv_tile) {
    const int first_key = kv_tile * kTile;
    __syncthreads();
    load_tile(k_tile_s, D + 1, k_base, strides.kv_token, first_key, seq, D);
    load_tile(v_tile_s, D + 1, v_base, strides.kv_token, first_key, seq, D);
    __syncthreads();

    float score[kRowsPerWarp][2], dprob[kRowsPerWarp][2];
    warp_rows_dot_lane_rows(q_tile_s, dout_tile_s, k_tile_s, v_tile_s, D, warp, lane, score, dprob);
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const int query = first_query + warp * kRowsPerWarp + r;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int key = first_key + lane + 32 * half;
        float dscore = 0;
        if (key <= query && query < seq && key >= row_first[r]) {
          const float capped = attention_mask::soft_capped(shape, score[r][half] * scale);
          const float prob = expf(capped - row_lse[r]);
          dscore = prob * (dprob[r][half] - row_delta[r]) *
                   attention_mask::soft_cap_slope(shape, capped);
        }
        dscores_s[r * kTile + lane + 32 * half] = dscore;
      }
    }
    __syncwarp();
    accumulate_weighted_rows<kChunks>(acc, dscores_s, k_tile_s, D + 1, D, lane);
    __syncwarp();
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int query = first_query + warp * kRowsPerWarp + r;
    if (query >= seq) continue;
    T* dq_row = dq_BTHD + q_offset + int64_t{query} * strides.q_token;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + 32 * c;
      if (d < D) dq_row[d] = from_float<T>(acc[r][c] * scale);
    }
  }
}

template <typename T, int kChunks>
__global__ void __launch_bounds__(kThreads)
    attention_dkdv_kernel(const T* dout_BTHD, const T* q_BTHD, const T* k_BTKD, const T* v_BTKD,
                          const float* lse_BHT, const float* delta_BHT, float scale,
                          AttentionShape shape, T* dk_BTKD, T* dv_BTKD) {
  const int D = shape.head_dim, seq = shape.seq;
  const int kv_tile = blockIdx.x, kv_head = blockIdx.y, b = blockIdx.z;
  const int group = shape.heads / shape.kv_heads;
  const Strides strides(shape);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

  extern __shared__ float shared[];
  float* k_tile_s = shared;                                            // [kTile][D]
  float* v_tile_s = k_tile_s + kTile * D;                              // [kTile][D]
  float* q_tile_s = v_tile_s + kTile * D;                              // [kTile][D + 1]
  float* dout_tile_s = q_tile_s + kTile * (D + 1);                     // [kTile][D + 1]
  float* lse_s = dout_tile_s + kTile * (D + 1);                        // [kTile]
  float* delta_s = lse_s + kTile;                                      // [kTile]
  float* probs_s = delta_s + kTile + warp * kRowsPerWarp * kTile * 2;  // this warp's [8][kTile]
  float* dscores_s = probs_s + kRowsPerWarp * kTile;                   // this warp's [8][kTile]

  const int64_t kv_offset = b * strides.kv_batch + int64_t{kv_head} * D;
  const int first_key = kv_tile * kTile;
  load_tile(k_tile_s, D, k_BTKD + kv_offset, strides.kv_token, first_key, seq, D);
  load_tile(v_tile_s, D, v_BTKD + kv_offset, strides.kv_token, first_key, seq, D);

  float dk[kRowsPerWarp][kChunks], dv[kRowsPerWarp][kChunks];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
#pragma unroll
    for (int c = 0; c < kChunks; ++c) dk[r][c] = dv[r][c] = 0;
  }
  int row_end[kRowsPerWarp];  // one past the last query that sees each key (the mask)
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    row_end[r] = attention_mask::query_end(shape, b, first_key + warp * kRowsPerWarp + r);
  }
  const int query_end = attention_mask::query_end(shape, b, first_key + kTile - 1);
  const int q_tiles = min((seq + kTile - 1) / kTile, (query_end + kTile - 1) / kTile);

  for (int g = 0; g < group; ++g) {
    const int h = kv_head * group + g;
    const int64_t q_offset = b * strides.q_batch + int64_t{h} * D;
    const int64_t stats_offset = (int64_t{b} * shape.heads + h) * seq;
    for (int q_tile = kv_tile; q_tile < q_tiles; ++q_tile) {
      const int first_query = q_tile * kTile;
      __syncthreads();
      load_tile(q_tile_s, D + 1, q_BTHD + q_offset, strides.q_token, first_query, seq, D);
      load_tile(dout_tile_s, D + 1, dout_BTHD + q_offset, strides.q_token, first_query, seq, D);
      for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
        const int query = first_query + i;
        lse_s[i] = query < seq ? lse_BHT[stats_offset + query] : 0.0f;
        delta_s[i] = query < seq ? delta_BHT[stats_offset + query] : 0.0f;
      }
      __syncthreads();

      // Lane holds query rows lane and lane + 32 against each of the warp's 8 keys.
      float score[kRowsPerWarp][2], dprob[kRowsPerWarp][2];
      warp_rows_dot_lane_rows(k_tile_s, v_tile_s, q_tile_s, dout_tile_s, D, warp, lane, score,
                              dprob);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const int key = first_key + warp * kRowsPerWarp + r;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int row = lane + 32 * half;
          const int query = first_query + row;
          float prob = 0, dscore = 0;
          if (key <= query && query < seq && key < seq && query < row_end[r]) {
            const float capped = attention_mask::soft_capped(shape, score[r][half] * scale);
            prob = expf(capped - lse_s[row]);
            dscore = prob * (dprob[r][half] - delta_s[row]) *
                     attention_mask::soft_cap_slope(shape, capped);
          }
          probs_s[r * kTile + row] = prob;
          dscores_s[r * kTile + row] = dscore;
        }
      }
      __syncwarp();
      for (int i = 0; i < kTile; ++i) {
        float dout_i[kChunks], q_i[kChunks];
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const int d = lane + 32 * c;
          dout_i[c] = d < D ? dout_tile_s[i * (D + 1) + d] : 0.0f;
          q_i[c] = d < D ? q_tile_s[i * (D + 1) + d] : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
          const float p = probs_s[r * kTile + i];
          const float ds = dscores_s[r * kTile + i];
#pragma unroll
          for (int c = 0; c < kChunks; ++c) {
            dv[r][c] += p * dout_i[c];
            dk[r][c] += ds * q_i[c];
          }
        }
      }
      __syncwarp();
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int key = first_key + warp * kRowsPerWarp + r;
    if (key >= seq) continue;
    const int64_t row_offset = kv_offset + int64_t{key} * strides.kv_token;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const int d = lane + 32 * c;
      if (d < D) {
        dk_BTKD[row_offset + d] = from_float<T>(dk[r][c] * scale);
        dv_BTKD[row_offset + d] = from_float<T>(dv[r][c]);
      }
    }
  }
}

// ---- launch helpers ----

// Shared memory per kernel: simt_*_shared_bytes of cuda_dispatch.h (the table's numbers).
size_t forward_shared_bytes(int D) { return simt_forward_shared_bytes(D); }
size_t dq_shared_bytes(int D) { return simt_dq_shared_bytes(D); }
size_t dkdv_shared_bytes(int D) { return simt_dkdv_shared_bytes(D); }

// Raises the kernel's dynamic shared memory limit after checking it against the device limits
// the dispatcher sees (attention_*_config rejected the shape with an Error if it does not fit).
template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  require_shared_fits(bytes, device_limits(), "SIMT attention kernel");
  SHARDTRAIN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes)));
}

void check_shape(const AttentionShape& s) {
  if (s.head_dim <= 0 || s.head_dim > 128 || s.head_dim % 2 != 0 || s.kv_heads <= 0 ||
      s.heads % s.kv_heads != 0) {
    std::fprintf(stderr,
                 "%s:%d: attention shape not supported (H=%d K=%d D=%d): need even "
                 "D <= 128 and H a multiple of K\n",
                 __FILE__, __LINE__, s.heads, s.kv_heads, s.head_dim);
    std::abort();
  }
}

// Calls fn(std::integral_constant<int, kChunks>) with kChunks = ceil(D / 32).
template <typename Fn>
void dispatch_chunks(int head_dim, Fn&& fn) {
  switch ((head_dim + 31) / 32) {
    case 1:
      fn(std::integral_constant<int, 1>{});
      break;
    case 2:
      fn(std::integral_constant<int, 2>{});
      break;
    case 3:
      fn(std::integral_constant<int, 3>{});
      break;
    default:
      fn(std::integral_constant<int, 4>{});
      break;
  }
}

dim3 tile_grid(const AttentionShape& s, int heads) {
  return dim3(static_cast<unsigned>((s.seq + kTile - 1) / kTile), static_cast<unsigned>(heads),
              static_cast<unsigned>(s.batch));
}

}  // namespace

void attention_forward(DType dtype, const void* q_BTHD, const void* k_BTKD, const void* v_BTKD,
                       float scale, const AttentionShape& shape, void* out_BTHD, float* lse_BHT,
                       cudaStream_t stream) {
  check_shape(shape);
  if (shape.batch == 0 || shape.seq == 0 || shape.heads == 0) return;
  const size_t bytes = forward_shared_bytes(shape.head_dim);
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    dispatch_chunks(shape.head_dim, [&](auto chunks) {
      constexpr int kChunks = decltype(chunks)::value;
      auto kernel = attention_forward_kernel<T, kChunks>;
      allow_shared(kernel, bytes);
      kernel<<<tile_grid(shape, shape.heads), kThreads, bytes, stream>>>(
          static_cast<const T*>(q_BTHD), static_cast<const T*>(k_BTKD),
          static_cast<const T*>(v_BTKD), scale, shape, static_cast<T*>(out_BTHD), lse_BHT);
      SHARDTRAIN_CUDA_CHECK_LAUNCH();
    });
  });
}

size_t attention_backward_scratch_floats(const AttentionShape& shape) {
  const size_t delta = static_cast<size_t>(shape.batch) * shape.heads * shape.seq;
  return (delta + 3) / 4 * 4 + attention_mask_scratch_floats(shape);
}

void attention_backward(DType dtype, const void* dout_BTHD, const void* q_BTHD, const void* k_BTKD,
                        const void* v_BTKD, const void* out_BTHD, const float* lse_BHT, float scale,
                        const AttentionShape& call_shape, void* dq_BTHD, void* dk_BTKD,
                        void* dv_BTKD, float* scratch, cudaStream_t stream) {
  check_shape(call_shape);
  if (call_shape.batch == 0 || call_shape.seq == 0 || call_shape.heads == 0) return;
  AttentionShape shape = call_shape;
  float* delta_BHT = scratch;
  const int64_t rows = int64_t{shape.batch} * shape.seq * shape.heads;
  if (shape.document_start_BT != nullptr) {  // dk/dv read each key's document end
    auto* ends = reinterpret_cast<int32_t*>(scratch + (rows + 3) / 4 * 4);
    attention_document_ends(shape.document_start_BT, shape.batch, shape.seq, ends, stream);
    shape.document_end_BT = ends;
  }
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T, {
    const unsigned delta_blocks = static_cast<unsigned>((rows * 32 + kThreads - 1) / kThreads);
    attention_delta_kernel<T><<<delta_blocks, kThreads, 0, stream>>>(
        static_cast<const T*>(dout_BTHD), static_cast<const T*>(out_BTHD), shape, delta_BHT);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    dispatch_chunks(shape.head_dim, [&](auto chunks) {
      constexpr int kChunks = decltype(chunks)::value;
      auto dq_kernel = attention_dq_kernel<T, kChunks>;
      const size_t dq_bytes = dq_shared_bytes(shape.head_dim);
      allow_shared(dq_kernel, dq_bytes);
      dq_kernel<<<tile_grid(shape, shape.heads), kThreads, dq_bytes, stream>>>(
          static_cast<const T*>(dout_BTHD), static_cast<const T*>(q_BTHD),
          static_cast<const T*>(k_BTKD), static_cast<const T*>(v_BTKD), lse_BHT, delta_BHT, scale,
          shape, static_cast<T*>(dq_BTHD));
      SHARDTRAIN_CUDA_CHECK_LAUNCH();
      auto dkdv_kernel = attention_dkdv_kernel<T, kChunks>;
      const size_t dkdv_bytes = dkdv_shared_bytes(shape.head_dim);
      allow_shared(dkdv_kernel, dkdv_bytes);
      dkdv_kernel<<<tile_grid(shape, shape.kv_heads), kThreads, dkdv_bytes, stream>>>(
          static_cast<const T*>(dout_BTHD), static_cast<const T*>(q_BTHD),
          static_cast<const T*>(k_BTKD), static_cast<const T*>(v_BTKD), lse_BHT, delta_BHT, scale,
          shape, static_cast<T*>(dk_BTKD), static_cast<T*>(dv_BTKD));
      SHARDTRAIN_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace shardtrain::cuda_kernels
