// Causal grouped-query flash attention forward, warp-specialised (FlashAttention-3's structure;
// sm_90a, bf16, head dims 64 and 128). Same contract as wgmma_forward_kernel
// (cuda_attention_wgmma_forward.cu), which it replaces where the dispatch table picks it; the same
// results bit for bit at D = 128, within 1 bf16 ulp at D = 64 (128-key tiles there, not 64).
//   block = (query tile, head, batch), heaviest tiles first, of 1 + kWsConsumers<D> warpgroups:
//   warpgroup 0 is the producer: one thread issues TMA copies (cuda_tma.cuh) of the Q tile and of
//   every 128-key K and V tile into a ring of kWsStages<D> stages, each stage guarded by a "full"
//   mbarrier (bytes delivered) and an "empty" one (every consumer thread done reading); it keeps
//   24 registers a thread (setmaxnreg) so that the consumers get the rest.
//   The others are the consumers (three at D = 64, two at D = 128), 64 query rows each, with the
//   wgmma kernel's loop: tile j's S = Q K^T issued together with tile j-1's O += P V, the online
//   softmax of tile j while that P V runs. Ping-pong: named barriers order the consumers' issue
//   of their products in turn, so one warpgroup's softmax runs while another's products use the
//   tensor cores.
//   Window and documents (cuda_attention_mask.cuh): the K/V tiles start at the one holding the
//   first key of the block's first row (producer and consumers count ring stages from there);
//   keys before a row's first key are masked in the tiles that reach below some row's first key.
// Why: the wgmma kernel's block barrier per tile and cp.async issue by every thread left the
// forward latency-bound (Nsight Compute: 0.57 eligible warps per scheduler, tensor pipe 34% busy
// at the Qwen shape, ops/cuda/ATTENTION_NOTES.md); here the loads leave the consumers' instruction
// stream. The Hopper default because it measured faster than the cp.async wgmma kernel
// (ops/cuda/ATTENTION_NOTES.md, bench/RESULTS.md); tests force that one with ops/kernel_overrides.h
// kWgmma.
#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/cuda_attention_mask.cuh"
#include "ops/cuda/cuda_attention_tc.cuh"
#include "ops/cuda/cuda_attention_wgmma_steps.cuh"
#include "ops/cuda/cuda_tma.cuh"

