// Causal grouped-query flash attention on the tensor cores, bf16 in and out, head dims 64 and 128
// (the SIMT kernels of cuda_attention.cu handle every other case). FlashAttention-2 structure
// with warp-level `mma.sync.m16n8k16` (bf16 operands, fp32 accumulators) fed by `ldmatrix`;
// tiles stream through shared memory with `cp.async`, two stages deep.
//
// Each warp owns 16 query (forward) or key (backward) rows; the tiles streamed past them are 64
// rows (K/V forward, Q/dO backward). Shared rows are padded by 16 bytes (pitch D + 8) so the 8
// row addresses of one ldmatrix hit distinct banks.
//   forward   block = (query tile, head, batch) of 8 warps and 128 query rows (4 warps and 64
//             rows under the test hook SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS=4), heaviest query
//             tiles first; K/V tiles 0 .. the one holding the tile's last row; online softmax in
//             fp32 registers in the log2 domain (exp2 of pre-scaled scores); only K/V tiles that
//             straddle a warp's rows are masked, and a warp skips the math of tiles entirely
//             after its rows (it still loads and synchronises with the block).
//   backward  delta = rowsum(dO * O) first. Then block = (key tile, kv head, batch[, slice of
//             the GQA group]) of 8 warps and 128 keys (4 warps and 64 keys under the test hook
//             SHARDTRAIN_TEST_ATTENTION_BACKWARD_WARPS=4), heaviest key tiles first, looping over
//             the group's query heads and the 64-row query tiles holding a query at or after the
//             first key: S^T = K Q^T, P^T = exp2(S^T - lse), dP^T = V dO^T,
//             dS^T = P^T (dP^T - delta); dV += P^T dO and dK += dS^T Q stay in registers and are
//             written once (fp32 atomics only when the group is split over blocks); a warp whose
//             keys all follow the query tile skips that math. dQ += dS K goes through shared
//             memory (dS^T), is shared out over all warps (16 queries x D / 2 columns each with
//             8) and added once per (key tile, query tile) with fp32 atomics into a scratch
//             buffer that a last kernel scales to bf16.
// Fragment layouts (PTX ISA, mma.m16n8k16): g = lane / 4, t = lane % 4; A regs hold
// (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B regs (k 2t..2t+1, n g), (k 2t+8.., n
// g); C holds (g, 2t..2t+1), (g+8, 2t..2t+1). So two adjacent C tiles of scores, rounded to bf16,
// are exactly the A fragment of the next product (P V), with no trip through shared memory.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::bf16;

constexpr int kTile = 64;  // rows of a key/value tile (forward), of a query tile (backward)
constexpr int kDefaultForwardWarps = 8;   // forward block: 128 query rows
constexpr int kDefaultBackwardWarps = 8;  // backward block: 128 key rows
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D>
__host__ __device__ constexpr int pitch() {
  return D + 8;  // bf16 elements per shared row: 16 bytes of padding
}
constexpr int kScorePitch = kTile + 8;

// ---- PTX wrappers ----

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const bf16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// c += a b (16x16 bf16 times 16x8 bf16, fp32 accumulate).
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16-byte global -> shared copy; zero-fills the destination when !valid.
__device__ __forceinline__ void cp_async_16(bf16* dst, const bf16* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)),
               "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ uint32_t pack_bf16(float low, float high) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(low, high);  // .x (low half) = low
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Rows [first, first + kRows) of one head (row stride `token_stride` elements) into a shared
// tile of pitch<D>(); rows at or past `seq` become zeros. Asynchronous: commit and wait.
// REQUIRES: called by all kBlockThreads threads of the block.
template <int D, int kRows, int kBlockThreads>
__device__ __forceinline__ void load_tile_async(bf16* tile, const bf16* head_base,
                                                int64_t token_stride, int first, int seq) {
  constexpr int kChunksPerRow = D / 8;
  for (int index = threadIdx.x; index < kRows * kChunksPerRow; index += kBlockThreads) {
    const int row = index / kChunksPerRow, chunk = index % kChunksPerRow;
    const int t = first + row;
    const bool valid = t < seq;
    const bf16* src = head_base + (valid ? int64_t{t} * token_stride + chunk * 8 : 0);
    cp_async_16(tile + row * pitch<D>() + chunk * 8, src, valid);
  }
}

