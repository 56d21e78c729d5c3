// Causal grouped-query flash attention forward on the tensor cores (bf16, head dims 64 and
// 128); the structure and fragment layouts are described in cuda_attention_tc.cuh.
//   forward   block = (query tile, head, batch) of 8 warps and 128 query rows, or 4 warps and 64
//             rows (the warps come from the dispatch table, cuda_dispatch.h), heaviest query
//             tiles first; K/V tiles 0 .. the one holding the tile's last row; online softmax in
//             fp32 registers in the log2 domain (exp2 of pre-scaled scores); only K/V tiles that
//             straddle a warp's rows are masked, and a warp skips the math of tiles entirely
//             after its rows (it still loads and synchronises with the block).
//   mask      (cuda_attention_mask.cuh) K/V tiles start at the one holding the first key of the
//             tile's first row (a window or document start skips every tile before it); rows are
//             masked below their first key only in tiles that reach below some row's first key,
//             and a warp skips the math of tiles wholly below its rows' first keys.
//   soft cap  (Gemma's attn_logit_softcapping) each scaled score x becomes cap * tanh(x / cap)
//             before the mask and the online softmax (attention_mask::soft_capped); a separate
//             instantiation, so the uncapped kernels stay as they were.
#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "ops/cuda/cuda_attention_mask.cuh"
#include "ops/cuda/cuda_attention_tc.cuh"
#include "ops/cuda/cuda_dispatch.h"

namespace shardtrain::cuda_kernels {
namespace {

using namespace flash;  // NOLINT: the kernel helpers of cuda_attention_tc.cuh

// ---- forward ----

// Blocks per SM the forward is compiled for (__launch_bounds__). D = 64 fits 16 warps per SM
// (128 registers a thread, no spills). D = 128 needs ~200 registers (the fp32 output
// accumulators alone take 64; at 128 ptxas spills 344 bytes), so the 64 K registers of an SM hold
// one 8-warp block or two 4-warp blocks: 8 warps per SM either way.
template <int D, int kForwardWarps>
constexpr int forward_min_blocks() {
  return D == 64 ? 16 / kForwardWarps : 8 / kForwardWarps;
}

// Keys of a K/V tile: 64, or 32 at D = 256 (two stages of 64 would not fit an A100's shared
// memory, and the scores' registers go to the output accumulators).
template <int D>
constexpr int forward_keys() {
  return D > 128 ? 32 : kTile;
}

// One block = kForwardWarps warps = a query tile of 16 * kForwardWarps rows of one head.
// kMasked: the shape has a window or documents (attention_mask::causal_only is false); the causal
// instantiation leaves the mask's bookkeeping out, so its registers stay as they were. kCapped:
// the shape has a logit soft cap (instantiated with kMasked only: a capped causal shape runs the
// masked kernel, whose bounds reduce to the causal ones). The shape is a __grid_constant__
// parameter (read in place, not copied: fewer registers at D = 64).
// REQUIRES: blockDim.x == 32 * kForwardWarps; dynamic shared memory forward_shared_bytes<D,
// kForwardWarps>(); grid (query tiles, heads, batch).
template <int D, int kForwardWarps, bool kMasked, bool kCapped>
__global__ void __launch_bounds__(kForwardWarps * 32, forward_min_blocks<D, kForwardWarps>())
    flash_forward_kernel(const bf16* q_BTHD, const bf16* k_BTKD, const bf16* v_BTKD, float scale,
                         const __grid_constant__ AttentionShape shape, bf16* out_BTHD,
                         float* lse_BHT) {
  constexpr int kKeys = forward_keys<D>();
  // Q fragments stay in registers across K/V tiles up to D = 128; at 256 (64 registers) they are
  // read from shared memory for each tile.
  constexpr bool kQInRegisters = D <= 128;
  constexpr int P = pitch<D>();
  constexpr int kDChunks = D / 16;  // k-steps over the head dim
  constexpr int kQueryRows = kForwardWarps * 16;
  constexpr int kBlockThreads = kForwardWarps * 32;
  const int seq = shape.seq;
  const int q_tile = gridDim.x - 1 - blockIdx.x;  // heaviest (longest causal row) first
  const int h = blockIdx.y, b = blockIdx.z;
  const int kv_head = h / (shape.heads / shape.kv_heads);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t q_token = int64_t{shape.heads} * D, kv_token = int64_t{shape.kv_heads} * D;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  bf16* q_s = reinterpret_cast<bf16*>(shared_bytes);  // [kQueryRows][P]
  bf16* k_s = q_s + kQueryRows * P;                   // [2][kKeys][P]
  bf16* v_s = k_s + 2 * kKeys * P;                    // [2][kKeys][P]

  const bf16* q_base = q_BTHD + b * int64_t{seq} * q_token + int64_t{h} * D;
  const bf16* k_base = k_BTKD + b * int64_t{seq} * kv_token + int64_t{kv_head} * D;
  const bf16* v_base = v_BTKD + b * int64_t{seq} * kv_token + int64_t{kv_head} * D;
  const int first_query = q_tile * kQueryRows;
  const int warp_first_query = first_query + warp * 16;
  // Causal: K/V tiles up to the one holding the tile's last real query row; from the one holding
  // the first key of the tile's first row (the rows' first keys never decrease).
  const int last_kv_tile = (min(first_query + kQueryRows, seq) - 1) / kKeys;
  const int first_kv_tile = kMasked ? attention_mask::first_key(shape, b, first_query) / kKeys : 0;
  load_tile_async<D, kQueryRows, kBlockThreads>(q_s, q_base, q_token, first_query, seq);
  // Tile j lives in buffer j & 1, the first one included.
  const int first_buffer = first_kv_tile & 1;
  load_tile_async<D, kKeys, kBlockThreads>(k_s + first_buffer * kKeys * P, k_base, kv_token,
                                           first_kv_tile * kKeys, seq);
  load_tile_async<D, kKeys, kBlockThreads>(v_s + first_buffer * kKeys * P, v_base, kv_token,
                                           first_kv_tile * kKeys, seq);
  cp_async_commit();
  // First keys counted from the warp's first row: the least and the greatest of its 16 rows
  // (those of this thread's rows are read in the tiles that need them: registers are short).
  const int warp_least_first =
      kMasked ? attention_mask::first_key(shape, b, warp_first_query) - warp_first_query : 0;
  const int warp_greatest_first =
      kMasked ? attention_mask::first_key(shape, b, warp_first_query + 15) - warp_first_query : 0;

  const float scale_log2 = scale * kLog2e;
  uint32_t q_frag[kQInRegisters ? kDChunks : 1][4];
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0, 0};  // rows g and g + 8

