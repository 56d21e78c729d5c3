// Causal grouped-query flash attention backward, warp-specialised (sm_90a, bf16, head dims 64 and
// 128; at 64, the Llama shapes, the backward is 39% of a seq-16384 step, bench/RESULTS.md). Same
// contract,
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
//   block's 128 keys (at D = 128 each consumer takes 64 of the columns, at 64 they take turns)
//   added into the fp32 dQ accumulator in one of two ways (the kernel's kDqWriter):
//   - atomics (SHARDTRAIN_ATTENTION_DQ_WRITER=0): the consumers add their dQ with float2
//     atomics (16 a thread a step, 64 x D values a step), issued in their own instruction
//     stream between the step's products;
//   - a dQ writer (the default, ops/ops_switches.h; FlashAttention-3's way): the consumers store
//     dQ (fp32, 128-byte swizzled) to their own dQ tile in shared memory, and warpgroup 0's warp
//     1 adds each stored tile into the accumulator with TMA reductions
//     (cp.reduce.async.bulk.tensor: atomic per element in L2, as other key tiles' blocks add to
//     the same rows) beside the next step's math, freeing the tile once the TMA has read it.
//     Each tile has a "full" mbarrier (its consumer's 128 threads' stores) and an "empty" one
//     (the writer's arrival). Measured on one H100 (B 2, T 4096): D 128 backward
//     0.629 ms against the atomics' 0.685; D 64 1.030 against 1.028.
//   Window and documents (cuda_attention_mask.cuh): the steps end at
//   the query tile holding the last query that sees the block's last key; a consumer skips the
//   math of tiles none of whose queries see its keys. dS^T is double-buffered
//   and a named barrier of the 256 consumer threads replaces the wgmma kernel's two block
//   barriers per step: nothing waits for loads issued in the consumers' own instruction stream.
// Registers: producer and dQ writer 24 a thread, consumers 240 (setmaxnreg). The wgmma kernel's
// threads use 254 at D = 128; without the loads' address arithmetic the consumers fit 240 (ptxas:
// no spills; the writer variant spills 4 bytes at D = 128).
// The Hopper default because it measured faster than the cp.async wgmma kernel
// (ops/cuda/ATTENTION_NOTES.md, bench/RESULTS.md); tests force that one with ops/kernel_overrides.h
// kWgmma.
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/cuda_attention_mask.cuh"
#include "ops/cuda/cuda_attention_tc.cuh"
#include "ops/cuda/cuda_attention_wgmma_steps.cuh"
#include "ops/cuda/cuda_tma.cuh"
#include "ops/ops_switches.h"