// ---- forward ----

// Blocks per SM the forward is compiled for (__launch_bounds__). D = 64 fits 16 warps per SM
// (128 registers a thread, no spills). D = 128 needs ~200 registers (the fp32 output
// accumulators alone take 64; at 128 ptxas spills 344 bytes), so the 64 K registers of an SM hold
// one 8-warp block or two 4-warp blocks: 8 warps per SM either way.
template <int D, int kForwardWarps>
constexpr int forward_min_blocks() {
  return D == 64 ? 16 / kForwardWarps : 8 / kForwardWarps;
}

// One block = kForwardWarps warps = a query tile of 16 * kForwardWarps rows of one head.
// REQUIRES: blockDim.x == 32 * kForwardWarps; dynamic shared memory forward_shared_bytes<D,
// kForwardWarps>(); grid (query tiles, heads, batch).
template <int D, int kForwardWarps>
__global__ void __launch_bounds__(kForwardWarps * 32, forward_min_blocks<D, kForwardWarps>())
    flash_forward_kernel(const bf16* q_BTHD, const bf16* k_BTKD, const bf16* v_BTKD, float scale,
                         AttentionShape shape, bf16* out_BTHD, float* lse_BHT) {
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
  bf16* k_s = q_s + kQueryRows * P;                   // [2][kTile][P]
  bf16* v_s = k_s + 2 * kTile * P;                    // [2][kTile][P]

  const bf16* q_base = q_BTHD + b * int64_t{seq} * q_token + int64_t{h} * D;
  const bf16* k_base = k_BTKD + b * int64_t{seq} * kv_token + int64_t{kv_head} * D;
  const bf16* v_base = v_BTKD + b * int64_t{seq} * kv_token + int64_t{kv_head} * D;
  const int first_query = q_tile * kQueryRows;
  const int warp_first_query = first_query + warp * 16;
  // Causal: K/V tiles up to the one holding the tile's last real query row.
  const int last_kv_tile = (min(first_query + kQueryRows, seq) - 1) / kTile;
  load_tile_async<D, kQueryRows, kBlockThreads>(q_s, q_base, q_token, first_query, seq);
  load_tile_async<D, kTile, kBlockThreads>(k_s, k_base, kv_token, 0, seq);
  load_tile_async<D, kTile, kBlockThreads>(v_s, v_base, kv_token, 0, seq);
  cp_async_commit();

  const float scale_log2 = scale * kLog2e;
  uint32_t q_frag[kDChunks][4];
  float acc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0, 0};  // rows g and g + 8

  for (int kv_tile = 0; kv_tile <= last_kv_tile; ++kv_tile) {
    cp_async_wait_all();
    __syncthreads();  // tile kv_tile visible; everyone is done with the other buffer
    if (kv_tile < last_kv_tile) {
      const int next = (kv_tile + 1) & 1;
      const int next_key = (kv_tile + 1) * kTile;
      load_tile_async<D, kTile, kBlockThreads>(k_s + next * kTile * P, k_base, kv_token, next_key,
                                               seq);
      load_tile_async<D, kTile, kBlockThreads>(v_s + next * kTile * P, v_base, kv_token, next_key,
                                               seq);
      cp_async_commit();
    }
    if (kv_tile == 0) {
#pragma unroll
      for (int kc = 0; kc < kDChunks; ++kc) {
        ldmatrix_x4(q_frag[kc], q_s + (warp * 16 + lane % 16) * P + kc * 16 + (lane / 16) * 8);
      }
    }
    // Keys counted from this warp's first row. Every key after every row of the warp (never
    // tile 0): nothing to add. The branch is warp-uniform and comes after the block's loads and
    // barrier, so the warp still takes its part in both.
    const int key_offset = kv_tile * kTile - warp_first_query;
    if (key_offset > 15) continue;
    const bf16* k_tile = k_s + (kv_tile & 1) * kTile * P;
    const bf16* v_tile = v_s + (kv_tile & 1) * kTile * P;

    float s[kTile / 8][4];
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0;
#pragma unroll
    for (int kc = 0; kc < kDChunks; ++kc) {
#pragma unroll
      for (int np = 0; np < kTile / 16; ++np) {
        uint32_t kb[4];
        ldmatrix_x4(kb, k_tile + (np * 16 + lane % 8 + (lane / 16) * 8) * P + kc * 16 +
                            ((lane / 8) % 2) * 8);
        mma(s[2 * np], q_frag[kc], kb[0], kb[1]);
        mma(s[2 * np + 1], q_frag[kc], kb[2], kb[3]);
      }
    }

    const bool straddles = key_offset + kTile - 1 > 0;  // some key after some row: mask
    float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int row = g + (e / 2) * 8, key = key_offset + n * 8 + 2 * t + e % 2;
        float x = s[n][e] * scale_log2;
        if (straddles && key > row) x = -INFINITY;
        s[n][e] = x;
        tile_max[e / 2] = fmaxf(tile_max[e / 2], x);
      }
    }
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      // Key 0 of tile 0 is visible to every row, so the running max is finite from then on.
      const float new_max = fmaxf(row_max[r], tile_max[r]);
      correction[r] = exp2f(row_max[r] - new_max);
      row_max[r] = new_max;
      row_sum[r] *= correction[r];
    }
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - row_max[e / 2]);
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
    for (int kc = 0; kc < kTile / 16; ++kc) {
      const uint32_t p_frag[4] = {pack_bf16(s[2 * kc][0], s[2 * kc][1]),
                                  pack_bf16(s[2 * kc][2], s[2 * kc][3]),
                                  pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                  pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3])};
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
// one kv head and batch, for `heads_per_block` query heads of its group; query tiles are 64 rows.
// REQUIRES: blockDim.x == 32 * kBackwardWarps; dynamic shared memory backward_shared_bytes<D,
// kBackwardWarps>(); grid as flash_attention_backward computes it; dq_accum_BTHD zeroed, and
// dk_accum_BTKD, dv_accum_BTKD zeroed when given (null: the block owns the whole group).
template <int D, int kBackwardWarps>
__global__ void __launch_bounds__(kBackwardWarps * 32)
    flash_backward_kernel(const bf16* dout_BTHD, const bf16* q_BTHD, const bf16* k_BTKD,
                          const bf16* v_BTKD, const float* lse_BHT, const float* delta_BHT,
                          float scale, AttentionShape shape, int heads_per_block,
                          float* dq_accum_BTHD, bf16* dk_BTKD, bf16* dv_BTKD, float* dk_accum_BTKD,
                          float* dv_accum_BTKD) {
  static_assert(kBackwardWarps == 4 || kBackwardWarps == 8, "dQ is split over 4 or 8 warps");
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
  // Block index -> (key tile, kv head, slice of its query-head group, batch) with the heaviest
  // key tiles (most query tiles after them) dispatched first. A block walks `heads_per_block`
  // query heads of the group; when that is not the whole group, several blocks share a key
  // tile and add their dK, dV into fp32 accumulators instead of storing them.
  const int group = shape.heads / shape.kv_heads;
  const int slices = group / heads_per_block;
  const int units = shape.kv_heads * slices;
  const int heads_and_batches = units * shape.batch;
  const int kv_tile = blockIdx.x / heads_and_batches;
  const int unit = blockIdx.x % heads_and_batches % units;
  const int b = blockIdx.x % heads_and_batches / units;
  const int kv_head = unit / slices;
  const int first_head = kv_head * group + (unit % slices) * heads_per_block;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t q_token = int64_t{shape.heads} * D, kv_token = int64_t{shape.kv_heads} * D;

  extern __shared__ __align__(16) unsigned char shared_bytes[];
  bf16* k_s = reinterpret_cast<bf16*>(shared_bytes);  // [kKeyRows][P]
  bf16* v_s = k_s + kKeyRows * P;                     // [kKeyRows][P]
  bf16* q_s = v_s + kKeyRows * P;                     // [2][kTile][P]
  bf16* dout_s = q_s + 2 * kTile * P;                 // [2][kTile][P]
  bf16* dscores_s = dout_s + 2 * kTile * P;           // dS^T: [kKeyRows keys][kScorePitch]
  float* lse_s = reinterpret_cast<float*>(dscores_s + kKeyRows * kScorePitch);  // [2][kTile]
  float* delta_s = lse_s + 2 * kTile;                                           // [2][kTile]

  const int first_key = kv_tile * kKeyRows;
  const int64_t kv_offset = b * int64_t{seq} * kv_token + int64_t{kv_head} * D;
  load_tile_async<D, kKeyRows, kBlockThreads>(k_s, k_BTKD + kv_offset, kv_token, first_key, seq);
  load_tile_async<D, kKeyRows, kBlockThreads>(v_s, v_BTKD + kv_offset, kv_token, first_key, seq);

  // Query tiles holding a query at or after the first key: from the one that starts there
  // (kKeyRows is a multiple of kTile) to the last.
  const int first_q_tile = first_key / kTile;
  const int tiles_per_head = q_tiles - first_q_tile;
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

  const float scale_log2 = scale * kLog2e;
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0;
  }

  for (int step = 0; step < steps; ++step) {
    cp_async_wait_all();
    __syncthreads();  // this step's tiles visible; the other stage and dS^T are free
    if (step + 1 < steps) {
      load_step(step + 1, (step + 1) & 1);
      cp_async_commit();
    }
    const int stage = step & 1;
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
    if (key_offset >= kTile) {
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
        ldmatrix_x4(v_frag, v_s + a_offset);
#pragma unroll
        for (int np = 0; np < kTile / 16; ++np) {
          const int b_offset =
              (np * 16 + lane % 8 + (lane / 16) * 8) * P + kc * 16 + ((lane / 8) % 2) * 8;
          uint32_t qb[4], ob[4];
          ldmatrix_x4(qb, q_tile_s + b_offset);
          mma(s[2 * np], k_frag, qb[0], qb[1]);
          mma(s[2 * np + 1], k_frag, qb[2], qb[3]);
          ldmatrix_x4(ob, dout_tile_s + b_offset);
          mma(dp[2 * np], v_frag, ob[0], ob[1]);
          mma(dp[2 * np + 1], v_frag, ob[2], ob[3]);
        }
      }

      // P^T in s, dS^T in dp (rows = keys, columns = queries). Causal mask only where some
      // key of the warp follows some query of the tile.
      const bool straddles = key_offset + 15 > 0;
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = key_offset + g + (e / 2) * 8, query = n * 8 + 2 * t + e % 2;
          float p = exp2f(s[n][e] * scale_log2 - lse_tile[query]);
          if (straddles && key > query) p = 0;
          s[n][e] = p;
          dp[n][e] = p * (dp[n][e] - delta_tile[query]);
        }
      }
      // dS^T to shared memory for dQ, which needs it transposed across warps.
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
        const int row = warp * 16 + g, col = n * 8 + 2 * t;
        *reinterpret_cast<uint32_t*>(dscores_s + row * kScorePitch + col) =
            pack_bf16(dp[n][0], dp[n][1]);
        *reinterpret_cast<uint32_t*>(dscores_s + (row + 8) * kScorePitch + col) =
            pack_bf16(dp[n][2], dp[n][3]);
      }
      // dV += P^T dO; dK += dS^T Q (scaled at the end).
