// Causal grouped-query flash attention backward on the tensor cores (bf16, head dims 64 and
// 128); the structure and fragment layouts are described in cuda_attention_tc.cuh.
//   backward  delta = rowsum(dO * O) first. Then block = (key tile, kv head, batch[, slice of
//             the GQA group]) of 8 warps and 128 keys, or 4 warps and 64 keys, with Q/dO tiles
//             two stages deep, or one where shared memory is short (sm_86/89 at D = 128; the
//             dispatch table, cuda_dispatch.h, picks), heaviest key tiles first, looping over
//             the group's query heads and the 64-row query tiles holding a query at or after the
//             first key: S^T = K Q^T, P^T = exp2(S^T - lse), dP^T = V dO^T,
//             dS^T = P^T (dP^T - delta); dV += P^T dO and dK += dS^T Q stay in registers and are
//             written once (fp32 atomics only when the group is split over blocks); a warp whose
//             keys all follow the query tile skips that math. dQ += dS K goes through shared
//             memory (dS^T), is shared out over all warps (16 queries x D / 2 columns each with
//             8) and added once per (key tile, query tile) with fp32 atomics into a scratch
//             buffer that a last kernel scales to bf16.
//   mask      (cuda_attention_mask.cuh) the query tiles end at the one holding the last query
//             that sees the block's last key (a window or a document end skips every tile after
//             it); keys are masked past their last query only in tiles reaching past some key's
//             last query, and a warp skips the math of tiles wholly past its keys' last queries.
//   soft cap  (Gemma's attn_logit_softcapping) P^T is recomputed from the capped scores
//             (attention_mask::soft_capped, as the forward) and dS^T, the gradient of the
//             capped scores, is multiplied by 1 - tanh^2 (soft_cap_slope) into that of the
//             scaled ones; a separate instantiation, so the uncapped kernels stay as they were.
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/cuda_attention_mask.cuh"
#include "ops/cuda/cuda_attention_tc.cuh"
#include "ops/cuda/cuda_dispatch.h"

namespace shardtrain::cuda_kernels {
namespace {

using namespace flash;  // NOLINT: the kernel helpers of cuda_attention_tc.cuh

// ---- backward ----

// delta_BHT[b][h][t] = sum_d dout * out; one warp per (b, t, h) row, bf16 pairs per lane.
template <int D>
__global__ void flash_delta_kernel(const bf16* dout_BTHD, const bf16* out_BTHD,
                                   AttentionShape shape, float* delta_BHT) {
  const int64_t rows = int64_t{shape.batch} * shape.seq * shape.heads;
  const int64_t row = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together
  float dot = 0;
#pragma unroll
  for (int d = 2 * lane; d < D; d += 64) {
    const float2 o =
        __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(out_BTHD + row * D + d));
    const float2 dO =
        __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(dout_BTHD + row * D + d));
    dot += o.x * dO.x + o.y * dO.y;
  }
  dot = cuda_detail::warp_sum(dot);
  if (lane == 0) {
    const int64_t h = row % shape.heads;
    const int64_t t = (row / shape.heads) % shape.seq;
    const int64_t b = row / (int64_t{shape.heads} * shape.seq);
    delta_BHT[(b * shape.heads + h) * shape.seq + t] = dot;
  }
}