  for (int kv_tile = first_kv_tile; kv_tile <= last_kv_tile; ++kv_tile) {
    cp_async_wait_all();
    __syncthreads();  // tile kv_tile visible; everyone is done with the other buffer
    if (kv_tile < last_kv_tile) {
      const int next = (kv_tile + 1) & 1;
      const int next_key = (kv_tile + 1) * kKeys;
      load_tile_async<D, kKeys, kBlockThreads>(k_s + next * kKeys * P, k_base, kv_token, next_key,
                                               seq);
      load_tile_async<D, kKeys, kBlockThreads>(v_s + next * kKeys * P, v_base, kv_token, next_key,
                                               seq);
      cp_async_commit();
    }
    if (kQInRegisters && kv_tile == first_kv_tile) {
#pragma unroll
      for (int kc = 0; kc < (kQInRegisters ? kDChunks : 0); ++kc) {
        ldmatrix_x4(q_frag[kc], q_s + (warp * 16 + lane % 16) * P + kc * 16 + (lane / 16) * 8);
      }
    }
    // Keys counted from this warp's first row. Every key after every row of the warp, or before
    // every row's first key: nothing to add. The branch is warp-uniform and comes after the
    // block's loads and barrier, so the warp still takes its part in both.
    const int key_offset = kv_tile * kKeys - warp_first_query;
    if (key_offset > 15 || (kMasked && key_offset + kKeys <= warp_least_first)) continue;
    const bf16* k_tile = k_s + (kv_tile & 1) * kKeys * P;
    const bf16* v_tile = v_s + (kv_tile & 1) * kKeys * P;

    float s[kKeys / 8][4];
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
    // S = Q K^T: this warp's 16 rows x the tile's keys.
    const auto scores_of = [&](int kc, const uint32_t(&q_k)[4]) {
#pragma unroll
      for (int np = 0; np < kKeys / 16; ++np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, k_tile + (np * 16 + lane % 8 + (lane / 16) * 8) * P + kc * 16 +
                            ((lane / 8) % 2) * 8);
        mma(s[2 * np], q_k, kb[0], kb[1]);
        mma(s[2 * np + 1], q_k, kb[2], kb[3]);
      }
    };
#pragma unroll
    for (int kc = 0; kc < kDChunks; ++kc) {
      if constexpr (kQInRegisters) {
        scores_of(kc, q_frag[kc]);
      } else {
        uint32_t q_k[4];
        ldmatrix_x4(q_k, q_s + (warp * 16 + lane % 16) * P + kc * 16 + (lane / 16) * 8);
        scores_of(kc, q_k);
      }
    }

