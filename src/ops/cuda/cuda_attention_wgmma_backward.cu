// Causal grouped-query flash attention backward with Hopper warpgroup MMAs (wgmma, sm_90a; bf16,
// head dims 64 and 128). Same contract, grid, scratch and results as the mma.sync kernel of
// cuda_attention_tc_backward.cu (whose launcher computes delta, zeroes the fp32 accumulators,
// picks the GQA slicing and converts dQ afterwards); that kernel remains the path on other GPUs
// and when tests force it (ops/kernel_overrides.h kMma).
//   block = (128-key tile, kv head, batch[, slice of the GQA group]) of two warpgroups, each
//   owning 64 keys; it loops over the group's query heads and the 64-row query tiles holding a
//   query at or after its first key (Q, dO, lse, delta two stages deep, cp.async, 128-byte
//   swizzled tiles, cuda_wgmma.cuh). Per query tile a warpgroup computes
//     S^T = K Q^T and dP^T = V dO^T          (A and B from shared memory)
//     P^T = exp2(S^T - lse), dS^T = P^T (dP^T - delta)   (fp32 registers)
//     dV += P^T dO, dK += dS^T Q             (A from registers, B MN-major; fp32 registers)
//   and stores dS^T to shared memory; then dQ (64 queries x D) += dS K over the block's 128 keys
//   (A = dS^T as an MN-major operand, B = K MN-major) is added with fp32 atomics into the
//   scratch: at D = 128 each warpgroup computes 64 of the columns, at D = 64 the warpgroups take
//   turns. A warpgroup whose keys all follow the query tile, or whose keys no query of the tile
//   sees, skips its math (uniformly, after the loads and the barrier) and writes zeros for its
//   half of dS^T. Window and documents (cuda_attention_mask.cuh): the query tiles end at the one
//   holding the last query that sees the block's last key.
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/cuda_attention_mask.cuh"
#include "ops/cuda/cuda_attention_tc.cuh"
#include "ops/cuda/cuda_attention_wgmma_steps.cuh"