// One block = kBackwardWarps warps = a key tile of kBackwardWarps * 16 rows (16 keys a warp) of
// one kv head and batch, for `heads_per_block` query heads of its group; query tiles are 64 rows,
// kStages of them in shared memory (2: the next step's tiles load during this step; 1: they load
// during this step's dQ, which reads only K and dS^T).
// REQUIRES: blockDim.x == 32 * kBackwardWarps; dynamic shared memory backward_shared_bytes<D,
// kBackwardWarps, kStages>(); grid as flash_attention_backward computes it; dq_accum_BTHD
// zeroed, and dk_accum_BTKD, dv_accum_BTKD zeroed when given (null: the block owns the group).
// kMasked: the shape has a window or documents (the causal instantiation leaves the mask's
// bookkeeping out, so its registers stay as they were). kCapped: the shape has a logit soft cap
// (instantiated with kMasked only, as the forward). kPass: what the block computes,
// kAllGradients, or at D = 256, where dK and dV do not both fit the registers, one launch of
// kValueGradient (dV) and one of kKeyAndQueryGradients (dK, dQ), which recompute P. The shape is
// a __grid_constant__ parameter: read in place, never copied to the stack (with the mask's
// pointers in it, the copy cost the causal D = 128 kernels their last registers: ptxas spills).
enum BackwardPass { kAllGradients, kValueGradient, kKeyAndQueryGradients };
template <int D, int kBackwardWarps, int kStages, bool kMasked, bool kCapped, int kPass>
__global__ void __launch_bounds__(kBackwardWarps * 32)
    flash_backward_kernel(const bf16* dout_BTHD, const bf16* q_BTHD, const bf16* k_BTKD,
                          const bf16* v_BTKD, const float* lse_BHT, const float* delta_BHT,
                          float scale, const __grid_constant__ AttentionShape shape,
                          int heads_per_block, float* dq_accum_BTHD, bf16* dk_BTKD, bf16* dv_BTKD,
                          float* dk_accum_BTKD, float* dv_accum_BTKD) {
  static_assert(kBackwardWarps == 4 || kBackwardWarps == 8, "dQ is split over 4 or 8 warps");
  constexpr bool kValue = kPass != kKeyAndQueryGradients;  // dV
  constexpr bool kKey = kPass != kValueGradient;           // dK and dQ (both need dS)
  static_assert(kStages == 1 || kStages == 2, "Q/dO tiles one or two stages deep");
  constexpr int P = pitch<D>();
  constexpr int kDChunks = D / 16;
  constexpr int kKeyRows = kBackwardWarps * 16;
  constexpr int kKeyChunks = kKeyRows / 16;  // k-steps of dQ = dS K: one per warp's keys
  constexpr int kBlockThreads = kBackwardWarps * 32;
  // dQ of a query tile is shared out as 4 row groups (16 queries) x kBackwardWarps / 4 column
  // parts; a warp owns kDqChunks 16-column chunks of the head dim.
  constexpr int kDqChunks = kDChunks * 4 / kBackwardWarps;
  const int seq = shape.seq;
  const int q_tiles = (seq + kTile - 1) / kTile;
  const BackwardBlock block = backward_block(shape, heads_per_block);
  const int kv_tile = block.kv_tile, b = block.batch, kv_head = block.kv_head;
  const int first_head = block.first_head;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t q_token = int64_t{shape.heads} * D, kv_token = int64_t{shape.kv_heads} * D;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  bf16* k_s = reinterpret_cast<bf16*>(shared_bytes);  // [kKeyRows][P]
  bf16* v_s = k_s + kKeyRows * P;                     // [kKeyRows][P]
  bf16* q_s = v_s + kKeyRows * P;                     // [kStages][kTile][P]
  bf16* dout_s = q_s + kStages * kTile * P;           // [kStages][kTile][P]
  bf16* dscores_s = dout_s + kStages * kTile * P;     // dS^T: [kKeyRows keys][kScorePitch]
  float* lse_s = reinterpret_cast<float*>(dscores_s + kKeyRows * kScorePitch);  // [kStages][kTile]
  float* delta_s = lse_s + kStages * kTile;                                     // [kStages][kTile]
  int* key_end_s = reinterpret_cast<int*>(delta_s + kStages * kTile);  // [kKeyRows]: the mask

  const int first_key = kv_tile * kKeyRows;
  const int64_t kv_offset = b * int64_t{seq} * kv_token + int64_t{kv_head} * D;
  load_tile_async<D, kKeyRows, kBlockThreads>(k_s, k_BTKD + kv_offset, kv_token, first_key, seq);
  load_tile_async<D, kKeyRows, kBlockThreads>(v_s, v_BTKD + kv_offset, kv_token, first_key, seq);

  // Query tiles holding a query at or after the first key: from the one that starts there
  // (kKeyRows is a multiple of kTile) to the one holding the last query that sees the last key.
  const int first_q_tile = first_key / kTile;
  const int query_end =
      kMasked ? attention_mask::query_end(shape, b, first_key + kKeyRows - 1) : seq;
  const int tiles_per_head = min(q_tiles, (query_end + kTile - 1) / kTile) - first_q_tile;
  const int steps = heads_per_block * tiles_per_head;
  // Step -> (query head, query tile); stages Q, dO, lse (log2 domain) and delta of that step
  // into `stage`.
  auto load_step = [&](int step, int stage) {
    const int h = first_head + step / tiles_per_head;
    const int first_query = (first_q_tile + step % tiles_per_head) * kTile;
    const int64_t q_offset = b * int64_t{seq} * q_token + int64_t{h} * D;
    load_tile_async<D, kTile, kBlockThreads>(q_s + stage * kTile * P, q_BTHD + q_offset, q_token,
                                             first_query, seq);
    load_tile_async<D, kTile, kBlockThreads>(dout_s + stage * kTile * P, dout_BTHD + q_offset,
                                             q_token, first_query, seq);
    const int64_t stats = (int64_t{b} * shape.heads + h) * seq;
    for (int i = threadIdx.x; i < kTile; i += kBlockThreads) {
      const int query = first_query + i;
      // +inf lse makes every probability of a padding query 0.
      lse_s[stage * kTile + i] = query < seq ? lse_BHT[stats + query] * kLog2e : INFINITY;
      delta_s[stage * kTile + i] = query < seq ? delta_BHT[stats + query] : 0.0f;
    }
  };
  load_step(0, 0);
  cp_async_commit();

  // One past the last query that sees each key of the block, in shared memory (registers are
  // short at D = 128), visible after the first step's barrier.
  for (int i = threadIdx.x; kMasked && i < kKeyRows; i += kBlockThreads) {
    key_end_s[i] = attention_mask::query_end(shape, b, first_key + i);
  }

  const float scale_log2 = scale * kLog2e;
  float dk[kKey ? D / 8 : 1][4], dv[kValue ? D / 8 : 1][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if constexpr (kKey) dk[n][e] = 0;
      if constexpr (kValue) dv[n][e] = 0;
    }
  }

  for (int step = 0; step < steps; ++step) {
    cp_async_wait_all();
    __syncthreads();  // this step's tiles visible; the other stage and dS^T are free
    if (kStages == 2 && step + 1 < steps) {
      load_step(step + 1, (step + 1) & 1);
      cp_async_commit();
    }
    const int stage = kStages == 2 ? step & 1 : 0;
    const int h = first_head + step / tiles_per_head;
    const int first_query = (first_q_tile + step % tiles_per_head) * kTile;
    const bf16* q_tile_s = q_s + stage * kTile * P;
    const bf16* dout_tile_s = dout_s + stage * kTile * P;
    const float* lse_tile = lse_s + stage * kTile;
    const float* delta_tile = delta_s + stage * kTile;

    // This warp's first key counted from the tile's first query (first_query >= first_key).
    // At kTile or more every key follows every query: P^T = dS^T = 0, nothing to add to dK,
    // dV, and the warp only zeroes its dS^T rows for dQ. The branch is warp-uniform and the
    // block's loads and barriers stay outside it.
    const int key_offset = first_key + warp * 16 - first_query;
    if (key_offset >= kTile || (kMasked && first_query >= key_end_s[warp * 16 + 15])) {
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
        const int row = warp * 16 + g, col = n * 8 + 2 * t;
        *reinterpret_cast<uint32_t*>(dscores_s + row * kScorePitch + col) = 0;
        *reinterpret_cast<uint32_t*>(dscores_s + (row + 8) * kScorePitch + col) = 0;
      }
    } else {
      // S^T = K Q^T and dP^T = V dO^T for this warp's 16 keys x 64 queries.
      float s[kTile / 8][4], dp[kTile / 8][4];
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) s[n][e] = dp[n][e] = 0;
      }
