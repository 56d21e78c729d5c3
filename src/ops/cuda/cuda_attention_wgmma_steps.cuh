// The per-tile math shared by the Hopper attention kernels: the cp.async wgmma kernels
// (cuda_attention_wgmma_forward.cu, _backward.cu) and the warp-specialised ones
// (cuda_attention_ws_forward.cu, _backward.cu), which differ only in how tiles reach shared
// memory and how the warpgroups synchronise. Everything is per warpgroup (64 rows), in the
// accumulator layout of cuda_wgmma.cuh (warp w of the warpgroup owns rows 16w.., lane = 4g + t).
// Internal to ops/cuda (.cu files only); sm_90a code paths only (SHARDTRAIN_WGMMA_COMPILED).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/cuda_attention_mask.cuh"
#include "ops/cuda/cuda_attention_tc.cuh"

namespace shardtrain::cuda_kernels::flash::wgmma_steps {

#if SHARDTRAIN_WGMMA_COMPILED

// ---- forward ----

// The online softmax of one K/V tile for 64 query rows: s holds the raw scores of kKeys keys (in),
// P = exp2(scale_log2 * s - row max) (out, unnormalised); keys after their row are masked where
// the tile straddles the warp's rows (key_offset: the tile's first key counted from the
// warpgroup's first row), and keys before their row's first key (row_first, of rows g and g + 8,
// counted from the same row) where `below` says some key of the tile precedes some row's first
// key (cuda_attention_mask.cuh). Updates the running max and sum (log2 domain) of rows g and
// g + 8 and returns the factor the output accumulated so far must be scaled by.
template <int kKeys>
__device__ __forceinline__ void softmax_tile(float (&s)[kKeys / 2], int key_offset, int warp, int g,
                                             int t, float scale_log2, const int (&row_first)[2],
                                             bool below, float (&row_max)[2], float (&row_sum)[2],
                                             float (&correction)[2]) {
  // Max of the raw scores (the scale is positive), masked where a key follows its row.
  const bool straddles = key_offset + kKeys - 1 > warp * 16;  // some key after some row
  float tile_max[2] = {-INFINITY, -INFINITY};
  if (straddles || below) {
    // Element i's key is key_offset + 2t + c(i), c(i) = 8 (i / 4) + i % 2 a constant: masked when
    // c(i) > last[r] (after its row r) or c(i) < first[r] (before its row's first key).
    int first[2], last[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int base = key_offset + 2 * t;
      last[r] = straddles ? warp * 16 + g + 8 * r - base : kKeys;
      first[r] = below ? row_first[r] - base : 0;
    }
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) {
      const int r = (i % 4) / 2, c = (i / 4) * 8 + i % 2;
      if (c > last[r] || c < first[r]) s[i] = -INFINITY;
      tile_max[r] = fmaxf(tile_max[r], s[i]);
    }
  } else {
    // Most tiles (every one below the causal diagonal, outside a window's or document's edge):
    // no mask, and none of its ~8 instructions an element, which at head dim 64 cost as much
    // issue time as the tile's products.
#pragma unroll
    for (int i = 0; i < kKeys / 2; ++i) tile_max[(i % 4) / 2] = fmaxf(tile_max[(i % 4) / 2], s[i]);
  }
  float exp_base[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
    tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
    // A row may have seen no key yet (its first key lies in a later tile, or its rows are
    // padding): its max stays -inf and exp2 takes base 0, so its P and correction are 0.
    const float new_max = fmaxf(row_max[r], tile_max[r] * scale_log2);
    exp_base[r] = new_max == -INFINITY ? 0.0f : new_max;
    correction[r] = fast_exp2(row_max[r] - exp_base[r]);
    row_max[r] = new_max;
    row_sum[r] *= correction[r];
  }
#pragma unroll
  for (int i = 0; i < kKeys / 2; ++i) {
    const int r = (i % 4) / 2;
    s[i] = fast_exp2(fmaf(s[i], scale_log2, -exp_base[r]));
    row_sum[r] += s[i];
  }
}

