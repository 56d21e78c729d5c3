// Causal grouped-query flash attention backward, warp-specialised (sm_90a, bf16, head dim 64: the
// Llama shapes, where the backward is 39% of a seq-16384 step, bench/RESULTS.md). Same contract,
// grid, GQA slicing, scratch and results as wgmma_backward_kernel
// (cuda_attention_wgmma_backward.cu), whose per-step math it keeps; what changes is who loads:
//   block = (128-key tile, kv head, batch[, slice of the GQA group]) of three warpgroups.
//   Warpgroup 0, warp 0 is the producer: TMA copies (cuda_tma.cuh) of the block's K and V once,
//   then per step (query head x 64-row query tile) the Q and dO tiles into a ring of kWsStages
//   stages, and lse / delta of the tile's queries (plain loads by its 32 lanes into the stage;
//   zeros past the sequence). A stage's "full" mbarrier counts lane 0's expect-tx arrival, the
//   32 lanes' arrivals and the TMA bytes; its "empty" one the 256 consumer threads done with it.
//   Warpgroups 1 and 2 are the consumers, 64 keys each, with the wgmma kernel's step: S^T, dP^T,
//   P, dV += P^T dO, dS, dK += dS^T Q, dS^T to shared memory, then dQ of the tile over the
//   block's 128 keys (the consumers take turns) added with fp32 atomics. dS^T is double-buffered
//   and a named barrier of the 256 consumer threads replaces the wgmma kernel's two block
//   barriers per step: nothing waits for loads issued in the consumers' own instruction stream.
// Head dim 128 keeps the wgmma kernel: its consumers need ~254 registers, more than a
// warp-specialised block can give them (240).
// STATUS: compiled (ptxas figures in NOTES.md); picked only under the hook
// SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma-ws until measured on a GPU.
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/cuda_attention_tc.cuh"
#include "ops/cuda/cuda_tma.cuh"