#pragma unroll
      for (int kc = 0; kc < kDChunks; ++kc) {
        uint32_t k_frag[4], v_frag[4];
        const int a_offset = (warp * 16 + lane % 16) * P + kc * 16 + (lane / 16) * 8;
        ldmatrix_x4(k_frag, k_s + a_offset);
        if constexpr (kKey) ldmatrix_x4(v_frag, v_s + a_offset);
#pragma unroll
        for (int np = 0; np < kTile / 16; ++np) {
          const int b_offset =
              (np * 16 + lane % 8 + (lane / 16) * 8) * P + kc * 16 + ((lane / 8) % 2) * 8;
          uint32_t qb[4], ob[4];
          ldmatrix_x4(qb, q_tile_s + b_offset);
          mma(s[2 * np], k_frag, qb[0], qb[1]);
          mma(s[2 * np + 1], k_frag, qb[2], qb[3]);
          if constexpr (kKey) {  // dP^T: only dS needs it
            ldmatrix_x4(ob, dout_tile_s + b_offset);
            mma(dp[2 * np], v_frag, ob[0], ob[1]);
            mma(dp[2 * np + 1], v_frag, ob[2], ob[3]);
          }
        }
      }

      // P^T in s, dS^T in dp (rows = keys, columns = queries). Causal mask only where some
      // key of the warp follows some query of the tile.
      // Window / document mask where some query of the tile follows some key's last query.
      const bool straddles = key_offset + 15 > 0;
      const bool beyond = kMasked && first_query + kTile > key_end_s[warp * 16];
      int row_query_end[2] = {seq, seq};  // of keys g and g + 8
      if (beyond) {
        row_query_end[0] = key_end_s[warp * 16 + g];
        row_query_end[1] = key_end_s[warp * 16 + g + 8];
      }
      // Element (n, e)'s query is 2t + c, c = 8n + e % 2 a constant: masked when c < least[r]
      // (before its key r) or c >= end[r] (at or past its key's query end); limits made once a
      // tile, two compares an element.
      int least[2], end[2];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        least[r] = straddles ? key_offset + g + 8 * r - 2 * t : 0;
        end[r] = beyond ? row_query_end[r] - first_query - 2 * t : kTile;
      }
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = n * 8 + e % 2, query = c + 2 * t;
          float p, slope = 1;  // slope: d capped score / d scaled score
          if constexpr (kCapped) {
            const float capped = attention_mask::soft_capped(shape, s[n][e] * scale);
            p = exp2f(capped * kLog2e - lse_tile[query]);
            if constexpr (kKey) slope = attention_mask::soft_cap_slope(shape, capped);
          } else {
            p = exp2f(s[n][e] * scale_log2 - lse_tile[query]);
          }
          if (c < least[e / 2] || c >= end[e / 2]) p = 0;
          s[n][e] = p;
          if constexpr (kKey) dp[n][e] = p * (dp[n][e] - delta_tile[query]) * slope;
        }
      }
      // dS^T to shared memory for dQ, which needs it transposed across warps.