namespace shardtrain::cuda_kernels::flash {
namespace {

constexpr int kBwdKeys = 128;    // keys of a block: two warpgroups of 64
constexpr int kBwdQueries = 64;  // rows of a query tile
constexpr int kBwdThreads = 256;

template <int D>
constexpr size_t wgmma_backward_shared_bytes() {
  return sizeof(bf16) * (2 * kBwdKeys * D + 4 * kBwdQueries * D + kBwdKeys * kBwdQueries) +
         sizeof(float) * 4 * kBwdQueries + kSharedAlignSlack;
}
static_assert(wgmma_backward_shared_bytes<128>() ==
                  ::shardtrain::cuda_kernels::wgmma_backward_shared_bytes(128),
              "the dispatch table (cuda_dispatch.h) counts the bytes the kernel carves");

// REQUIRES: blockDim.x == kBwdThreads; dynamic shared memory wgmma_backward_shared_bytes<D>();
// grid and accumulators as flash_attention_backward sets them up for 128-key tiles.
template <int D>
__global__ void __launch_bounds__(kBwdThreads, 1)
    wgmma_backward_kernel(const bf16* dout_BTHD, const bf16* q_BTHD, const bf16* k_BTKD,
                          const bf16* v_BTKD, const float* lse_BHT, const float* delta_BHT,
                          float scale, AttentionShape shape, int heads_per_block,
                          float* dq_accum_BTHD, bf16* dk_BTKD, bf16* dv_BTKD, float* dk_accum_BTKD,
                          float* dv_accum_BTKD) {
#if SHARDTRAIN_WGMMA_COMPILED
  const int seq = shape.seq;
  const int q_tiles = (seq + kBwdQueries - 1) / kBwdQueries;
  const BackwardBlock block = backward_block(shape, heads_per_block);
  const int kv_tile = block.kv_tile, b = block.batch, kv_head = block.kv_head;
  const int first_head = block.first_head;
  const int warpgroup = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t q_token = int64_t{shape.heads} * D, kv_token = int64_t{shape.kv_heads} * D;

  extern __shared__ unsigned char shared_raw[];
  bf16* k_s = reinterpret_cast<bf16*>(align_shared_1024(shared_raw));  // [128] x D swizzled
  bf16* v_s = k_s + kBwdKeys * D;                                      // [128] x D
  bf16* q_s = v_s + kBwdKeys * D;                                      // [2][64] x D
  bf16* dout_s = q_s + 2 * kBwdQueries * D;                            // [2][64] x D
  bf16* dst_s = dout_s + 2 * kBwdQueries * D;  // dS^T: [128 keys] x 64 queries
  float* lse_s = reinterpret_cast<float*>(dst_s + kBwdKeys * kBwdQueries);  // [2][64]
  float* delta_s = lse_s + 2 * kBwdQueries;                                 // [2][64]
  const uint32_t k_address = shared_address(k_s), v_address = shared_address(v_s),
                 q_address = shared_address(q_s), dout_address = shared_address(dout_s),
                 dst_address = shared_address(dst_s);
  constexpr uint32_t kQueryTileBytes = kBwdQueries * D * sizeof(bf16);

  const int first_key = kv_tile * kBwdKeys;
  const int64_t kv_offset = b * int64_t{seq} * kv_token + int64_t{kv_head} * D;
  load_swizzled_tile_async<D, kBwdKeys, kBwdThreads>(k_s, k_BTKD + kv_offset, kv_token, first_key,
                                                     seq);
  load_swizzled_tile_async<D, kBwdKeys, kBwdThreads>(v_s, v_BTKD + kv_offset, kv_token, first_key,
                                                     seq);

  const int first_q_tile = first_key / kBwdQueries;
  // To the query tile holding the last query that sees the block's last key (window, documents).
  const int query_end = attention_mask::query_end(shape, b, first_key + kBwdKeys - 1);
  const int tiles_per_head = min(q_tiles, (query_end + kBwdQueries - 1) / kBwdQueries) - first_q_tile;
  const int steps = heads_per_block * tiles_per_head;
  auto load_step = [&](int step, int stage) {
    const int h = first_head + step / tiles_per_head;
    const int first_query = (first_q_tile + step % tiles_per_head) * kBwdQueries;
    const int64_t q_offset = b * int64_t{seq} * q_token + int64_t{h} * D;
    load_swizzled_tile_async<D, kBwdQueries, kBwdThreads>(
        q_s + stage * kBwdQueries * D, q_BTHD + q_offset, q_token, first_query, seq);
    load_swizzled_tile_async<D, kBwdQueries, kBwdThreads>(
        dout_s + stage * kBwdQueries * D, dout_BTHD + q_offset, q_token, first_query, seq);
    // lse (natural log) and delta of the tile's queries, asynchronously. Padding queries read
    // zeros: their Q and dO rows are zeros too, so P^T dO and dS^T = P^T (dP^T - delta) vanish.
    const int64_t stats = (int64_t{b} * shape.heads + h) * seq;
    if (threadIdx.x < 2 * kBwdQueries) {
      const int i = threadIdx.x % kBwdQueries, query = first_query + i;
      const bool valid = query < seq;
      const float* source = threadIdx.x < kBwdQueries ? lse_BHT : delta_BHT;
      float* target = threadIdx.x < kBwdQueries ? lse_s : delta_s;
      cp_async_4(target + stage * kBwdQueries + i, source + (valid ? stats + query : 0), valid);
    }
  };
  load_step(0, 0);
  cp_async_commit();

  const wgmma_steps::BackwardKeyMask key_mask =
      wgmma_steps::backward_key_mask(shape, b, first_key + warpgroup * 64, warp, g);
  const float scale_log2 = scale * kLog2e;
  float dk[D / 2], dv[D / 2];  // 64 keys x D each, accumulator layout
#pragma unroll
  for (int i = 0; i < D / 2; ++i) dk[i] = dv[i] = 0;
  float s[32], dp[32];  // S^T, dP^T: 64 keys x 64 queries
#pragma unroll
  for (int i = 0; i < 32; ++i) s[i] = dp[i] = 0;

  // This warpgroup's dS^T (64 keys x 64 queries, accumulator layout) into shared memory as bf16
  // pairs at their swizzled positions, for dQ.
  const auto store_dst = [&](const float(&values)[32]) {
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const int key = warpgroup * 64 + warp * 16 + g + ((i % 4) / 2) * 8;
      const int query = (i / 4) * 8 + 2 * t;
      *reinterpret_cast<uint32_t*>(dst_s + wgmma::swizzled_offset(kBwdKeys, key, query)) =
          pack_bf16(values[i], values[i + 1]);
    }
  };

