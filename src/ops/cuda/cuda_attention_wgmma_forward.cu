// Causal grouped-query flash attention forward with Hopper warpgroup MMAs (wgmma, sm_90a; bf16,
// head dims 64 and 128). Same contract and results as the mma.sync kernel of
// cuda_attention_tc_forward.cu, which remains the path on other GPUs and when tests force it
// (ops/kernel_overrides.h kMma).
//   block = (128-row query tile, head, batch) of two warpgroups, each owning 64 query rows;
//   heaviest query tiles first. K/V tiles of 128 keys (64 at D = 64) stream through shared memory
//   (cp.async, two stages, 128-byte swizzled so wgmma reads them through descriptors,
//   cuda_wgmma.cuh). Per tile a warpgroup computes S = Q K^T (Q and K from shared memory), the
//   online softmax in fp32 registers in the log2 domain, and O += P V with P straight from
//   registers (the accumulator layout is the A-fragment layout) and V as an MN-major operand.
//   Pipelined: tile j's S is issued with tile j-1's P V, and tile j's softmax runs while that
//   P V executes. Only tiles that straddle a warp's rows are masked. Window and documents
//   (cuda_attention_mask.cuh): K/V tiles start at the one holding the first key of the block's
//   first row, and keys before a row's first key are masked only in tiles that reach below some
//   row's first key.
// Why: wgmma reads each shared K/V tile once per 64 query rows (mma.sync: once per 16), so the
// shared-memory traffic no longer bounds the tensor cores (the mma.sync kernel peaks near
// 200 TFLOP/s on an H200, see ATTENTION_NOTES.md).
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "ops/cuda/cuda_attention_tc.cuh"
#include "ops/cuda/cuda_attention_wgmma_steps.cuh"

namespace shardtrain::cuda_kernels::flash {
namespace {

constexpr int kWgQueryRows = 128;  // two warpgroups of 64 rows
// Keys of a K/V tile: 128 at D = 128 (one block of ~230 registers a thread per SM); 64 at
// D = 64, where the softmax outweighs the products, so that two blocks fit an SM (<= 128
// registers) and one block's softmax overlaps the other's products.
template <int D>
constexpr int kWgKeys = D == 64 ? 64 : 128;
template <int D>
constexpr int kWgBlocksPerSm = D == 64 ? 2 : 1;
constexpr int kWgThreads = 256;

template <int D>
constexpr size_t wgmma_forward_shared_bytes() {
  return sizeof(bf16) * (kWgQueryRows + 4 * kWgKeys<D>)*D + kSharedAlignSlack;
}
static_assert(wgmma_forward_shared_bytes<128>() ==
                      ::shardtrain::cuda_kernels::wgmma_forward_shared_bytes(128) &&
                  wgmma_forward_shared_bytes<64>() ==
                      ::shardtrain::cuda_kernels::wgmma_forward_shared_bytes(64),
              "the dispatch table (cuda_dispatch.h) counts the bytes the kernel carves");

// REQUIRES: blockDim.x == kWgThreads; dynamic shared memory wgmma_forward_shared_bytes<D>();
// a 1-D grid of (query tiles of 128) x heads x batch blocks.
template <int D>
__global__ void __launch_bounds__(kWgThreads, kWgBlocksPerSm<D>)
    wgmma_forward_kernel(const bf16* q_BTHD, const bf16* k_BTKD, const bf16* v_BTKD, float scale,
                         AttentionShape shape, bf16* out_BTHD, float* lse_BHT) {
#if SHARDTRAIN_WGMMA_COMPILED
  const int seq = shape.seq;
  // Heaviest (longest causal row) tiles first over the whole grid, so the last wave holds the
  // shortest tiles; the heads of one tile row run side by side (their K/V share L2).
  const int heads_and_batches = shape.heads * shape.batch;
  const int q_tiles = gridDim.x / heads_and_batches;
  const int q_tile = q_tiles - 1 - static_cast<int>(blockIdx.x) / heads_and_batches;
  const int h = blockIdx.x % shape.heads, b = blockIdx.x / shape.heads % shape.batch;
  const int kv_head = h / (shape.heads / shape.kv_heads);
  const int warpgroup = threadIdx.x / 128, warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t q_token = int64_t{shape.heads} * D, kv_token = int64_t{shape.kv_heads} * D;

  extern __shared__ unsigned char shared_raw[];
  bf16* q_s = reinterpret_cast<bf16*>(align_shared_1024(shared_raw));  // [128] x D swizzled
  bf16* k_s = q_s + kWgQueryRows * D;                                  // [2][kWgKeys] x D
  bf16* v_s = k_s + 2 * kWgKeys<D> * D;                                // [2][kWgKeys] x D
  const uint32_t q_address = shared_address(q_s), k_address = shared_address(k_s),
                 v_address = shared_address(v_s);
  constexpr uint32_t kKvTileBytes = kWgKeys<D> * D * sizeof(bf16);

  const bf16* q_base = q_BTHD + b * int64_t{seq} * q_token + int64_t{h} * D;
  const bf16* k_base = k_BTKD + b * int64_t{seq} * kv_token + int64_t{kv_head} * D;
  const bf16* v_base = v_BTKD + b * int64_t{seq} * kv_token + int64_t{kv_head} * D;
  const int first_query = q_tile * kWgQueryRows;
  const int group_first_query = first_query + warpgroup * 64;
  // Causal: K/V tiles up to the one holding the tile's last real row, from the one holding the
  // first key of its first row. Every warpgroup works on every tile: with 64-key tiles the last
  // one may lie wholly after warpgroup 0's rows, or a first one wholly before warpgroup 1's
  // first keys, and its mask then zeroes all of P (softmax_tile keeps such rows at 0).
  const int last_kv_tile = (min(first_query + kWgQueryRows, seq) - 1) / kWgKeys<D>;
  const int first_kv_tile = attention_mask::first_key(shape, b, first_query) / kWgKeys<D>;
  const wgmma_steps::ForwardRowMask row_mask =
      wgmma_steps::forward_row_mask(shape, b, group_first_query, warp, g);
  load_swizzled_tile_async<D, kWgQueryRows, kWgThreads>(q_s, q_base, q_token, first_query, seq);
  load_swizzled_tile_async<D, kWgKeys<D>, kWgThreads>(k_s + (first_kv_tile & 1) * kWgKeys<D> * D,
                                                      k_base, kv_token, first_kv_tile * kWgKeys<D>,
                                                      seq);
  cp_async_commit();

  const float scale_log2 = scale * kLog2e;
  float s[kWgKeys<D> / 2];  // scores of 64 rows x the tile's keys (accumulator layout), then P
  float o[D / 2];           // output of 64 rows x D
  uint32_t p[kWgKeys<D> / 16][4];  // P of the previous tile as A fragments, one per 16 keys
#pragma unroll
  for (int i = 0; i < kWgKeys<D> / 2; ++i) s[i] = 0;
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0, 0};  // rows g and g + 8 (log2)