#pragma unroll
      for (int kc = 0; kc < kTile / 16; ++kc) {
        const uint32_t p_frag[4] = {pack_bf16(s[2 * kc][0], s[2 * kc][1]),
                                    pack_bf16(s[2 * kc][2], s[2 * kc][3]),
                                    pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                    pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3])};
        const uint32_t ds_frag[4] = {pack_bf16(dp[2 * kc][0], dp[2 * kc][1]),
                                     pack_bf16(dp[2 * kc][2], dp[2 * kc][3]),
                                     pack_bf16(dp[2 * kc + 1][0], dp[2 * kc + 1][1]),
                                     pack_bf16(dp[2 * kc + 1][2], dp[2 * kc + 1][3])};
#pragma unroll
        for (int dpair = 0; dpair < kDChunks; ++dpair) {
          const int b_offset =
              (kc * 16 + lane % 8 + ((lane / 8) % 2) * 8) * P + dpair * 16 + (lane / 16) * 8;
          uint32_t ob[4], qb[4];
          ldmatrix_x4_trans(ob, dout_tile_s + b_offset);
          mma(dv[2 * dpair], p_frag, ob[0], ob[1]);
          mma(dv[2 * dpair + 1], p_frag, ob[2], ob[3]);
          ldmatrix_x4_trans(qb, q_tile_s + b_offset);
          mma(dk[2 * dpair], ds_frag, qb[0], qb[1]);
          mma(dk[2 * dpair + 1], ds_frag, qb[2], qb[3]);
        }
      }
    }
    __syncthreads();  // dS^T complete

    // dQ (16 queries from dq_row x kDqChunks * 16 columns from dq_chunk * 16) += dS K over
    // all the tile's keys, added once per (key tile, query tile) into the fp32 scratch. (Leaving
    // out the causally zero key chunks costs ptxas spills at D = 128 and saves ~0.3% of the
    // math at T = 4096.) Row groups holding only padding queries add nothing.
    const int dq_row = (warp % 4) * 16, dq_chunk = (warp / 4) * kDqChunks;
    const int query0 = first_query + dq_row + g;
    if (first_query + dq_row < seq) {
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
            atomicAdd(reinterpret_cast<float2*>(dq_row0 + col),
                      make_float2(dq[half][0], dq[half][1]));
          if (query0 + 8 < seq)
            atomicAdd(reinterpret_cast<float2*>(dq_row1 + col),
                      make_float2(dq[half][2], dq[half][3]));
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
        atomicAdd(reinterpret_cast<float2*>(dk_accum_BTKD + row_offset + col),
                  make_float2(dk[n][2 * r], dk[n][2 * r + 1]));
        atomicAdd(reinterpret_cast<float2*>(dv_accum_BTKD + row_offset + col),
                  make_float2(dv[n][2 * r], dv[n][2 * r + 1]));
        continue;
      }
      *reinterpret_cast<__nv_bfloat162*>(dk_BTKD + row_offset + col) =
          __floats2bfloat162_rn(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
      *reinterpret_cast<__nv_bfloat162*>(dv_BTKD + row_offset + col) =
          __floats2bfloat162_rn(dv[n][2 * r], dv[n][2 * r + 1]);
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

// ---- launch helpers ----

// Layouts as carved in the kernels: forward Q (16 rows a warp) + 2 stages of K and V tiles;
// backward K, V (16 rows a warp) + 2 stages of 64-row Q and dO tiles, dS^T (a row per key), 2
// stages of lse and delta.
template <int D, int kForwardWarps>
constexpr size_t forward_shared_bytes() {
  return sizeof(bf16) * (kForwardWarps * 16 + 4 * kTile) * pitch<D>();
}
template <int D, int kBackwardWarps>
constexpr size_t backward_shared_bytes() {
  constexpr int kKeyRows = kBackwardWarps * 16;
  return sizeof(bf16) * ((2 * kKeyRows + 4 * kTile) * pitch<D>() + kKeyRows * kScorePitch) +
         sizeof(float) * 4 * kTile;
}
// 227 KB: the most dynamic shared memory one block may take on sm_90.
static_assert(backward_shared_bytes<128, kDefaultBackwardWarps>() <= 227 * 1024,
              "backward tiles exceed shared memory");

template <typename Kernel>
void allow_shared(Kernel kernel, size_t bytes) {
  SHARDTRAIN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes)));
}