  for (int step = 0; step < steps; ++step) {
    cp_async_wait_all();
    wgmma::fence_shared_for_async_proxy();
    __syncthreads();  // this step's tiles visible; the other stage and dS^T are free
    if (step + 1 < steps) {
      load_step(step + 1, (step + 1) & 1);
      cp_async_commit();
    }
    const int stage = step & 1;
    const int h = first_head + step / tiles_per_head;
    const int first_query = (first_q_tile + step % tiles_per_head) * kBwdQueries;
    const uint32_t q_tile = q_address + stage * kQueryTileBytes;
    const uint32_t dout_tile = dout_address + stage * kQueryTileBytes;
    const float* lse_tile = lse_s + stage * kBwdQueries;
    const float* delta_tile = delta_s + stage * kBwdQueries;

    // This warpgroup's first key counted from the tile's first query; from 64 on, every key
    // follows every query: nothing to add, and dQ leaves these keys out (below).
    const int key_offset = first_key + warpgroup * 64 - first_query;
    wgmma_steps::backward_step<D, kBwdKeys>(
        {k_address, v_address, q_tile, dout_tile, lse_tile, delta_tile}, warpgroup * 64, key_offset,
        first_query, key_mask,
        warp, g, t, scale_log2, s, dp, dk, dv, store_dst);
    wgmma::fence_shared_for_async_proxy();  // dS^T stores visible to the dQ wgmma
    __syncthreads();                        // both halves of dS^T written

    // dQ (64 queries x 64 columns) += dS K: at D = 128 warpgroup w takes column block w, at
    // D = 64 the warpgroups alternate.
    const bool dq_here = D == 128 || warpgroup == (step & 1);
    if (dq_here) {
      float dq[32];
      const int column_block = D == 128 ? warpgroup : 0;
      wgmma_steps::dq_product<kBwdKeys, D>(dq, dst_address, k_address, column_block, dk, dv);
      wgmma_steps::add_dq_rows<D>(dq, first_query, warp, g, t, shape, b, h, column_block,
                                  dq_accum_BTHD);
    } else {
      wgmma::wait<0>();  // this step's dK, dV products
      wgmma::fence_registers(dk);
      wgmma::fence_registers(dv);
    }
  }

  wgmma_steps::store_dkdv<D>(dk, dv, first_key + warpgroup * 64, warp, g, t, seq, kv_offset,
                             kv_token, scale, dk_BTKD, dv_BTKD, dk_accum_BTKD, dv_accum_BTKD);
#else
  __trap();  // not built for sm_90a: the dispatch table (cuda_dispatch.h) picks wgmma only where it
             // was
#endif
}

}  // namespace

void wgmma_attention_backward(const bf16* dout_BTHD, const bf16* q_BTHD, const bf16* k_BTKD,
                              const bf16* v_BTKD, const float* lse_BHT, const float* delta_BHT,
                              float scale, const AttentionShape& shape, int heads_per_block,
                              unsigned blocks, float* dq_accum_BTHD, bf16* dk_BTKD, bf16* dv_BTKD,
                              float* dk_accum_BTKD, float* dv_accum_BTKD, cudaStream_t stream) {
  dispatch_head_dim(shape.head_dim, [&](auto head_dim) {
    constexpr int D = decltype(head_dim)::value;
    auto kernel = wgmma_backward_kernel<D>;
    constexpr size_t bytes = wgmma_backward_shared_bytes<D>();
    allow_shared(kernel, bytes, "wgmma_backward_kernel");
    kernel<<<blocks, kBwdThreads, bytes, stream>>>(
        dout_BTHD, q_BTHD, k_BTKD, v_BTKD, lse_BHT, delta_BHT, scale, shape, heads_per_block,
        dq_accum_BTHD, dk_BTKD, dv_BTKD, dk_accum_BTKD, dv_accum_BTKD);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace shardtrain::cuda_kernels::flash