  // O += P V of the tile whose V sits in stage `stage` (asynchronous: commit, wait later).
  const auto issue_pv = [&](int stage) {
#pragma unroll
    for (int kc = 0; kc < kWgKeys<D> / 16; ++kc) {
      wgmma::mma_rs<D, 1>(o, p[kc],
                          wgmma::mn_major(v_address + stage * kKvTileBytes, kWgKeys<D>, kc), 1);
    }
    wgmma::commit();
  };

  // Pipeline: tile j's S = Q K^T is issued together with tile j - 1's O += P V, and the
  // softmax of tile j runs while P V still executes. K_j and V_(j-1) arrive in the same
  // cp.async group, so two stages of each suffice.
  for (int kv_tile = first_kv_tile; kv_tile <= last_kv_tile; ++kv_tile) {
    cp_async_wait_all();
    wgmma::fence_shared_for_async_proxy();
    __syncthreads();  // K_j, V_(j-1) visible to wgmma; the stages of K_(j-1), V_(j-2) are free
    if (kv_tile < last_kv_tile) {
      const int next = (kv_tile + 1) & 1;
      load_swizzled_tile_async<D, kWgKeys<D>, kWgThreads>(
          k_s + next * kWgKeys<D> * D, k_base, kv_token, (kv_tile + 1) * kWgKeys<D>, seq);
    }
    load_swizzled_tile_async<D, kWgKeys<D>, kWgThreads>(
        v_s + (kv_tile & 1) * kWgKeys<D> * D, v_base, kv_token, kv_tile * kWgKeys<D>, seq);
    cp_async_commit();
    // Keys counted from this warpgroup's first row.
    const int key_offset = kv_tile * kWgKeys<D> - group_first_query;
    const uint32_t k_tile = k_address + (kv_tile & 1) * kKvTileBytes;

    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      wgmma::mma_ss<kWgKeys<D>, 0, 0>(s,
                                      wgmma::k_major(q_address, kWgQueryRows, warpgroup * 64, kk),
                                      wgmma::k_major(k_tile, kWgKeys<D>, 0, kk), kk > 0);
    }
    wgmma::commit();
    if (kv_tile > first_kv_tile) {
      issue_pv((kv_tile - 1) & 1);
      wgmma::wait<1>();  // S done; P V may still run
    } else {
      wgmma::wait<0>();
    }
    wgmma::fence_registers(s);

    float correction[2];
    wgmma_steps::softmax_tile<kWgKeys<D>>(s, key_offset, warp, g, t, scale_log2,
                                          row_mask.row_first,
                                          key_offset < row_mask.greatest_first, row_max, row_sum,
                                          correction);
    wgmma::wait<0>();  // the previous tile's P V: o and p are free
    wgmma::fence_registers(o);
    wgmma_steps::rescale_and_pack<kWgKeys<D>, D>(o, s, correction, p);
  }
  // The last tile's P V.
  cp_async_wait_all();
  wgmma::fence_shared_for_async_proxy();
  __syncthreads();  // V_last visible to wgmma
  wgmma::fence();
  issue_pv(last_kv_tile & 1);
  wgmma::wait<0>();
  wgmma::fence_registers(o);

  wgmma_steps::store_forward_rows<D>(o, row_max, row_sum, group_first_query, warp, g, t, shape, b,
                                     h, out_BTHD, lse_BHT);
#else
  __trap();  // not built for sm_90a: the dispatch table (cuda_dispatch.h) picks wgmma only where it
             // was
#endif
}

}  // namespace

void wgmma_attention_forward(const bf16* q_BTHD, const bf16* k_BTKD, const bf16* v_BTKD,
                             float scale, const AttentionShape& shape, bf16* out_BTHD,
                             float* lse_BHT, cudaStream_t stream) {
  dispatch_head_dim(shape.head_dim, [&](auto head_dim) {
    constexpr int D = decltype(head_dim)::value;
    auto kernel = wgmma_forward_kernel<D>;
    constexpr size_t bytes = wgmma_forward_shared_bytes<D>();
    allow_shared(kernel, bytes, "wgmma_forward_kernel");
    const int64_t q_tiles = (shape.seq + kWgQueryRows - 1) / kWgQueryRows;
    const auto grid = static_cast<unsigned>(q_tiles * shape.heads * shape.batch);
    kernel<<<grid, kWgThreads, bytes, stream>>>(q_BTHD, k_BTKD, v_BTKD, scale, shape, out_BTHD,
                                                lse_BHT);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace shardtrain::cuda_kernels::flash
