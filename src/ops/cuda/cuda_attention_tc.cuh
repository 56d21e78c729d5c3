// Shared pieces of the tensor-core flash attention kernels (cuda_attention_tc_forward.cu,
// cuda_attention_tc_backward.cu, and the Hopper wgmma kernels cuda_attention_wgmma_*.cu that
// they dispatch to on compute capability 9.0): tile constants, PTX wrappers (ldmatrix,
// mma.sync, cp.async), the cp.async tile loaders (padded and 128-byte swizzled), the backward
// block mapping and launch helpers. Internal to ops/cuda (.cu files only).
//
// Causal grouped-query flash attention on the tensor cores, bf16 in and out, head dims 64 and 128,
// and 256 on the mma.sync kernels (the SIMT kernels of cuda_attention.cu handle other head dims
// up to 128). FlashAttention-2 structure
// with warp-level `mma.sync.m16n8k16` (bf16 operands, fp32 accumulators) fed by `ldmatrix`;
// tiles stream through shared memory with `cp.async`, two stages deep. Each warp owns 16 query
// (forward) or key (backward) rows; the tiles streamed past them are 64 rows (K/V forward, Q/dO
// backward). Shared rows are padded by 16 bytes (pitch D + 8) so the 8 row addresses of one
// ldmatrix hit distinct banks. Each kernel file describes its own loop. The mma.sync kernels
// also apply Gemma's logit soft cap (AttentionShape::logit_softcap); the wgmma ones do not.
// Fragment layouts (PTX ISA, mma.m16n8k16): g = lane / 4, t = lane % 4; A regs hold
// (g, 2t..2t+1), (g+8, 2t..), (g, 2t+8..), (g+8, 2t+8..); B regs (k 2t..2t+1, n g), (k 2t+8.., n
// g); C holds (g, 2t..2t+1), (g+8, 2t..2t+1). So two adjacent C tiles of scores, rounded to bf16,
// are exactly the A fragment of the next product (P V), with no trip through shared memory.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_ptx.cuh"
#include "ops/cuda/cuda_wgmma.cuh"