#pragma unroll
      for (int n = 0; n < (kKey ? kTile / 8 : 0); ++n) {
        const int row = warp * 16 + g, col = n * 8 + 2 * t;
        *reinterpret_cast<uint32_t*>(dscores_s + row * kScorePitch + col) =
            pack_bf16(dp[n][0], dp[n][1]);
        *reinterpret_cast<uint32_t*>(dscores_s + (row + 8) * kScorePitch + col) =
            pack_bf16(dp[n][2], dp[n][3]);
      }
      // dV += P^T dO; dK += dS^T Q (scaled at the end).
#pragma unroll
      for (int kc = 0; kc < kTile / 16; ++kc) {
        uint32_t p_frag[4];
        a_fragment_of(s[2 * kc], s[2 * kc + 1], p_frag);
        uint32_t ds_frag[4];
        a_fragment_of(dp[2 * kc], dp[2 * kc + 1], ds_frag);
#pragma unroll
        for (int dpair = 0; dpair < kDChunks; ++dpair) {
          const int b_offset =
              (kc * 16 + lane % 8 + ((lane / 8) % 2) * 8) * P + dpair * 16 + (lane / 16) * 8;
          uint32_t ob[4], qb[4];
          if constexpr (kValue) {
            ldmatrix_x4_trans(ob, dout_tile_s + b_offset);
            mma(dv[2 * dpair], p_frag, ob[0], ob[1]);
            mma(dv[2 * dpair + 1], p_frag, ob[2], ob[3]);
          }
          if constexpr (kKey) {
            ldmatrix_x4_trans(qb, q_tile_s + b_offset);
            mma(dk[2 * dpair], ds_frag, qb[0], qb[1]);
            mma(dk[2 * dpair + 1], ds_frag, qb[2], qb[3]);
          }
        }
      }
    }
    __syncthreads();  // dS^T complete; with one stage, Q/dO/lse/delta are free
    if (kStages == 1 && step + 1 < steps) {
      load_step(step + 1, 0);
      cp_async_commit();
    }

    // dQ (16 queries from dq_row x kDqChunks * 16 columns from dq_chunk * 16) += dS K over
    // all the tile's keys, added once per (key tile, query tile) into the fp32 scratch. (Leaving
    // out the causally zero key chunks costs ptxas spills at D = 128 and saves ~0.3% of the
    // math at T = 4096.) Row groups holding only padding queries add nothing.
    const int dq_row = (warp % 4) * 16, dq_chunk = (warp / 4) * kDqChunks;
    const int query0 = first_query + dq_row + g;
    if (kKey && first_query + dq_row < seq) {
      uint32_t dsq_frag[kKeyChunks][4];
#pragma unroll
      for (int kc = 0; kc < kKeyChunks; ++kc) {
        ldmatrix_x4_trans(dsq_frag[kc], dscores_s +
                                            (kc * 16 + lane % 8 + (lane / 16) * 8) * kScorePitch +
                                            dq_row + ((lane / 8) % 2) * 8);
      }
      float* dq_row0 = dq_accum_BTHD + (b * int64_t{seq} + query0) * q_token + int64_t{h} * D;
      float* dq_row1 = dq_row0 + 8 * q_token;
#pragma unroll
      for (int c = 0; c < kDqChunks; ++c) {
        const int dpair = dq_chunk + c;
        float dq[2][4] = {{0, 0, 0, 0}, {0, 0, 0, 0}};
#pragma unroll
        for (int kc = 0; kc < kKeyChunks; ++kc) {
          uint32_t kb[4];
          ldmatrix_x4_trans(kb, k_s + (kc * 16 + lane % 8 + ((lane / 8) % 2) * 8) * P + dpair * 16 +
                                    (lane / 16) * 8);
          mma(dq[0], dsq_frag[kc], kb[0], kb[1]);
          mma(dq[1], dsq_frag[kc], kb[2], kb[3]);
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int col = dpair * 16 + half * 8 + 2 * t;
          if (query0 < seq)
            cuda_detail::atomic_add_float2(dq_row0 + col, make_float2(dq[half][0], dq[half][1]));
          if (query0 + 8 < seq)
            cuda_detail::atomic_add_float2(dq_row1 + col, make_float2(dq[half][2], dq[half][3]));
        }
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = first_key + warp * 16 + g + r * 8;
    if (key >= seq) continue;
    const int64_t row_offset = kv_offset + int64_t{key} * kv_token;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      const int col = n * 8 + 2 * t;
      if (dk_accum_BTKD != nullptr) {  // shared key tile: unscaled sums, converted afterwards
        if constexpr (kKey) {
          cuda_detail::atomic_add_float2(dk_accum_BTKD + row_offset + col,
                                         make_float2(dk[n][2 * r], dk[n][2 * r + 1]));
        }
        if constexpr (kValue) {
          cuda_detail::atomic_add_float2(dv_accum_BTKD + row_offset + col,
                                         make_float2(dv[n][2 * r], dv[n][2 * r + 1]));
        }
        continue;
      }
      if constexpr (kKey) {
        *reinterpret_cast<__nv_bfloat162*>(dk_BTKD + row_offset + col) =
            __floats2bfloat162_rn(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
      }
      if constexpr (kValue) {
        *reinterpret_cast<__nv_bfloat162*>(dv_BTKD + row_offset + col) =
            __floats2bfloat162_rn(dv[n][2 * r], dv[n][2 * r + 1]);
      }
    }
  }
}