    const bool straddles = key_offset + kKeys - 1 > 0;  // some key after some row: mask
    const bool below = kMasked && key_offset < warp_greatest_first;  // a key before a row's first
    int row_first[2] = {0, 0};  // of rows g and g + 8, from the warp's first row
    if (below) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        row_first[r] =
            attention_mask::first_key(shape, b, warp_first_query + g + 8 * r) - warp_first_query;
      }
    }
    // Element (n, e)'s key is key_offset + 2t + c, c = 8n + e % 2 a constant: masked when c >
    // last[r] (after its row r) or c < first[r] (before its row's first key). Two compares an
    // element against limits made once a tile (the flags tested per element cost ~8).
    int first[2], last[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      last[r] = straddles ? g + 8 * r - key_offset - 2 * t : kKeys;
      first[r] = below ? row_first[r] - key_offset - 2 * t : 0;
    }
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = n * 8 + e % 2;
        float x = kCapped ? attention_mask::soft_capped(shape, s[n][e] * scale) * kLog2e
                          : s[n][e] * scale_log2;
        if (c > last[e / 2] || c < first[e / 2]) x = -INFINITY;
        s[n][e] = x;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
      }
    }
    float correction[2], exp_base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      // A row may have seen no key yet (its first key lies in a later tile): its max stays -inf
      // and exp2 takes base 0, so its P and correction are 0, not NaN.
      const float new_max = fmaxf(row_max[r], tile_max[r]);
      exp_base[r] = kMasked && new_max == -INFINITY ? 0.0f : new_max;
      correction[r] = exp2f(row_max[r] - exp_base[r]);
      row_max[r] = new_max;
      row_sum[r] *= correction[r];
    }
#pragma unroll
    for (int n = 0; n < kKeys / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - exp_base[e / 2]);
        row_sum[e / 2] += s[n][e];
      }
    }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      acc[n][0] *= correction[0];
      acc[n][1] *= correction[0];
      acc[n][2] *= correction[1];
      acc[n][3] *= correction[1];
    }
#pragma unroll
    for (int kc = 0; kc < kKeys / 16; ++kc) {
      uint32_t p_frag[4];
      a_fragment_of(s[2 * kc], s[2 * kc + 1], p_frag);
#pragma unroll
      for (int dp = 0; dp < kDChunks; ++dp) {
        uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_tile + (kc * 16 + lane % 8 + ((lane / 8) % 2) * 8) * P + dp * 16 +
                                  (lane / 16) * 8);
        mma(acc[2 * dp], p_frag, vb[0], vb[1]);
        mma(acc[2 * dp + 1], p_frag, vb[2], vb[3]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    const int query = warp_first_query + g + r * 8;
    if (query >= seq) continue;
    const float inverse_sum = 1.0f / row_sum[r];
    bf16* out_row = out_BTHD + (b * int64_t{seq} + query) * q_token + int64_t{h} * D;
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<__nv_bfloat162*>(out_row + n * 8 + 2 * t) =
          __floats2bfloat162_rn(acc[n][2 * r] * inverse_sum, acc[n][2 * r + 1] * inverse_sum);
    }
    if (t == 0) {
      lse_BHT[(int64_t{b} * shape.heads + h) * seq + query] =
          (row_max[r] + log2f(row_sum[r])) * kLn2;
    }
  }
}