// The mask of a forward warpgroup's 64 rows from `group_first_query` (cuda_attention_mask.cuh):
// the first keys of this thread's rows g and g + 8 and the greatest of the warpgroup's, counted
// from its first row.
struct ForwardRowMask {
  int row_first[2];
  int greatest_first;
};
__device__ __forceinline__ ForwardRowMask forward_row_mask(const AttentionShape& shape, int b,
                                                           int group_first_query, int warp, int g) {
  ForwardRowMask mask;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mask.row_first[r] =
        attention_mask::first_key(shape, b, group_first_query + warp * 16 + g + 8 * r) -
        group_first_query;
  }
  mask.greatest_first =
      attention_mask::first_key(shape, b, group_first_query + 63) - group_first_query;
  return mask;
}

// Once the previous P V is done: o *= correction, and P (s) rounded into the A fragments of the
// next P V.
template <int kKeys, int D>
__device__ __forceinline__ void rescale_and_pack(float (&o)[D / 2], const float (&s)[kKeys / 2],
                                                 const float (&correction)[2],
                                                 uint32_t (&p)[kKeys / 16][4]) {
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] *= correction[(i % 4) / 2];
#pragma unroll
  for (int i = 0; i < kKeys / 2; i += 2) {
    // s[i], s[i + 1]: keys 8j + 2t, +1 of row g + 8r, j = i / 4, r = (i % 4) / 2; A fragment
    // j / 2 (16 keys), register (j % 2) * 2 + r
    p[i / 8][((i / 4) % 2) * 2 + (i % 4) / 2] = pack_bf16(s[i], s[i + 1]);
  }
}

// out = o / row sum (bf16) and lse (natural log) of the warpgroup's real rows (first row
// `group_first_query`) of head h, batch b.
template <int D>
__device__ __forceinline__ void store_forward_rows(const float (&o)[D / 2],
                                                   const float (&row_max)[2], float (&row_sum)[2],
                                                   int group_first_query, int warp, int g, int t,
                                                   const AttentionShape& shape, int b, int h,
                                                   bf16* out_BTHD, float* lse_BHT) {
  const int seq = shape.seq;
  const int64_t q_token = int64_t{shape.heads} * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    const int query = group_first_query + warp * 16 + g + r * 8;
    if (query >= seq) continue;
    const float inverse_sum = 1.0f / row_sum[r];
    bf16* out_row = out_BTHD + (b * int64_t{seq} + query) * q_token + int64_t{h} * D;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<__nv_bfloat162*>(out_row + j * 8 + 2 * t) =
          __floats2bfloat162_rn(o[4 * j + 2 * r] * inverse_sum, o[4 * j + 2 * r + 1] * inverse_sum);
    }
    if (t == 0) {
      lse_BHT[(int64_t{b} * shape.heads + h) * seq + query] =
          (row_max[r] + log2f(row_sum[r])) * kLn2;
    }
  }
}

// ---- backward ----

// P^T or dS^T (64 keys x 64 queries, accumulator layout) as the four A fragments of a product
// over the queries.
__device__ __forceinline__ void a_fragments_of(const float (&x)[32], uint32_t (&a)[4][4]) {
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    a[i / 8][((i / 4) % 2) * 2 + (i % 4) / 2] = pack_bf16(x[i], x[i + 1]);
  }
}

// Where a backward step's operands are: the block's K and V tiles (kKeys rows, swizzled), this
// step's 64-row Q and dO tiles, its lse and delta (64 floats each, shared memory).
struct BackwardTiles {
  uint32_t k, v, q, dout;
  const float* lse;
  const float* delta;
};

// The mask of a backward warpgroup's 64 keys from `group_first_key` (cuda_attention_mask.cuh):
// the query ends of this thread's keys g and g + 8, and the least and greatest of the
// warpgroup's.
struct BackwardKeyMask {
  int row_end[2];
  int least_end, greatest_end;
};
__device__ __forceinline__ BackwardKeyMask backward_key_mask(const AttentionShape& shape, int b,
                                                             int group_first_key, int warp, int g) {
  BackwardKeyMask mask;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mask.row_end[r] = attention_mask::query_end(shape, b, group_first_key + warp * 16 + g + 8 * r);
  }
  mask.least_end = attention_mask::query_end(shape, b, group_first_key);
  mask.greatest_end = attention_mask::query_end(shape, b, group_first_key + 63);
  return mask;
}