namespace shardtrain::cuda_kernels::flash {
namespace {

// Consumer warpgroups of 64 query rows each: three at D = 64 (192-row query tiles, as
// FlashAttention-3 configures head dim 64), two at D = 128. At D = 64 a tile's products are half
// those of D = 128 while its softmax is the same, so two consumers of 64 rows left the tensor
// cores idle while both softmaxed (the cp.async kernel beat this one there on the H100); a third
// consumer keeps one more warpgroup's products in flight. Registers: 24 x 128 for the producer
// and 160 (D = 64) or 240 (D = 128) a consumer thread stay within the SM's 64 K.
constexpr int ws_consumers(int head_dim) { return head_dim == 64 ? 3 : 2; }
template <int D>
constexpr int kWsConsumers = ws_consumers(D);
template <int D>
constexpr int kWsQueryRows = 64 * kWsConsumers<D>;
template <int D>
constexpr int kWsThreads = 128 * (1 + kWsConsumers<D>);
constexpr int kWsKeys = 128;  // keys of a K/V tile
// Used only in the sm_90a body of the kernel.
template <int D>
[[maybe_unused]] constexpr int kWsConsumerThreads = 128 * kWsConsumers<D>;
[[maybe_unused]] constexpr int kProducerRegisters = 24;
template <int D>
[[maybe_unused]] constexpr int kConsumerRegisters = kWsConsumers<D> == 3 ? 160 : 240;
template <int D>
constexpr int kWsStages = D == 64 ? 3 : 2;
// Named barrier ids of the ping-pong, one per consumer (0 is __syncthreads): consumer c issues
// its products after consumer c - 1 (mod the consumers) has issued its own.
[[maybe_unused]] constexpr int kIssueBarrier = 1;
// Threads that meet at one issue barrier: the consumer waiting and the one arriving.
[[maybe_unused]] constexpr int kIssueBarrierThreads = 256;

template <int D>
constexpr size_t ws_forward_shared_bytes() {
  // Q + stages of K and V, then the mbarriers (q_full, and k_full, v_full, k_empty, v_empty per
  // stage), 8 bytes each.
  return sizeof(bf16) * (kWsQueryRows<D> + 2 * kWsStages<D> * kWsKeys) * D +
         8 * (1 + 4 * kWsStages<D>)+kSharedAlignSlack;
}
static_assert(kProducerRegisters * 128 + kConsumerRegisters<64> * kWsConsumerThreads<64> <= 65536 &&
                  kProducerRegisters * 128 + kConsumerRegisters<128> * kWsConsumerThreads<128> <=
                      65536,
              "the warpgroups' registers fit the SM's register file");
static_assert(ws_forward_shared_bytes<128>() ==
                      ::shardtrain::cuda_kernels::wgmma_ws_forward_shared_bytes(128) &&
                  ws_forward_shared_bytes<64>() ==
                      ::shardtrain::cuda_kernels::wgmma_ws_forward_shared_bytes(64),
              "the dispatch table (cuda_dispatch.h) counts the bytes the kernel carves");

struct WsMaps {
  CUtensorMap q, k, v;
};

// REQUIRES: blockDim.x == kWsThreads<D>; dynamic shared memory ws_forward_shared_bytes<D>(); a
// 1-D grid of (query tiles of kWsQueryRows<D>) x heads x batch blocks; maps from
// tensor_map_of_heads with boxes of kWsQueryRows<D> rows (Q) and kWsKeys rows (K, V).
template <int D>
__global__ void __launch_bounds__(kWsThreads<D>, 1)
    ws_forward_kernel(const __grid_constant__ WsMaps maps, float scale, AttentionShape shape,
                      bf16* out_BTHD, float* lse_BHT) {
#if SHARDTRAIN_WGMMA_COMPILED
  constexpr int kStages = kWsStages<D>;
  constexpr int kQueryRows = kWsQueryRows<D>;
  constexpr int kConsumerThreads = kWsConsumerThreads<D>;
  constexpr uint32_t kQTileBytes = kQueryRows * D * sizeof(bf16);
  constexpr uint32_t kKvTileBytes = kWsKeys * D * sizeof(bf16);
  constexpr uint32_t kBlockBytes = kWsKeys * wgmma::kSwizzleBytes;  // one column block of a tile
  const int seq = shape.seq;
  const int heads_and_batches = shape.heads * shape.batch;
  const int q_tiles = gridDim.x / heads_and_batches;
  const int q_tile = q_tiles - 1 - static_cast<int>(blockIdx.x) / heads_and_batches;
  const int h = blockIdx.x % shape.heads, b = blockIdx.x / shape.heads % shape.batch;
  const int kv_head = h / (shape.heads / shape.kv_heads);
  const int first_query = q_tile * kQueryRows;
  const int last_kv_tile = (min(first_query + kQueryRows, seq) - 1) / kWsKeys;
  const int first_kv_tile = attention_mask::first_key(shape, b, first_query) / kWsKeys;
  const int kv_tiles = last_kv_tile - first_kv_tile + 1;  // ring position j: tile first + j

  extern __shared__ unsigned char shared_raw[];
  unsigned char* base = align_shared_1024(shared_raw);
  const uint32_t q_address = shared_address(base);
  const uint32_t k_address = q_address + kQTileBytes;
  const uint32_t v_address = k_address + kStages * kKvTileBytes;
  const uint32_t barriers = v_address + kStages * kKvTileBytes;
  const uint32_t q_full = barriers;
  const auto k_full = [&](int stage) { return barriers + 8 * (1 + stage); };
  const auto v_full = [&](int stage) { return barriers + 8 * (1 + kStages + stage); };
  const auto k_empty = [&](int stage) { return barriers + 8 * (1 + 2 * kStages + stage); };
  const auto v_empty = [&](int stage) { return barriers + 8 * (1 + 3 * kStages + stage); };

  if (threadIdx.x == 0) {
    tma::mbarrier_init(q_full, 1);
    for (int stage = 0; stage < kStages; ++stage) {
      tma::mbarrier_init(k_full(stage), 1);
      tma::mbarrier_init(v_full(stage), 1);
      tma::mbarrier_init(k_empty(stage), kConsumerThreads);
      tma::mbarrier_init(v_empty(stage), kConsumerThreads);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    tma::release_registers<kProducerRegisters>();
    if (threadIdx.x == 0) {
      tma::prefetch_map(&maps.q);
      tma::prefetch_map(&maps.k);
      tma::prefetch_map(&maps.v);
      tma::arrive_expect_tx(q_full, kQTileBytes);
      for (int block = 0; block < D / wgmma::kBlockColumns; ++block) {
        tma::load_4d(q_address + block * kQueryRows * wgmma::kSwizzleBytes, &maps.q,
                     block * wgmma::kBlockColumns, h, first_query, b, q_full);
      }
      for (int j = 0; j < kv_tiles; ++j) {
        const int stage = j % kStages;
        const uint32_t free_parity = ((j / kStages) & 1) ^ 1;  // first pass: at once
        const int first_key = (first_kv_tile + j) * kWsKeys;
        tma::wait(k_empty(stage), free_parity);
        tma::arrive_expect_tx(k_full(stage), kKvTileBytes);
        for (int block = 0; block < D / wgmma::kBlockColumns; ++block) {
          tma::load_4d(k_address + stage * kKvTileBytes + block * kBlockBytes, &maps.k,
                       block * wgmma::kBlockColumns, kv_head, first_key, b, k_full(stage));
        }
        tma::wait(v_empty(stage), free_parity);
        tma::arrive_expect_tx(v_full(stage), kKvTileBytes);
        for (int block = 0; block < D / wgmma::kBlockColumns; ++block) {
          tma::load_4d(v_address + stage * kKvTileBytes + block * kBlockBytes, &maps.v,
                       block * wgmma::kBlockColumns, kv_head, first_key, b, v_full(stage));
        }
      }
    }
    return;
  }
  tma::claim_registers<kConsumerRegisters<D>>();

  constexpr int kConsumers = kWsConsumers<D>;
  const int consumer = warpgroup - 1;  // query rows 64 * consumer ..
  const int warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  const int group_first_query = first_query + consumer * 64;
  const int own_barrier = kIssueBarrier + consumer;
  const int next_barrier = kIssueBarrier + (consumer + 1) % kConsumers;
  const wgmma_steps::ForwardRowMask row_mask =
      wgmma_steps::forward_row_mask(shape, b, group_first_query, warp, g);

  const float scale_log2 = scale * kLog2e;
  float s[kWsKeys / 2];         // scores of 64 rows x the tile's keys (accumulator layout), then P
  float o[D / 2];               // output of 64 rows x D
  uint32_t p[kWsKeys / 16][4];  // P of the previous tile as A fragments, one per 16 keys
#pragma unroll
  for (int i = 0; i < kWsKeys / 2; ++i) s[i] = 0;
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0;
  float row_max[2] = {-INFINITY, -INFINITY}, row_sum[2] = {0, 0};  // rows g and g + 8 (log2)

  const auto issue_pv = [&](int stage) {
#pragma unroll
    for (int kc = 0; kc < kWsKeys / 16; ++kc) {
      wgmma::mma_rs<D, 1>(o, p[kc], wgmma::mn_major(v_address + stage * kKvTileBytes, kWsKeys, kc),
                          1);
    }
    wgmma::commit();
  };

  tma::wait(q_full, 0);
  // Consumer 0 first: the last consumer stands in for its turn before.
  if (consumer == kConsumers - 1) tma::named_arrive(kIssueBarrier, kIssueBarrierThreads);

  for (int j = 0; j < kv_tiles; ++j) {
    const int kv_tile = first_kv_tile + j;
    const int stage = j % kStages;
    const int previous = (j + kStages - 1) % kStages;
    tma::wait(k_full(stage), (j / kStages) & 1);
    if (j > 0) tma::wait(v_full(previous), ((j - 1) / kStages) & 1);
    const int key_offset = kv_tile * kWsKeys - group_first_query;  // from this warpgroup's row 0
    const uint32_t k_tile = k_address + stage * kKvTileBytes;

    tma::named_sync(own_barrier, kIssueBarrierThreads);  // the consumer before has issued its turn
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      wgmma::mma_ss<kWsKeys, 0, 0>(s, wgmma::k_major(q_address, kQueryRows, consumer * 64, kk),
                                   wgmma::k_major(k_tile, kWsKeys, 0, kk), kk > 0);
    }
    wgmma::commit();
    if (j > 0) issue_pv(previous);
    if (j > 0) {
      wgmma::wait<1>();  // S done; P V may still run
    } else {
      wgmma::wait<0>();
    }
    wgmma::fence_registers(s);
    // The next consumer's turn to issue (an arrive between the issue and the wait above would
    // make ptxas serialise the products: C7514).
    tma::named_arrive(next_barrier, kIssueBarrierThreads);
    tma::arrive(k_empty(stage));  // this thread's reads of K_j are done

    float correction[2];
    wgmma_steps::softmax_tile<kWsKeys>(s, key_offset, warp, g, t, scale_log2, row_mask.row_first,
                                       key_offset < row_mask.greatest_first, row_max, row_sum,
                                       correction);
    wgmma::wait<0>();  // the previous tile's P V: o and p are free
    wgmma::fence_registers(o);
    if (j > 0) tma::arrive(v_empty(previous));
    wgmma_steps::rescale_and_pack<kWsKeys, D>(o, s, correction, p);
  }
  // The last tile's P V, in turn like the others.
  const int last_stage = (kv_tiles - 1) % kStages;
  tma::wait(v_full(last_stage), ((kv_tiles - 1) / kStages) & 1);
  tma::named_sync(own_barrier, kIssueBarrierThreads);
  wgmma::fence();
  issue_pv(last_stage);
  wgmma::wait<0>();
  wgmma::fence_registers(o);
  tma::named_arrive(next_barrier, kIssueBarrierThreads);
  // The last consumer's last arrival on consumer 0's barrier (it arrived once before the first
  // turn).
  if (consumer == 0) tma::named_sync(own_barrier, kIssueBarrierThreads);

  wgmma_steps::store_forward_rows<D>(o, row_max, row_sum, group_first_query, warp, g, t, shape, b,
                                     h, out_BTHD, lse_BHT);
#else
  __trap();  // not built for sm_90a: the dispatch table (cuda_dispatch.h) picks this kernel only
             // where it was
#endif
}

}  // namespace

bool ws_attention_forward(const bf16* q_BTHD, const bf16* k_BTKD, const bf16* v_BTKD, float scale,
                          const AttentionShape& shape, bf16* out_BTHD, float* lse_BHT,
                          cudaStream_t stream) {
  WsMaps maps;
  const int query_rows = 64 * ws_consumers(shape.head_dim);  // kWsQueryRows<D> of the launch
  if (!tma::tensor_map_of_heads(maps.q, q_BTHD, shape.batch, shape.seq, shape.heads, shape.head_dim,
                                query_rows) ||
      !tma::tensor_map_of_heads(maps.k, k_BTKD, shape.batch, shape.seq, shape.kv_heads,
                                shape.head_dim, kWsKeys) ||
      !tma::tensor_map_of_heads(maps.v, v_BTKD, shape.batch, shape.seq, shape.kv_heads,
                                shape.head_dim, kWsKeys)) {
    count_warp_specialised_fallback(tma::kNoTensorMaps);
    return false;
  }
  count_warp_specialised_launch(/*backward=*/false);
  dispatch_head_dim(shape.head_dim, [&](auto head_dim) {
    constexpr int D = decltype(head_dim)::value;
    auto kernel = ws_forward_kernel<D>;
    constexpr size_t bytes = ws_forward_shared_bytes<D>();
    allow_shared(kernel, bytes, "ws_forward_kernel");
    const int64_t q_tiles = (shape.seq + kWsQueryRows<D> - 1) / kWsQueryRows<D>;
    const auto grid = static_cast<unsigned>(q_tiles * shape.heads * shape.batch);
    kernel<<<grid, kWsThreads<D>, bytes, stream>>>(maps, scale, shape, out_BTHD, lse_BHT);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
  });
  return true;
}

}  // namespace shardtrain::cuda_kernels::flash