// Layout as carved in the kernel: Q (16 rows a warp) + 2 stages of K and V tiles.
template <int D, int kForwardWarps>
constexpr size_t forward_shared_bytes() {
  return sizeof(bf16) * (kForwardWarps * 16 + 4 * forward_keys<D>()) * pitch<D>();
}
static_assert(forward_shared_bytes<128, 8>() == mma_forward_shared_bytes(128, 8) &&
                  forward_shared_bytes<64, 4>() == mma_forward_shared_bytes(64, 4) &&
                  forward_shared_bytes<256, 4>() == mma_forward_shared_bytes(256, 4),
              "the dispatch table (cuda_dispatch.h) counts the bytes the kernel carves");

}  // namespace

void flash_attention_forward(const AttentionConfig& config, const void* q_BTHD, const void* k_BTKD,
                             const void* v_BTKD, float scale, const AttentionShape& shape,
                             void* out_BTHD, float* lse_BHT, cudaStream_t stream) {
  if (shape.batch == 0 || shape.seq == 0 || shape.heads == 0) return;
  require_uncapped_on_hopper(config, shape);
  if (config.kernel == AttentionKernel::kWgmmaWs &&
      ws_attention_forward(static_cast<const bf16*>(q_BTHD), static_cast<const bf16*>(k_BTKD),
                           static_cast<const bf16*>(v_BTKD), scale, shape,
                           static_cast<bf16*>(out_BTHD), lse_BHT, stream)) {
    return;
  }
  if (config.kernel == AttentionKernel::kWgmma || config.kernel == AttentionKernel::kWgmmaWs) {
    wgmma_attention_forward(static_cast<const bf16*>(q_BTHD), static_cast<const bf16*>(k_BTKD),
                            static_cast<const bf16*>(v_BTKD), scale, shape,
                            static_cast<bf16*>(out_BTHD), lse_BHT, stream);
    return;
  }
  const int warps = config.warps;
  const bool capped = shape.logit_softcap > 0;
  const bool masked = !attention_mask::causal_only(shape);
  dispatch_mma_head_dim(shape.head_dim, [&](auto head_dim) {
    constexpr int D = decltype(head_dim)::value;
    const auto launch = [&](auto warps_constant, auto masked_constant, auto capped_constant) {
      constexpr int kForwardWarps = decltype(warps_constant)::value;
      constexpr int kQueryRows = kForwardWarps * 16;
      auto kernel = flash_forward_kernel<D, kForwardWarps, decltype(masked_constant)::value,
                                         decltype(capped_constant)::value>;
      constexpr size_t bytes = forward_shared_bytes<D, kForwardWarps>();
      allow_shared(kernel, bytes, "flash_forward_kernel (mma.sync)");
      const dim3 grid(static_cast<unsigned>((shape.seq + kQueryRows - 1) / kQueryRows),
                      static_cast<unsigned>(shape.heads), static_cast<unsigned>(shape.batch));
      kernel<<<grid, kForwardWarps * 32, bytes, stream>>>(
          static_cast<const bf16*>(q_BTHD), static_cast<const bf16*>(k_BTKD),
          static_cast<const bf16*>(v_BTKD), scale, shape, static_cast<bf16*>(out_BTHD), lse_BHT);
      SHARDTRAIN_CUDA_CHECK_LAUNCH();
    };
    const auto launch_masked = [&](auto warps_constant) {
      if (capped) {
        launch(warps_constant, std::true_type{}, std::true_type{});
      } else if (masked) {
        launch(warps_constant, std::true_type{}, std::false_type{});
      } else {
        launch(warps_constant, std::false_type{}, std::false_type{});
      }
    };
    if constexpr (D > 128) {
      launch_masked(std::integral_constant<int, 4>{});  // the table's only row at D = 256
    } else if (warps == 4) {
      launch_masked(std::integral_constant<int, 4>{});
    } else {
      launch_masked(std::integral_constant<int, kDefaultForwardWarps>{});
    }
  });
}

}  // namespace shardtrain::cuda_kernels