namespace shardtrain::cuda_kernels::flash {
namespace {

constexpr int kWsKeys = 128;    // keys of a block: two consumer warpgroups of 64
constexpr int kWsQueries = 64;  // rows of a query tile
constexpr int kWsStages = 3;
constexpr int kWsThreads = 384;
// Used only in the sm_90a body of the kernel.
[[maybe_unused]] constexpr int kWsConsumerThreads = 256;
[[maybe_unused]] constexpr int kProducerRegisters = 24, kConsumerRegisters = 240;
[[maybe_unused]] constexpr int kDsReadyBarrier = 1;  // named barrier: both halves of dS^T stored

// A consumer's dQ tile: 64 queries x 64 columns, fp32, as two 128-byte-swizzled boxes of 32
// columns (the dQ accumulator's tensor map boxes).
constexpr int kDqBoxColumns = 32;
constexpr uint32_t kDqBoxBytes = kWsQueries * kDqBoxColumns * sizeof(float);
constexpr uint32_t kDqTileBytes = 2 * kDqBoxBytes;

template <int D, bool kDqWriter>
constexpr size_t ws_backward_shared_bytes() {
  // K, V; stages of Q, dO; two dS^T buffers; with the writer two dQ tiles; stages of lse and
  // delta; mbarriers (kv_full, full and empty per stage, with the writer full and empty per dQ
  // tile).
  return sizeof(bf16) *
             (2 * kWsKeys * D + 2 * kWsStages * kWsQueries * D + 2 * kWsKeys * kWsQueries) +
         (kDqWriter ? 2 * kDqTileBytes : 0) + sizeof(float) * 2 * kWsStages * kWsQueries +
         8 * (1 + 2 * kWsStages + (kDqWriter ? 4 : 0)) + kSharedAlignSlack;
}
// The dispatch table checks the larger (writer) variant fits, so either may run.
static_assert(ws_backward_shared_bytes<64, true>() ==
                      ::shardtrain::cuda_kernels::wgmma_ws_backward_shared_bytes(64) &&
                  ws_backward_shared_bytes<128, true>() ==
                      ::shardtrain::cuda_kernels::wgmma_ws_backward_shared_bytes(128),
              "the dispatch table (cuda_dispatch.h) counts the bytes the kernel carves");

struct WsBackwardMaps {
  CUtensorMap q, dout, k, v, dq_accum;
};

// The byte offset in a dQ tile of (query row, column) (both < 64): box column / 32, 128-byte
// rows whose 16-byte chunks are XOR-swizzled by row % 8 (the TMA's 128-byte swizzle).
// Used only in the sm_90a body of the kernel.
[[maybe_unused]] __device__ __forceinline__ uint32_t dq_tile_offset(int row, int column) {
  const int box = column / kDqBoxColumns, in_box = column % kDqBoxColumns;
  const int chunk = (in_box / 4) ^ (row % 8);
  return box * kDqBoxBytes + row * 128 + chunk * 16 + (in_box % 4) * sizeof(float);
}

// REQUIRES: blockDim.x == kWsThreads; dynamic shared memory ws_backward_shared_bytes<D,
// kDqWriter>(); grid and
// accumulators as flash_attention_backward sets them up for 128-key tiles; maps from
// tensor_map_of_heads with boxes of kWsQueries rows (Q, dO) and kWsKeys rows (K, V), dq_accum's
// from tensor_map_of_heads_f32 (of dq_accum_BTHD) with boxes of kWsQueries rows when kDqWriter.
template <int D, bool kDqWriter>
__global__ void __launch_bounds__(kWsThreads, 1)
    ws_backward_kernel(const __grid_constant__ WsBackwardMaps maps, const float* lse_BHT,
                       const float* delta_BHT, float scale, AttentionShape shape,
                       int heads_per_block, float* dq_accum_BTHD, bf16* dk_BTKD, bf16* dv_BTKD,
                       float* dk_accum_BTKD, float* dv_accum_BTKD) {
#if SHARDTRAIN_WGMMA_COMPILED
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
  // To the query tile holding the last query that sees the block's last key (window, documents).
  const int query_end = attention_mask::query_end(shape, b, first_key + kWsKeys - 1);
  const int tiles_per_head = min(q_tiles, (query_end + kWsQueries - 1) / kWsQueries) - first_q_tile;
  const int steps = heads_per_block * tiles_per_head;

  extern __shared__ unsigned char shared_raw[];
  unsigned char* base = align_shared_1024(shared_raw);
  const uint32_t k_address = shared_address(base);
  const uint32_t v_address = k_address + kKeyTileBytes;
  const uint32_t q_address = v_address + kKeyTileBytes;                     // [stages][64] x D
  const uint32_t dout_address = q_address + kWsStages * kQueryTileBytes;    // [stages][64] x D
  const uint32_t dst_address = dout_address + kWsStages * kQueryTileBytes;  // [2][128] x 64
  const uint32_t dq_address = dst_address + 2 * kDsBytes;  // writer: [2 consumers] dQ tiles
  bf16* const dst_s = reinterpret_cast<bf16*>(base + (dst_address - k_address));
  float* const lse_s = reinterpret_cast<float*>(base + (dq_address - k_address) +
                                                (kDqWriter ? 2 * kDqTileBytes : 0));
  float* const delta_s = lse_s + kWsStages * kWsQueries;  // [stages][64]
  const uint32_t barriers = shared_address(delta_s + kWsStages * kWsQueries);
  const uint32_t kv_full = barriers;
  const auto full = [&](int stage) { return barriers + 8 * (1 + stage); };
  const auto empty = [&](int stage) { return barriers + 8 * (1 + kWsStages + stage); };
  const auto dq_full = [&](int c) { return barriers + 8 * (1 + 2 * kWsStages + c); };
  const auto dq_empty = [&](int c) { return barriers + 8 * (3 + 2 * kWsStages + c); };
  // Whether consumer c computes dQ at `step` (at D = 128 both, each its half of the columns),
  // and how many times its tile was used before.
  const auto computes_dq = [](int c, int step) { return D == 128 || c == (step & 1); };
  const auto dq_use = [](int step) { return D == 128 ? step : step >> 1; };

  if (threadIdx.x == 0) {
    tma::mbarrier_init(kv_full, 1);
    for (int stage = 0; stage < kWsStages; ++stage) {
      tma::mbarrier_init(full(stage), 1 + 32);  // lane 0's expect-tx + the 32 lanes' stores
      tma::mbarrier_init(empty(stage), kWsConsumerThreads);
    }
    for (int c = 0; kDqWriter && c < 2; ++c) {
      tma::mbarrier_init(dq_full(c), kWsConsumerThreads / 2);
      tma::mbarrier_init(dq_empty(c), 1);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  if (warpgroup == 0) {
    tma::release_registers<kProducerRegisters>();
    if (kDqWriter && warp == 1 && lane == 0) {  // the dQ writer
      tma::prefetch_map(&maps.dq_accum);
      // The step's head and query tile counted along (few registers: this warp has 24).
      int h = first_head, tile = 0;
      for (int step = 0; step < steps; ++step) {
        const int first_query = (first_q_tile + tile) * kWsQueries;
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          if (!computes_dq(c, step)) continue;
          tma::wait(dq_full(c), dq_use(step) & 1);
          const int first_column = D == 128 ? c * 64 : 0;
#pragma unroll
          for (int box = 0; box < 2; ++box) {
            tma::reduce_add_4d(&maps.dq_accum, dq_address + c * kDqTileBytes + box * kDqBoxBytes,
                               first_column + box * kDqBoxColumns, h, first_query, b);
          }
          tma::commit_bulk_group();
          tma::wait_bulk_group_read();
          tma::arrive(dq_empty(c));
        }
        if (++tile == tiles_per_head) {
          tile = 0;
          ++h;
        }
      }
      tma::wait_bulk_group();  // the reductions done before the block exits
      return;
    }
    if (warp != 0) return;
    if (lane == 0) {
      tma::prefetch_map(&maps.q);
      tma::prefetch_map(&maps.dout);
      tma::arrive_expect_tx(kv_full, 2 * kKeyTileBytes);
      for (int block = 0; block < D / wgmma::kBlockColumns; ++block) {
        const uint32_t offset = block * kWsKeys * wgmma::kSwizzleBytes;
        const int column = block * wgmma::kBlockColumns;
        tma::load_4d(k_address + offset, &maps.k, column, kv_head, first_key, b, kv_full);
        tma::load_4d(v_address + offset, &maps.v, column, kv_head, first_key, b, kv_full);
      }
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
        for (int block = 0; block < D / wgmma::kBlockColumns; ++block) {
          const uint32_t offset =
              stage * kQueryTileBytes + block * kWsQueries * wgmma::kSwizzleBytes;
          const int column = block * wgmma::kBlockColumns;
          tma::load_4d(q_address + offset, &maps.q, column, h, first_query, b, full(stage));
          tma::load_4d(dout_address + offset, &maps.dout, column, h, first_query, b, full(stage));
        }
      }
      tma::arrive(full(stage));  // this lane's lse / delta stores (release)
    }
    return;
  }
  tma::claim_registers<kConsumerRegisters>();

  const int consumer = warpgroup - 1;  // keys 64 * consumer .. of the block
  const int g = lane / 4, t = lane % 4;
  const int64_t kv_token = int64_t{shape.kv_heads} * D;
  const int64_t kv_offset = b * int64_t{seq} * kv_token + int64_t{kv_head} * D;
  const wgmma_steps::BackwardKeyMask key_mask =
      wgmma_steps::backward_key_mask(shape, b, first_key + consumer * 64, warp, g);
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
    const int first_query = (first_q_tile + step % tiles_per_head) * kWsQueries;
    const uint32_t q_tile = q_address + stage * kQueryTileBytes;
    const uint32_t dout_tile = dout_address + stage * kQueryTileBytes;
    const float* lse_tile = lse_s + stage * kWsQueries;
    const float* delta_tile = delta_s + stage * kWsQueries;

    // This warpgroup's first key counted from the tile's first query; from 64 on, every key
    // follows every query: nothing to add, and dQ leaves these keys out (below).
    const int key_offset = first_key + consumer * 64 - first_query;
    wgmma_steps::backward_step<D, kWsKeys>(
        {k_address, v_address, q_tile, dout_tile, lse_tile, delta_tile}, consumer * 64, key_offset,
        first_query, key_mask, warp, g, t, scale_log2, s, dp, dk, dv,
        [&](const float(&values)[32]) { store_dst(values, buffer); });
    wgmma::fence_shared_for_async_proxy();  // dS^T stores visible to the dQ wgmma
    // Both halves of dS^T stored. The other buffer is free too: each consumer finished the step
    // before (its dQ product included) before arriving here.
    tma::named_sync(kDsReadyBarrier, kWsConsumerThreads);

    // dQ (64 queries x 64 columns) += dS K over the block's 128 keys: at D = 128 consumer c takes
    // column block c, at D = 64 the consumers alternate.
    if (computes_dq(consumer, step)) {
      float dq[32];
      const int column_block = D == 128 ? consumer : 0;
      wgmma_steps::dq_product<kWsKeys, D>(dq, dst_address + buffer * kDsBytes, k_address,
                                          column_block, dk, dv);
      tma::arrive(empty(stage));  // Q, dO, lse, delta of this step read
      if constexpr (!kDqWriter) {
        const int h = first_head + step / tiles_per_head;
        wgmma_steps::add_dq_rows<D>(dq, first_query, warp, g, t, shape, b, h, column_block,
                                    dq_accum_BTHD);
        continue;
      }
      // dQ into this consumer's tile once the writer's TMA has read the previous one; the
      // writer adds it to the accumulator. Rows past the sequence are dropped by the TMA.
      tma::wait(dq_empty(consumer), (dq_use(step) & 1) ^ 1);
      unsigned char* const tile = base + (dq_address - k_address) + consumer * kDqTileBytes;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = warp * 16 + g + 8 * r;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          *reinterpret_cast<float2*>(tile + dq_tile_offset(row, 8 * j + 2 * t)) =
              make_float2(dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]);
        }
      }
      wgmma::fence_shared_for_async_proxy();  // the stores visible to the writer's TMA
      tma::arrive(dq_full(consumer));
    } else {
      wgmma::wait<0>();  // this step's dK, dV products
      wgmma::fence_registers(dk);
      wgmma::fence_registers(dv);
      tma::arrive(empty(stage));
    }
  }

  wgmma_steps::store_dkdv<D>(dk, dv, first_key + consumer * 64, warp, g, t, seq, kv_offset,
                             kv_token, scale, dk_BTKD, dv_BTKD, dk_accum_BTKD, dv_accum_BTKD);
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
  const bool dq_writer = attention_dq_writer_switch();
  WsBackwardMaps maps;
  if (!tma::tensor_map_of_heads(maps.q, q_BTHD, shape.batch, shape.seq, shape.heads, shape.head_dim,
                                kWsQueries) ||
      !tma::tensor_map_of_heads(maps.dout, dout_BTHD, shape.batch, shape.seq, shape.heads,
                                shape.head_dim, kWsQueries) ||
      !tma::tensor_map_of_heads(maps.k, k_BTKD, shape.batch, shape.seq, shape.kv_heads,
                                shape.head_dim, kWsKeys) ||
      !tma::tensor_map_of_heads(maps.v, v_BTKD, shape.batch, shape.seq, shape.kv_heads,
                                shape.head_dim, kWsKeys) ||
      (dq_writer &&
       !tma::tensor_map_of_heads_f32(maps.dq_accum, dq_accum_BTHD, shape.batch, shape.seq,
                                     shape.heads, shape.head_dim, kWsQueries))) {
    count_warp_specialised_fallback(tma::kNoTensorMaps);
    return false;
  }
  count_warp_specialised_launch(/*backward=*/true);
  dispatch_head_dim(shape.head_dim, [&](auto head_dim) {
    constexpr int D = decltype(head_dim)::value;
    const auto launch = [&](auto kernel, size_t bytes, const char* name) {
      allow_shared(kernel, bytes, name);
      kernel<<<blocks, kWsThreads, bytes, stream>>>(maps, lse_BHT, delta_BHT, scale, shape,
                                                    heads_per_block, dq_accum_BTHD, dk_BTKD,
                                                    dv_BTKD, dk_accum_BTKD, dv_accum_BTKD);
      SHARDTRAIN_CUDA_CHECK_LAUNCH();
    };
    if (dq_writer) {
      launch(ws_backward_kernel<D, true>, ws_backward_shared_bytes<D, true>(),
             "ws_backward_kernel (dQ writer)");
    } else {
      launch(ws_backward_kernel<D, false>, ws_backward_shared_bytes<D, false>(),
             "ws_backward_kernel");
    }
  });
  return true;
}

}  // namespace shardtrain::cuda_kernels::flash