// One 64-query step of a warpgroup's 64 keys (rows key_row0.. of the K and V tiles; key_offset:
// its first key counted from the step's first query, `first_query`): S^T = K Q^T and dP^T =
// V dO^T issued together; P^T = exp2(S^T - lse) (masked: causal, and queries at or past their
// key's query end) computed while dP^T runs; dV += P^T dO issued; dS^T = P^T (dP^T - delta)
// computed while it runs and handed to store_dst (dS^T for dQ), then dK += dS^T Q issued. Leaves
// the dV and dK products in flight (wait before reusing dk, dv, the Q / dO tiles). A warpgroup
// whose keys all follow the queries (key_offset >= 64) or that no query of the tile sees only
// stores zeros for its dS^T.
template <int D, int kKeys, typename StoreDst>
__device__ __forceinline__ void backward_step(const BackwardTiles& tiles, int key_row0,
                                              int key_offset, int first_query,
                                              const BackwardKeyMask& key_mask, int warp, int g,
                                              int t, float scale_log2, float (&s)[32],
                                              float (&dp)[32], float (&dk)[D / 2],
                                              float (&dv)[D / 2], StoreDst&& store_dst) {
  constexpr int kQueries = 64;
  if (key_offset < kQueries && first_query < key_mask.greatest_end) {
    // Overlapped: P is computed while dP^T runs, dS while dV += P^T dO runs.
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      wgmma::mma_ss<kQueries, 0, 0>(s, wgmma::k_major(tiles.k, kKeys, key_row0, kk),
                                    wgmma::k_major(tiles.q, kQueries, 0, kk), kk > 0);
    }
    wgmma::commit();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      wgmma::mma_ss<kQueries, 0, 0>(dp, wgmma::k_major(tiles.v, kKeys, key_row0, kk),
                                    wgmma::k_major(tiles.dout, kQueries, 0, kk), kk > 0);
    }
    wgmma::commit();
    wgmma::wait<1>();  // S^T
    wgmma::fence_registers(s);

    const bool straddles = key_offset + 63 > 0;  // some key after some query: mask
    // Some query of the tile at or past some key's query end (window, document): mask.
    const bool beyond = first_query + kQueries > key_mask.least_end;
    if (straddles || beyond) {
      // Element i's query is 2t + c(i), c(i) = 8 (i / 4) + i % 2 a constant: masked when c(i) <
      // least[r] (before its key r) or c(i) >= end[r] (at or past its key's query end).
      int least[2], end[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int key = key_offset + warp * 16 + g + 8 * r;
        least[r] = straddles ? key - 2 * t : 0;
        end[r] = beyond ? key_mask.row_end[r] - first_query - 2 * t : kQueries;
      }
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int r = (i % 4) / 2, c = (i / 4) * 8 + i % 2;
        const int query = c + 2 * t;
        const float p = fast_exp2(fmaf(s[i], scale_log2, -tiles.lse[query] * kLog2e));
        s[i] = c < least[r] || c >= end[r] ? 0.0f : p;
      }
    } else {
      // No mask on most steps (softmax_tile says why).
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int query = (i / 4) * 8 + 2 * t + i % 2;
        s[i] = fast_exp2(fmaf(s[i], scale_log2, -tiles.lse[query] * kLog2e));
      }
    }
    uint32_t p_frag[4][4], ds_frag[4][4];
    a_fragments_of(s, p_frag);
    wgmma::fence();
#pragma unroll
    for (int kc = 0; kc < kQueries / 16; ++kc) {
      wgmma::mma_rs<D, 1>(dv, p_frag[kc], wgmma::mn_major(tiles.dout, kQueries, kc), 1);
    }
    wgmma::commit();
    wgmma::wait<1>();  // dP^T
    wgmma::fence_registers(dp);
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const int query = (i / 4) * 8 + 2 * t + i % 2;
      dp[i] = s[i] * (dp[i] - tiles.delta[query]);
    }
    store_dst(dp);
    a_fragments_of(dp, ds_frag);
    wgmma::fence();