// Calls fn(std::integral_constant<int, D>) for the supported head dims.
template <typename Fn>
void dispatch_head_dim(int head_dim, Fn&& fn) {
  switch (head_dim) {
    case 64:
      fn(std::integral_constant<int, 64>{});
      break;
    case 128:
      fn(std::integral_constant<int, 128>{});
      break;
    default:
      std::fprintf(stderr, "%s:%d: flash attention wants head dim 64 or 128, got %d\n", __FILE__,
                   __LINE__, head_dim);
      std::abort();
  }
}

// Warps (16 query rows each) of a forward block: kDefaultForwardWarps, or 4 under the test
// hook SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS=4 (the 64-row query tiles), so tests and the
// bench reach and compare both shapes.
int forward_warps() {
  const char* forced = std::getenv("SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS");
  return forced != nullptr && std::atoi(forced) == 4 ? 4 : kDefaultForwardWarps;
}

// Warps (16 keys each) of a backward block: kDefaultBackwardWarps, or 4 under the test hook
// SHARDTRAIN_TEST_ATTENTION_BACKWARD_WARPS=4 (the 64-row key tiles), so tests and the bench
// reach and compare both shapes.
int backward_warps() {
  const char* forced = std::getenv("SHARDTRAIN_TEST_ATTENTION_BACKWARD_WARPS");
  return forced != nullptr && std::atoi(forced) == 4 ? 4 : kDefaultBackwardWarps;
}