// out = bf16(accum * scale) (dQ, and dK / dV of split groups), 4 elements per thread.
// REQUIRES: count % 4 == 0.
__global__ void flash_accum_convert_kernel(const float* dq_accum, float scale, int64_t count,
                                           bf16* dq) {
  for (int64_t i = 4 * (blockIdx.x * int64_t{blockDim.x} + threadIdx.x); i < count;
       i += 4 * int64_t{gridDim.x} * blockDim.x) {
    const float4 v = *reinterpret_cast<const float4*>(dq_accum + i);
    *reinterpret_cast<__nv_bfloat162*>(dq + i) = __floats2bfloat162_rn(v.x * scale, v.y * scale);
    *reinterpret_cast<__nv_bfloat162*>(dq + i + 2) =
        __floats2bfloat162_rn(v.z * scale, v.w * scale);
  }
}

// Layout as carved in the kernel: K, V (16 rows a warp) + kStages of 64-row Q and dO tiles,
// dS^T (a row per key), kStages of lse and delta, the keys' query ends.
template <int D, int kBackwardWarps, int kStages>
constexpr size_t backward_shared_bytes() {
  constexpr int kKeyRows = kBackwardWarps * 16;
  return sizeof(bf16) *
             ((2 * kKeyRows + 2 * kStages * kTile) * pitch<D>() + kKeyRows * kScorePitch) +
         sizeof(float) * 2 * kStages * kTile + sizeof(int) * kKeyRows;
}
static_assert(backward_shared_bytes<128, 8, 2>() == mma_backward_shared_bytes(128, 8, 2) &&
                  backward_shared_bytes<64, 4, 1>() == mma_backward_shared_bytes(64, 4, 1) &&
                  backward_shared_bytes<256, 4, 1>() == mma_backward_shared_bytes(256, 4, 1),
              "the dispatch table (cuda_dispatch.h) counts the bytes the kernel carves");