namespace shardtrain::cuda_kernels::flash {

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

// ---- PTX wrappers (cuda_ptx.cuh) ----

using cuda_ptx::cp_async_16;
using cuda_ptx::cp_async_4;
using cuda_ptx::cp_async_commit;
using cuda_ptx::cp_async_wait_all;
using cuda_ptx::ldmatrix_x4;
using cuda_ptx::ldmatrix_x4_trans;
using cuda_ptx::mma;
using cuda_ptx::shared_address;

// 2^x on the special function unit (flush-to-zero; -inf gives 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float low, float high) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(low, high);  // .x (low half) = low
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The A fragment (16 x 16 bf16) made of two adjacent 16 x 8 C tiles of fp32 results, rounded:
// the layouts line up (see above), so P and dS feed the next product from registers.
__device__ __forceinline__ void a_fragment_of(const float (&left)[4], const float (&right)[4],
                                              uint32_t (&a)[4]) {
  a[0] = pack_bf16(left[0], left[1]);
  a[1] = pack_bf16(left[2], left[3]);
  a[2] = pack_bf16(right[0], right[1]);
  a[3] = pack_bf16(right[2], right[3]);
}

// The work of one backward block: a key tile of one batch and kv head, for `heads_per_block`
// query heads of its group from `first_head`. Block indices run over (key tile, kv head, slice
// of the group, batch) with the heaviest key tiles (most query tiles after them) first; when a
// block walks less than the whole group, several blocks share a key tile and add their dK, dV
// into fp32 accumulators instead of storing them.
struct BackwardBlock {
  int kv_tile, batch, kv_head, first_head;
};
__device__ __forceinline__ BackwardBlock backward_block(const AttentionShape& shape,
                                                        int heads_per_block) {
  const int group = shape.heads / shape.kv_heads;
  const int slices = group / heads_per_block;
  const int units = shape.kv_heads * slices;
  const int heads_and_batches = units * shape.batch;
  const int unit = blockIdx.x % heads_and_batches % units;
  BackwardBlock block;
  block.kv_tile = blockIdx.x / heads_and_batches;
  block.batch = blockIdx.x % heads_and_batches / units;
  block.kv_head = unit / slices;
  block.first_head = block.kv_head * group + (unit % slices) * heads_per_block;
  return block;
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

// Rows [first, first + kRows) of one head into a swizzled tile of kRows rows (cuda_wgmma.cuh:
// D / 64 column blocks of 128-byte rows); rows at or past `seq` become zeros. Asynchronous:
// commit, wait, then wgmma::fence_shared_for_async_proxy() and a barrier before wgmma reads it.
// REQUIRES: called by all kBlockThreads threads of the block; tile 1024-byte aligned.
template <int D, int kRows, int kBlockThreads>
__device__ __forceinline__ void load_swizzled_tile_async(bf16* tile, const bf16* head_base,
                                                         int64_t token_stride, int first, int seq) {
  // A thread copies the same 16-byte chunk of rows row0, row0 + kRowsPerPass, ...: as
  // kRowsPerPass is a multiple of 8 its swizzled column is the same in every row.
  constexpr int kChunksPerRow = D / 8;
  constexpr int kRowsPerPass = kBlockThreads / kChunksPerRow;
  static_assert(
      kBlockThreads % kChunksPerRow == 0 && kRowsPerPass % 8 == 0 && kRows % kRowsPerPass == 0,
      "a pass covers whole 8-row swizzle periods");
  const int chunk = threadIdx.x % kChunksPerRow, row0 = threadIdx.x / kChunksPerRow;
  bf16* dst = tile + wgmma::swizzled_offset(kRows, row0, chunk * 8);
  const bf16* src = head_base + int64_t{first + row0} * token_stride + chunk * 8;
#pragma unroll
  for (int pass = 0; pass < kRows / kRowsPerPass; ++pass) {
    const bool valid = first + row0 + pass * kRowsPerPass < seq;
    cp_async_16(dst + pass * kRowsPerPass * wgmma::kBlockColumns,
                valid ? src + pass * kRowsPerPass * token_stride : head_base, valid);
  }
}

// The first 1024-byte aligned address in dynamic shared memory (swizzled tiles need it); the
// kernel asks for kSharedAlignSlack extra bytes.
constexpr size_t kSharedAlignSlack = 1024;
__device__ __forceinline__ unsigned char* align_shared_1024(unsigned char* raw) {
  const uint32_t address = shared_address(raw);
  return raw + ((1024u - address % 1024u) % 1024u);
}

// ---- Hopper (wgmma) kernels: cuda_attention_wgmma_forward.cu, _backward.cu ----

// Launched when the dispatch table (cuda_dispatch.h) picks AttentionKernel::kWgmma: compute
// capability 9.0 and a build with sm_90a (SHARDTRAIN_CUDA_WGMMA).
void wgmma_attention_forward(const bf16* q_BTHD, const bf16* k_BTKD, const bf16* v_BTKD,
                             float scale, const AttentionShape& shape, bf16* out_BTHD,
                             float* lse_BHT, cudaStream_t stream);
// The warp-specialised forward (cuda_attention_ws_forward.cu: TMA producer, ping-pong consumers),
// launched when the table picks AttentionKernel::kWgmmaWs. False (nothing launched) when the TMA
// descriptors cannot be made (no driver entry point, a misaligned tensor): the caller runs
// wgmma_attention_forward instead.
bool ws_attention_forward(const bf16* q_BTHD, const bf16* k_BTKD, const bf16* v_BTKD, float scale,
                          const AttentionShape& shape, bf16* out_BTHD, float* lse_BHT,
                          cudaStream_t stream);
// The warp-specialised backward (cuda_attention_ws_backward.cu), with the wgmma backward's
// arguments; false (nothing launched) when the TMA descriptors cannot be made: the caller runs
// wgmma_attention_backward instead.
bool ws_attention_backward(const bf16* dout_BTHD, const bf16* q_BTHD, const bf16* k_BTKD,
                           const bf16* v_BTKD, const float* lse_BHT, const float* delta_BHT,
                           float scale, const AttentionShape& shape, int heads_per_block,
                           unsigned blocks, float* dq_accum_BTHD, bf16* dk_BTKD, bf16* dv_BTKD,
                           float* dk_accum_BTKD, float* dv_accum_BTKD, cudaStream_t stream);
// The backward kernel over `blocks` 128-key blocks; delta, the zeroed accumulators and the
// GQA slicing as flash_attention_backward prepares them for 128-key tiles.
void wgmma_attention_backward(const bf16* dout_BTHD, const bf16* q_BTHD, const bf16* k_BTKD,
                              const bf16* v_BTKD, const float* lse_BHT, const float* delta_BHT,
                              float scale, const AttentionShape& shape, int heads_per_block,
                              unsigned blocks, float* dq_accum_BTHD, bf16* dk_BTKD, bf16* dv_BTKD,
                              float* dk_accum_BTKD, float* dv_accum_BTKD, cudaStream_t stream);

// ---- launch helpers ----

// Raises `kernel`'s dynamic shared memory limit to `bytes` after checking them against the
// device limits the dispatcher sees (a table row that does not fit aborts with file:line).
template <typename Kernel>
inline void allow_shared(Kernel kernel, size_t bytes, const char* name) {
  require_shared_fits(bytes, device_limits(), name);
  SHARDTRAIN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             static_cast<int>(bytes)));
}

// The wgmma kernels do not apply the logit soft cap; the dispatch table never picks them for a
// capped shape. Aborts with file:line (a broken table, not a user error) if it did.
inline void require_uncapped_on_hopper(const AttentionConfig& config, const AttentionShape& shape) {
  const bool hopper =
      config.kernel == AttentionKernel::kWgmma || config.kernel == AttentionKernel::kWgmmaWs;
  if (!hopper || shape.logit_softcap <= 0) return;
  std::fprintf(stderr, "%s:%d: %s attention kernel picked for a soft-capped shape (cap %g)\n",
               __FILE__, __LINE__, attention_kernel_name(config.kernel), shape.logit_softcap);
  std::abort();
}

// Calls fn(std::integral_constant<int, D>) for the supported head dims.
template <typename Fn>
inline void dispatch_head_dim(int head_dim, Fn&& fn) {
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

// The same for the mma.sync kernels, which also take head dim 256 (4-warp blocks only).
template <typename Fn>
inline void dispatch_mma_head_dim(int head_dim, Fn&& fn) {
  if (head_dim == 256) {
    fn(std::integral_constant<int, 256>{});
  } else {
    dispatch_head_dim(head_dim, fn);
  }
}

}  // namespace shardtrain::cuda_kernels::flash