size_t delta_floats(const AttentionShape& s) {
  const size_t n = static_cast<size_t>(s.batch) * s.heads * s.seq;
  return (n + 3) / 4 * 4;  // keeps the dq accumulator after it 16-byte aligned
}

// Query heads per backward block of `warps` warps: the whole GQA group (dK, dV written once,
// no atomics) unless that leaves fewer than 32 warps' worth of blocks per SM (8 blocks of 4
// warps, 4 of 8: the same work, as a 128-key tile is two 64-key ones, so both shapes slice a
// group alike; about 4 waves at D = 128, where an SM holds 8 backward warps either way); causal
// key tiles differ in work by up to the number of query tiles, so with about one block per SM
// the heaviest tiles decide the kernel's time. Then the group is split into the fewest slices
// that give enough blocks.
int backward_heads_per_block(const AttentionShape& s, int key_tiles, int warps) {
  static const int sms = [] {
    int device = 0, count = 0;
    SHARDTRAIN_CUDA_CHECK(cudaGetDevice(&device));
    SHARDTRAIN_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  const int group = s.heads / s.kv_heads;
  // Test hook: force a slice size (must divide the group), so tests reach every path on
  // small shapes.
  if (const char* forced = std::getenv("SHARDTRAIN_TEST_ATTENTION_HEADS_PER_BLOCK")) {
    const int heads = std::atoi(forced);
    if (heads > 0 && group % heads == 0) return heads;
  }
  const int64_t unsplit = int64_t{key_tiles} * s.kv_heads * s.batch;
  const int64_t wanted = int64_t{32 / warps} * sms;
  for (int slices = 1; slices <= group; ++slices) {
    if (group % slices == 0 && unsplit * slices >= wanted) return group / slices;
  }
  return 1;
}

}  // namespace