namespace shardtrain::cuda_kernels::flash {
namespace {

constexpr int kD = 64;
constexpr int kWsKeys = 128;    // keys of a block: two consumer warpgroups of 64
constexpr int kWsQueries = 64;  // rows of a query tile
constexpr int kWsStages = 3;
constexpr int kWsThreads = 384;
// Used only in the sm_90a body of the kernel.
[[maybe_unused]] constexpr int kWsConsumerThreads = 256;
[[maybe_unused]] constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
[[maybe_unused]] constexpr int kDsReadyBarrier = 1;  // named barrier: both halves of dS^T stored

constexpr size_t ws_backward_shared_bytes() {
  // K, V; stages of Q, dO; two dS^T buffers; stages of lse and delta; mbarriers (kv_full, and
  // full and empty per stage).
  return sizeof(bf16) *
             (2 * kWsKeys * kD + 2 * kWsStages * kWsQueries * kD + 2 * kWsKeys * kWsQueries) +
         sizeof(float) * 2 * kWsStages * kWsQueries + 8 * (1 + 2 * kWsStages) + kSharedAlignSlack;
}
static_assert(ws_backward_shared_bytes() ==
                  ::shardtrain::cuda_kernels::wgmma_ws_backward_shared_bytes(64),
              "the dispatch table (cuda_dispatch.h) counts the bytes the kernel carves");

struct WsBackwardMaps {
  CUtensorMap q, dout, k, v;
};

#if SHARDTRAIN_WGMMA_COMPILED
// P^T or dS^T (64 keys x 64 queries, accumulator layout) as the four A fragments of a product
// over the queries.
__device__ __forceinline__ void a_fragments_of(const float (&x)[32], uint32_t (&a)[4][4]) {
#pragma unroll
  for (int i = 0; i < 32; i += 2) {
    a[i / 8][((i / 4) % 2) * 2 + (i % 4) / 2] = pack_bf16(x[i], x[i + 1]);
  }
}
#endif

// REQUIRES: blockDim.x == kWsThreads; dynamic shared memory ws_backward_shared_bytes(); grid and
// accumulators as flash_attention_backward sets them up for 128-key tiles; maps from
// tensor_map_of_heads with boxes of kWsQueries rows (Q, dO) and kWsKeys rows (K, V).
__global__ void __launch_bounds__(kWsThreads, 1)
    ws_backward_kernel(const __grid_constant__ WsBackwardMaps maps, const float* lse_BHT,
                       const float* delta_BHT, float scale, AttentionShape shape,
                       int heads_per_block, float* dq_accum_BTHD, bf16* dk_BTKD, bf16* dv_BTKD,
                       float* dk_accum_BTKD, float* dv_accum_BTKD) {
#if SHARDTRAIN_WGMMA_COMPILED
  constexpr int D = kD;
  constexpr uint32_t kKeyTileBytes = kWsKeys * D * sizeof(bf16);
  constexpr uint32_t kQueryTileBytes = kWsQueries * D * sizeof(bf16);
  constexpr uint32_t kDsBytes = kWsKeys * kWsQueries * sizeof(bf16);
  const int seq = shape.seq;
  const int q_tiles = (seq + kWsQueries - 1) / kWsQueries;
  const BackwardBlock block = backward_block(shape, heads_per_block);
  const int kv_tile = block.kv_tile, b = block.batch, kv_head = block.kv_head;
  const int first_head = block.first_head;
  const int first_key = kv_tile * kWsKeys;
  const int first_q_tile = first_key / kWsQueries;
  const int tiles_per_head = q_tiles - first_q_tile;
  const int steps = heads_per_block * tiles_per_head;

  extern __shared__ unsigned char shared_raw[];
  unsigned char* base = align_shared_1024(shared_raw);
  const uint32_t k_address = shared_address(base);
  const uint32_t v_address = k_address + kKeyTileBytes;
  const uint32_t q_address = v_address + kKeyTileBytes;                     // [stages][64] x D
  const uint32_t dout_address = q_address + kWsStages * kQueryTileBytes;    // [stages][64] x D
  const uint32_t dst_address = dout_address + kWsStages * kQueryTileBytes;  // [2][128] x 64
  bf16* const dst_s = reinterpret_cast<bf16*>(base + (dst_address - k_address));
  float* const lse_s = reinterpret_cast<float*>(base + (dst_address - k_address) + 2 * kDsBytes);
  float* const delta_s = lse_s + kWsStages * kWsQueries;  // [stages][64]
  const uint32_t barriers = shared_address(delta_s + kWsStages * kWsQueries);
  const uint32_t kv_full = barriers;
  const auto full = [&](int stage) { return barriers + 8 * (1 + stage); };
  const auto empty = [&](int stage) { return barriers + 8 * (1 + kWsStages + stage); };

  if (threadIdx.x == 0) {
    tma::mbarrier_init(kv_full, 1);
    for (int stage = 0; stage < kWsStages; ++stage) {
      tma::mbarrier_init(full(stage), 1 + 32);  // lane 0's expect-tx + the 32 lanes' stores
      tma::mbarrier_init(empty(stage), kWsConsumerThreads);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  if (warpgroup == 0) {
    tma::release_registers<kProducerRegisters>();
    if (warp != 0) return;
    if (lane == 0) {
      tma::prefetch_map(&maps.q);
      tma::prefetch_map(&maps.dout);
      tma::arrive_expect_tx(kv_full, 2 * kKeyTileBytes);
      tma::load_4d(k_address, &maps.k, 0, kv_head, first_key, b, kv_full);
      tma::load_4d(v_address, &maps.v, 0, kv_head, first_key, b, kv_full);
    }
    for (int step = 0; step < steps; ++step) {
      const int stage = step % kWsStages;
      tma::wait(empty(stage), ((step / kWsStages) & 1) ^ 1);  // first pass: at once
      const int h = first_head + step / tiles_per_head;
      const int first_query = (first_q_tile + step % tiles_per_head) * kWsQueries;
      // lse (natural log) and delta of the tile's queries; padding queries read zeros: their Q
      // and dO rows are zeros too, so P^T dO and dS^T = P^T (dP^T - delta) vanish.
      const int64_t stats = (int64_t{b} * shape.heads + h) * seq;
#pragma unroll
      for (int i = lane; i < kWsQueries; i += 32) {
        const int query = first_query + i;
        const bool valid = query < seq;
        lse_s[stage * kWsQueries + i] = valid ? lse_BHT[stats + query] : 0.0f;
        delta_s[stage * kWsQueries + i] = valid ? delta_BHT[stats + query] : 0.0f;
      }
      if (lane == 0) {
        tma::arrive_expect_tx(full(stage), 2 * kQueryTileBytes);
        tma::load_4d(q_address + stage * kQueryTileBytes, &maps.q, 0, h, first_query, b,
                     full(stage));
        tma::load_4d(dout_address + stage * kQueryTileBytes, &maps.dout, 0, h, first_query, b,
                     full(stage));
      }
      tma::arrive(full(stage));  // this lane's lse / delta stores (release)
    }
    return;
  }
  tma::claim_registers<kConsumerRegisters>();

  const int consumer = warpgroup - 1;  // keys 64 * consumer .. of the block
  const int g = lane / 4, t = lane % 4;
  const int64_t q_token = int64_t{shape.heads} * D, kv_token = int64_t{shape.kv_heads} * D;
  const int64_t kv_offset = b * int64_t{seq} * kv_token + int64_t{kv_head} * D;
  const float scale_log2 = scale * kLog2e;
  float dk[D / 2], dv[D / 2];  // 64 keys x D each, accumulator layout
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0;
  float s[32], dp[32];  // S^T, dP^T: 64 keys x 64 queries
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = dp[i] = 0;

  // This warpgroup's dS^T (64 keys x 64 queries, accumulator layout) into dS^T buffer `buffer`
  // as bf16 pairs at their swizzled positions, for dQ.
  const auto store_dst = [&](const float(&values)[32], int buffer) {
    bf16* tile = dst_s + buffer * kWsKeys * kWsQueries;
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const int key = consumer * 64 + warp * 16 + g + ((i % 4) / 2) * 8;
      const int query = (i / 4) * 8 + 2 * t;
      *reinterpret_cast<uint32_t*>(tile + wgmma::swizzled_offset(kWsKeys, key, query)) =
          pack_bf16(values[i], values[i + 1]);
    }
  };

  tma::wait(kv_full, 0);
  for (int step = 0; step < steps; ++step) {
    const int stage = step % kWsStages, buffer = step & 1;
    tma::wait(full(stage), (step / kWsStages) & 1);
    const int h = first_head + step / tiles_per_head;
    const int first_query = (first_q_tile + step % tiles_per_head) * kWsQueries;
    const uint32_t q_tile = q_address + stage * kQueryTileBytes;
    const uint32_t dout_tile = dout_address + stage * kQueryTileBytes;
    const float* lse_tile = lse_s + stage * kWsQueries;
    const float* delta_tile = delta_s + stage * kWsQueries;

    // This warpgroup's first key counted from the tile's first query; from 64 on, every key
    // follows every query: nothing to add, and dQ leaves these keys out (below).
    const int key_offset = first_key + consumer * 64 - first_query;
    if (key_offset < kWsQueries) {
      // Overlapped: P is computed while dP^T runs, dS while dV += P^T dO runs.
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wgmma::mma_ss<kWsQueries, 0, 0>(s, wgmma::k_major(k_address, kWsKeys, consumer * 64, kk),
                                        wgmma::k_major(q_tile, kWsQueries, 0, kk), kk > 0);
      }
      wgmma::commit();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wgmma::mma_ss<kWsQueries, 0, 0>(dp, wgmma::k_major(v_address, kWsKeys, consumer * 64, kk),
                                        wgmma::k_major(dout_tile, kWsQueries, 0, kk), kk > 0);
      }
      wgmma::commit();
      wgmma::wait<1>();  // S^T
      wgmma::fence_registers(s);

      const bool straddles = key_offset + 63 > 0;  // some key after some query: mask
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int e = i % 4;
        const int key = key_offset + warp * 16 + g + (e / 2) * 8;
        const int query = (i / 4) * 8 + 2 * t + e % 2;
        float p = fast_exp2(fmaf(s[i], scale_log2, -lse_tile[query] * kLog2e));
        if (straddles && key > query) p = 0;
        s[i] = p;
      }
      uint32_t p_frag[4][4], ds_frag[4][4];
      a_fragments_of(s, p_frag);
      wgmma::fence();
#pragma unroll
      for (int kc = 0; kc < kWsQueries / 16; ++kc) {
        wgmma::mma_rs<D, 1>(dv, p_frag[kc], wgmma::mn_major(dout_tile, kWsQueries, kc), 1);
      }
      wgmma::commit();
      wgmma::wait<1>();  // dP^T
      wgmma::fence_registers(dp);
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const int query = (i / 4) * 8 + 2 * t + i % 2;
        dp[i] = s[i] * (dp[i] - delta_tile[query]);
      }
      store_dst(dp, buffer);
      a_fragments_of(dp, ds_frag);
      wgmma::fence();
#pragma unroll
      for (int kc = 0; kc < kWsQueries / 16; ++kc) {
        wgmma::mma_rs<D, 1>(dk, ds_frag[kc], wgmma::mn_major(q_tile, kWsQueries, kc), 1);
      }
      wgmma::commit();
    } else {
      // Every key after every query: dS^T = 0 (dQ multiplies all 128 keys).
#pragma unroll
      for (int i = 0; i < 32; ++i) dp[i] = 0;
      store_dst(dp, buffer);
    }
    wgmma::fence_shared_for_async_proxy();  // dS^T stores visible to the dQ wgmma
    // Both halves of dS^T stored. The other buffer is free too: each consumer finished the step
    // before (its dQ product included) before arriving here.
    tma::named_sync(kDsReadyBarrier, kWsConsumerThreads);