size_t delta_floats(const AttentionShape& s) {
  const size_t n = static_cast<size_t>(s.batch) * s.heads * s.seq;
  return (n + 3) / 4 * 4;  // keeps the dq accumulator after it 16-byte aligned
}

}  // namespace

size_t flash_attention_backward_scratch_floats(const AttentionShape& shape) {
  const size_t kv = static_cast<size_t>(shape.batch) * shape.seq * shape.kv_heads * shape.head_dim;
  return delta_floats(shape) +
         static_cast<size_t>(shape.batch) * shape.seq * shape.heads * shape.head_dim + 2 * kv +
         attention_mask_scratch_floats(shape);
}

void flash_attention_backward(const AttentionConfig& config, const void* dout_BTHD,
                              const void* q_BTHD, const void* k_BTKD, const void* v_BTKD,
                              const void* out_BTHD, const float* lse_BHT, float scale,
                              const AttentionShape& call_shape, void* dq_BTHD, void* dk_BTKD,
                              void* dv_BTKD, float* scratch, cudaStream_t stream) {
  if (call_shape.batch == 0 || call_shape.seq == 0 || call_shape.heads == 0) return;
  require_uncapped_on_hopper(config, call_shape);
  AttentionShape shape = call_shape;
  float* delta_BHT = scratch;
  float* dq_accum_BTHD = scratch + delta_floats(shape);
  const int64_t dq_count = int64_t{shape.batch} * shape.seq * shape.heads * shape.head_dim;
  const int64_t kv_count = int64_t{shape.batch} * shape.seq * shape.kv_heads * shape.head_dim;
  float* dk_accum_BTKD = dq_accum_BTHD + dq_count;
  float* dv_accum_BTKD = dk_accum_BTKD + kv_count;
  if (shape.document_start_BT != nullptr) {  // the key-major loops read each key's document end
    auto* ends = reinterpret_cast<int32_t*>(dv_accum_BTKD + kv_count);
    attention_document_ends(shape.document_start_BT, shape.batch, shape.seq, ends, stream);
    shape.document_end_BT = ends;
  }
  // The wgmma kernels work on 128-key tiles, as the 8-warp mma.sync kernel does.
  const bool ws = config.kernel == AttentionKernel::kWgmmaWs;
  const bool wgmma = config.kernel == AttentionKernel::kWgmma || ws;
  const int warps = wgmma ? kDefaultBackwardWarps : config.warps;
  const int key_rows = warps * 16;
  const int key_tiles = (shape.seq + key_rows - 1) / key_rows;
  const int heads_per_block = attention_backward_heads_per_block(shape, key_tiles, warps);
  const bool split = heads_per_block < shape.heads / shape.kv_heads;
  // dQ and (when split) dK, dV accumulate in fp32; the three are adjacent in the scratch.
  const int64_t accum_count = dq_count + (split ? 2 * kv_count : 0);
  SHARDTRAIN_CUDA_CHECK(
      cudaMemsetAsync(dq_accum_BTHD, 0, static_cast<size_t>(accum_count) * sizeof(float), stream));
  const bool capped = shape.logit_softcap > 0;
  const bool masked = !attention_mask::causal_only(shape);
  dispatch_mma_head_dim(shape.head_dim, [&](auto head_dim) {
    constexpr int D = decltype(head_dim)::value;
    const int64_t rows = int64_t{shape.batch} * shape.seq * shape.heads;
    constexpr int kDeltaThreads = 256;
    const unsigned delta_blocks =
        static_cast<unsigned>((rows * 32 + kDeltaThreads - 1) / kDeltaThreads);
    flash_delta_kernel<D><<<delta_blocks, kDeltaThreads, 0, stream>>>(
        static_cast<const bf16*>(dout_BTHD), static_cast<const bf16*>(out_BTHD), shape, delta_BHT);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();

    const int slices = shape.heads / shape.kv_heads / heads_per_block;
    const unsigned blocks = static_cast<unsigned>(key_tiles) *
                            static_cast<unsigned>(shape.kv_heads * slices * shape.batch);
    const auto launch_pass = [&](auto warps_constant, auto stages_constant, auto pass_constant) {
      constexpr int kBackwardWarps = decltype(warps_constant)::value;
      constexpr int kStages = decltype(stages_constant)::value;
      constexpr int kPass = decltype(pass_constant)::value;
      const auto run = [&](auto kernel) {
        constexpr size_t bytes = backward_shared_bytes<D, kBackwardWarps, kStages>();
        allow_shared(kernel, bytes, "flash_backward_kernel (mma.sync)");
        kernel<<<blocks, kBackwardWarps * 32, bytes, stream>>>(
            static_cast<const bf16*>(dout_BTHD), static_cast<const bf16*>(q_BTHD),
            static_cast<const bf16*>(k_BTKD), static_cast<const bf16*>(v_BTKD), lse_BHT, delta_BHT,
            scale, shape, heads_per_block, dq_accum_BTHD, static_cast<bf16*>(dk_BTKD),
            static_cast<bf16*>(dv_BTKD), split ? dk_accum_BTKD : nullptr,
            split ? dv_accum_BTKD : nullptr);
        SHARDTRAIN_CUDA_CHECK_LAUNCH();
      };
      if (capped) {
        run(flash_backward_kernel<D, kBackwardWarps, kStages, true, true, kPass>);
      } else if (masked) {
        run(flash_backward_kernel<D, kBackwardWarps, kStages, true, false, kPass>);
      } else {
        run(flash_backward_kernel<D, kBackwardWarps, kStages, false, false, kPass>);
      }
    };
    const auto launch = [&](auto warps_constant, auto stages_constant) {
      if constexpr (D > 128) {  // dV, then dK and dQ: both accumulators do not fit registers
        launch_pass(warps_constant, stages_constant, std::integral_constant<int, kValueGradient>{});
        launch_pass(warps_constant, stages_constant,
                    std::integral_constant<int, kKeyAndQueryGradients>{});
      } else {
        launch_pass(warps_constant, stages_constant, std::integral_constant<int, kAllGradients>{});
      }
    };
    const auto launch_ws = [&] {
      return ws_attention_backward(
          static_cast<const bf16*>(dout_BTHD), static_cast<const bf16*>(q_BTHD),
          static_cast<const bf16*>(k_BTKD), static_cast<const bf16*>(v_BTKD), lse_BHT, delta_BHT,
          scale, shape, heads_per_block, blocks, dq_accum_BTHD, static_cast<bf16*>(dk_BTKD),
          static_cast<bf16*>(dv_BTKD), split ? dk_accum_BTKD : nullptr,
          split ? dv_accum_BTKD : nullptr, stream);
    };
    if constexpr (D > 128) {  // mma.sync, 4 warps: the table's only rows at D = 256
      if (config.stages == 1) {
        launch(std::integral_constant<int, 4>{}, std::integral_constant<int, 1>{});
      } else {
        launch(std::integral_constant<int, 4>{}, std::integral_constant<int, 2>{});
      }
    } else if (ws && launch_ws()) {
      // the warp-specialised kernel ran
    } else if (wgmma) {
      wgmma_attention_backward(static_cast<const bf16*>(dout_BTHD),
                               static_cast<const bf16*>(q_BTHD), static_cast<const bf16*>(k_BTKD),
                               static_cast<const bf16*>(v_BTKD), lse_BHT, delta_BHT, scale, shape,
                               heads_per_block, blocks, dq_accum_BTHD, static_cast<bf16*>(dk_BTKD),
                               static_cast<bf16*>(dv_BTKD), split ? dk_accum_BTKD : nullptr,
                               split ? dv_accum_BTKD : nullptr, stream);
    } else if (warps == 4 && config.stages == 1) {
      launch(std::integral_constant<int, 4>{}, std::integral_constant<int, 1>{});
    } else if (warps == 4) {
      launch(std::integral_constant<int, 4>{}, std::integral_constant<int, 2>{});
    } else {
      launch(std::integral_constant<int, kDefaultBackwardWarps>{},
             std::integral_constant<int, 2>{});
    }

    constexpr int kConvertThreads = 256;
    const auto convert = [&](const float* accum, float factor, int64_t count, void* out) {
      flash_accum_convert_kernel<<<cuda_detail::grid_for(count / 4, kConvertThreads),
                                   kConvertThreads, 0, stream>>>(accum, factor, count,
                                                                 static_cast<bf16*>(out));
      SHARDTRAIN_CUDA_CHECK_LAUNCH();
    };
    convert(dq_accum_BTHD, scale, dq_count, dq_BTHD);
    if (split) {
      convert(dk_accum_BTKD, scale, kv_count, dk_BTKD);
      convert(dv_accum_BTKD, 1.0f, kv_count, dv_BTKD);
    }
  });
}

}  // namespace shardtrain::cuda_kernels