bool flash_attention_supported(DType dtype, const AttentionShape& shape) {
  return dtype == DType::kBF16 && (shape.head_dim == 64 || shape.head_dim == 128) &&
         shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0;
}

void flash_attention_forward(const void* q_BTHD, const void* k_BTKD, const void* v_BTKD,
                             float scale, const AttentionShape& shape, void* out_BTHD,
                             float* lse_BHT, cudaStream_t stream) {
  if (shape.batch == 0 || shape.seq == 0 || shape.heads == 0) return;
  const int warps = forward_warps();
  dispatch_head_dim(shape.head_dim, [&](auto head_dim) {
    constexpr int D = decltype(head_dim)::value;
    const auto launch = [&](auto warps_constant) {
      constexpr int kForwardWarps = decltype(warps_constant)::value;
      constexpr int kQueryRows = kForwardWarps * 16;
      auto kernel = flash_forward_kernel<D, kForwardWarps>;
      constexpr size_t bytes = forward_shared_bytes<D, kForwardWarps>();
      allow_shared(kernel, bytes);
      const dim3 grid(static_cast<unsigned>((shape.seq + kQueryRows - 1) / kQueryRows),
                      static_cast<unsigned>(shape.heads), static_cast<unsigned>(shape.batch));
      kernel<<<grid, kForwardWarps * 32, bytes, stream>>>(
          static_cast<const bf16*>(q_BTHD), static_cast<const bf16*>(k_BTKD),
          static_cast<const bf16*>(v_BTKD), scale, shape, static_cast<bf16*>(out_BTHD), lse_BHT);
      SHARDTRAIN_CUDA_CHECK_LAUNCH();
    };
    if (warps == 4) {
      launch(std::integral_constant<int, 4>{});
    } else {
      launch(std::integral_constant<int, kDefaultForwardWarps>{});
    }
  });
}