    // dQ (64 queries x 64 columns) += dS K over the block's 128 keys; the consumers alternate.
    if (consumer == (step & 1)) {
      float dq[32];
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kWsKeys / 16; ++kk) {
        wgmma::mma_ss<64, 1, 1>(dq, wgmma::mn_major(dst_address + buffer * kDsBytes, kWsKeys, kk),
                                wgmma::mn_major(k_address, kWsKeys, kk, 0), kk > 0);
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_registers(dq);
      wgmma::fence_registers(dk);
      wgmma::fence_registers(dv);
      tma::arrive(empty(stage));  // Q, dO, lse, delta of this step read
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int query = first_query + warp * 16 + g + 8 * r;
        if (query >= seq) continue;
        float* dq_row = dq_accum_BTHD + (b * int64_t{seq} + query) * q_token + int64_t{h} * D;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          cuda_detail::atomic_add_float2(dq_row + 8 * j + 2 * t,
                                         make_float2(dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]));
        }
      }
    } else {
      wgmma::wait<0>();  // this step's dK, dV products
      wgmma::fence_registers(dk);
      wgmma::fence_registers(dv);
      tma::arrive(empty(stage));
    }
  }

#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = first_key + consumer * 64 + warp * 16 + g + r * 8;
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
#else
  __trap();  // not built for sm_90a: the dispatch table (cuda_dispatch.h) picks this kernel only
             // where it was