#pragma unroll
    for (int kc = 0; kc < kQueries / 16; ++kc) {
      wgmma::mma_rs<D, 1>(dk, ds_frag[kc], wgmma::mn_major(tiles.q, kQueries, kc), 1);
    }
    wgmma::commit();
  } else {
    // Every key after every query: dS^T = 0 (dQ multiplies all kKeys keys).
#pragma unroll
    for (int i = 0; i < 32; ++i) dp[i] = 0;
    store_dst(dp);
  }
}

// dQ (64 queries x 64 columns from column block `column_block`) = dS K over the kKeys keys of
// the dS^T tile at `dst` (swizzled, kKeys rows of 64 queries) and the K tile; waits for it and
// for every earlier product of the warpgroup (dk, dv are then settled too).
template <int kKeys, int D>
__device__ __forceinline__ void dq_product(float (&dq)[32], uint32_t dst, uint32_t k,
                                           int column_block, float (&dk)[D / 2],
                                           float (&dv)[D / 2]) {
  wgmma::fence();
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    wgmma::mma_ss<64, 1, 1>(dq, wgmma::mn_major(dst, kKeys, kk),
                            wgmma::mn_major(k, kKeys, kk, column_block), kk > 0);
  }
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_registers(dq);
  wgmma::fence_registers(dk);
  wgmma::fence_registers(dv);
}

// dq of the step's real queries (first `first_query`) added into the fp32 dQ accumulator of head
// h, columns of `column_block`.
template <int D>
__device__ __forceinline__ void add_dq_rows(const float (&dq)[32], int first_query, int warp, int g,
                                            int t, const AttentionShape& shape, int b, int h,
                                            int column_block, float* dq_accum_BTHD) {
  const int64_t q_token = int64_t{shape.heads} * D;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int query = first_query + warp * 16 + g + 8 * r;
    if (query >= shape.seq) continue;
    float* dq_row = dq_accum_BTHD + (b * int64_t{shape.seq} + query) * q_token + int64_t{h} * D +
                    column_block * 64;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      cuda_detail::atomic_add_float2(dq_row + 8 * j + 2 * t,
                                     make_float2(dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]));
    }
  }
}

// The warpgroup's dK (scaled) and dV of its 64 keys (first `first_key`) into the bf16 outputs,
// or, when the key tile is shared by several blocks (dk_accum_BTKD set), unscaled into the fp32
// accumulators (converted afterwards).
template <int D>
__device__ __forceinline__ void store_dkdv(const float (&dk)[D / 2], const float (&dv)[D / 2],
                                           int first_key, int warp, int g, int t, int seq,
                                           int64_t kv_offset, int64_t kv_token, float scale,
                                           bf16* dk_BTKD, bf16* dv_BTKD, float* dk_accum_BTKD,
                                           float* dv_accum_BTKD) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = first_key + warp * 16 + g + r * 8;
    if (key >= seq) continue;
    const int64_t row_offset = kv_offset + int64_t{key} * kv_token;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int col = j * 8 + 2 * t;
      const float dk0 = dk[4 * j + 2 * r], dk1 = dk[4 * j + 2 * r + 1];
      const float dv0 = dv[4 * j + 2 * r], dv1 = dv[4 * j + 2 * r + 1];
      if (dk_accum_BTKD != nullptr) {  // shared key tile: unscaled sums, converted afterwards
        cuda_detail::atomic_add_float2(dk_accum_BTKD + row_offset + col, make_float2(dk0, dk1));
        cuda_detail::atomic_add_float2(dv_accum_BTKD + row_offset + col, make_float2(dv0, dv1));
        continue;
      }
      *reinterpret_cast<__nv_bfloat162*>(dk_BTKD + row_offset + col) =
          __floats2bfloat162_rn(dk0 * scale, dk1 * scale);
      *reinterpret_cast<__nv_bfloat162*>(dv_BTKD + row_offset + col) =
          __floats2bfloat162_rn(dv0, dv1);
    }
  }
}

#endif  // SHARDTRAIN_WGMMA_COMPILED

}  // namespace shardtrain::cuda_kernels::flash::wgmma_steps