size_t flash_attention_backward_scratch_floats(const AttentionShape& shape) {
  const size_t kv = static_cast<size_t>(shape.batch) * shape.seq * shape.kv_heads * shape.head_dim;
  return delta_floats(shape) +
         static_cast<size_t>(shape.batch) * shape.seq * shape.heads * shape.head_dim + 2 * kv;
}

void flash_attention_backward(const void* dout_BTHD, const void* q_BTHD, const void* k_BTKD,
                              const void* v_BTKD, const void* out_BTHD, const float* lse_BHT,
                              float scale, const AttentionShape& shape, void* dq_BTHD,
                              void* dk_BTKD, void* dv_BTKD, float* scratch, cudaStream_t stream) {
  if (shape.batch == 0 || shape.seq == 0 || shape.heads == 0) return;
  float* delta_BHT = scratch;
  float* dq_accum_BTHD = scratch + delta_floats(shape);
  const int64_t dq_count = int64_t{shape.batch} * shape.seq * shape.heads * shape.head_dim;
  const int64_t kv_count = int64_t{shape.batch} * shape.seq * shape.kv_heads * shape.head_dim;
  float* dk_accum_BTKD = dq_accum_BTHD + dq_count;
  float* dv_accum_BTKD = dk_accum_BTKD + kv_count;
  const int warps = backward_warps();
  const int key_rows = warps * 16;
  const int key_tiles = (shape.seq + key_rows - 1) / key_rows;
  const int heads_per_block = backward_heads_per_block(shape, key_tiles, warps);
  const bool split = heads_per_block < shape.heads / shape.kv_heads;
  // dQ and (when split) dK, dV accumulate in fp32; the three are adjacent in the scratch.
  const int64_t accum_count = dq_count + (split ? 2 * kv_count : 0);
  SHARDTRAIN_CUDA_CHECK(
      cudaMemsetAsync(dq_accum_BTHD, 0, static_cast<size_t>(accum_count) * sizeof(float), stream));
  dispatch_head_dim(shape.head_dim, [&](auto head_dim) {
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
    const auto launch = [&](auto warps_constant) {
      constexpr int kBackwardWarps = decltype(warps_constant)::value;
      auto kernel = flash_backward_kernel<D, kBackwardWarps>;
      constexpr size_t bytes = backward_shared_bytes<D, kBackwardWarps>();
      allow_shared(kernel, bytes);
      kernel<<<blocks, kBackwardWarps * 32, bytes, stream>>>(
          static_cast<const bf16*>(dout_BTHD), static_cast<const bf16*>(q_BTHD),
          static_cast<const bf16*>(k_BTKD), static_cast<const bf16*>(v_BTKD), lse_BHT, delta_BHT,
          scale, shape, heads_per_block, dq_accum_BTHD, static_cast<bf16*>(dk_BTKD),
          static_cast<bf16*>(dv_BTKD), split ? dk_accum_BTKD : nullptr,
          split ? dv_accum_BTKD : nullptr);
      SHARDTRAIN_CUDA_CHECK_LAUNCH();
    };
    if (warps == 4) {
      launch(std::integral_constant<int, 4>{});
    } else {
      launch(std::integral_constant<int, kDefaultBackwardWarps>{});
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