#endif
}

}  // namespace

bool ws_attention_backward(const bf16* dout_BTHD, const bf16* q_BTHD, const bf16* k_BTKD,
                           const bf16* v_BTKD, const float* lse_BHT, const float* delta_BHT,
                           float scale, const AttentionShape& shape, int heads_per_block,
                           unsigned blocks, float* dq_accum_BTHD, bf16* dk_BTKD, bf16* dv_BTKD,
                           float* dk_accum_BTKD, float* dv_accum_BTKD, cudaStream_t stream) {
  if (shape.head_dim != kD) return false;
  WsBackwardMaps maps;
  if (!tma::tensor_map_of_heads(maps.q, q_BTHD, shape.batch, shape.seq, shape.heads, kD,
                                kWsQueries) ||
      !tma::tensor_map_of_heads(maps.dout, dout_BTHD, shape.batch, shape.seq, shape.heads, kD,
                                kWsQueries) ||
      !tma::tensor_map_of_heads(maps.k, k_BTKD, shape.batch, shape.seq, shape.kv_heads, kD,
                                kWsKeys) ||
      !tma::tensor_map_of_heads(maps.v, v_BTKD, shape.batch, shape.seq, shape.kv_heads, kD,
                                kWsKeys)) {
    return false;
  }
  auto kernel = ws_backward_kernel;
  constexpr size_t bytes = ws_backward_shared_bytes();
  allow_shared(kernel, bytes, "ws_backward_kernel");
  kernel<<<blocks, kWsThreads, bytes, stream>>>(maps, lse_BHT, delta_BHT, scale, shape,
                                                heads_per_block, dq_accum_BTHD, dk_BTKD, dv_BTKD,
                                                dk_accum_BTKD, dv_accum_BTKD);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
  return true;
}

}  // namespace shardtrain::cuda_kernels::flash
