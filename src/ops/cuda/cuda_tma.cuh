// Hopper (sm_90a) asynchronous-copy pieces for warp-specialised kernels: the tensor memory
// accelerator (TMA: cp.async.bulk.tensor into 128-byte-swizzled shared tiles, the layout
// cuda_wgmma.cuh describes, and cp.reduce.async.bulk.tensor adding such tiles into global
// memory), shared-memory mbarriers with transaction counts, named barriers
// between warpgroups, and the per-warpgroup register budget (setmaxnreg). Internal to ops/cuda
// (.cu files only).
//
// Device side: every wrapper compiles to nothing unless the file is built for sm_90a
// (SHARDTRAIN_WGMMA_COMPILED, cuda_wgmma.cuh); kernels that use them are only picked by the
// dispatch table (cuda_dispatch.h) on compute capability 9.0 in a build with 90a.
// Host side: tensor_map_of_heads builds the TMA descriptor of a [B, T, heads, D] bf16 tensor
// (tensor_map_of_heads_f32: fp32; tensor_map_2d: of a bf16 matrix)
// through the driver's cuTensorMapEncodeTiled (found at run time with
// cudaGetDriverEntryPointByVersion: no link against libcuda).
//
// mbarrier protocol used by the kernels (PTX ISA "mbarrier"): a barrier starts in phase 0;
// wait(bar, parity) returns once the phase of that parity has completed, so a fresh barrier
// passes wait(bar, 1) at once (how a producer's first pass over its empty stages proceeds).
// A "full" barrier of a stage has one arrival (the producer's arrive_expect_tx) plus the bytes
// the TMA copies deliver; an "empty" barrier counts the consumer threads that release the stage.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only)
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>

#include "ops/cuda/cuda_wgmma.cuh"

namespace shardtrain::cuda_kernels::tma {

// ---- mbarriers (shared::cta, 8 bytes each, 8-byte aligned) ----

__device__ __forceinline__ void mbarrier_init(uint32_t bar, uint32_t arrivals) {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
#endif
}
// Makes the initialised barriers visible to the async proxy (TMA) and the other threads; follow
// with a block barrier.
__device__ __forceinline__ void fence_barrier_init() {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#endif
}
// One arrival that also announces `bytes` the phase must receive before it completes.
__device__ __forceinline__ void arrive_expect_tx(uint32_t bar, uint32_t bytes) {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
#endif
}
__device__ __forceinline__ void arrive(uint32_t bar) {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
#endif
}
// One try: true once the phase of `parity` (0 or 1) has completed (the hardware may suspend the
// thread a while first).
__device__ __forceinline__ bool try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 1;
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile(
      "{\n.reg .pred p;\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
#endif
  return done != 0;
}
// Spins until the phase of `parity` has completed. Built with SHARDTRAIN_DEBUG_PIPELINES=1 (a
// diagnostic build: the printf costs the consumers registers and serialises their wgmma), a phase
// that never completes (a pipeline bug: a count or parity off by one) is reported after ~2^26
// tries (seconds) with the barrier's shared address, the parity, block and thread, and the thread
// traps, so the launch fails with that line instead of hanging the job.
__device__ __forceinline__ void wait(uint32_t bar, uint32_t parity) {
#if SHARDTRAIN_DEBUG_PIPELINES
  for (uint32_t tries = 1; !try_wait(bar, parity); ++tries) {
    if (tries == (1u << 26)) {
      printf(
          "mbarrier wait never completed: barrier at shared 0x%x, parity %u, block %u, "
          "thread %u\n",
          bar, parity, blockIdx.x, threadIdx.x);
      __trap();
    }
  }
#else
  while (!try_wait(bar, parity)) {
  }
#endif
}

// ---- TMA ----

// Rows of a 4-D tensor map box into shared memory at `dst` (1024-byte aligned for the 128-byte
// swizzle), completing `bytes` on barrier `bar`. Coordinates innermost first.
__device__ __forceinline__ void load_4d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                        int c2, int c3, uint32_t bar) {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(bar)
      : "memory");
#endif
}
// A box of a 2-D tensor map (coordinates: column, row) into shared memory at `dst`, as load_4d.
__device__ __forceinline__ void load_2d(uint32_t dst, const CUtensorMap* map, int c0, int c1,
                                        uint32_t bar) {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(bar)
      : "memory");
#endif
}
// Adds the shared tile at `src` (laid out as the map's box, 1024-byte aligned for the 128-byte
// swizzle) into the 4-D tensor at those coordinates, element by element atomically in L2 (other
// blocks may add to the same elements); elements past the tensor's bounds are dropped. Completes
// in the thread's bulk group: commit_bulk_group, then wait_bulk_group_read before the tile is
// rewritten and wait_bulk_group before the block exits.
__device__ __forceinline__ void reduce_add_4d(const CUtensorMap* map, uint32_t src, int c0, int c1,
                                              int c2, int c3) {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile(
      "cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"
      " [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(reinterpret_cast<uint64_t>(map)),
      "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
#endif
}
__device__ __forceinline__ void commit_bulk_group() {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
#endif
}
// Until every committed bulk group of this thread has read its shared source.
__device__ __forceinline__ void wait_bulk_group_read() {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
#endif
}
// Until every committed bulk group of this thread has completed (its writes done).
__device__ __forceinline__ void wait_bulk_group() {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
#endif
}

// ---- named barriers (ids 1..15; 0 is __syncthreads) and register budgets ----

__device__ __forceinline__ void named_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// Every thread of the warpgroup executes these (".sync.aligned"); kRegisters a multiple of 8 in
// [24, 256].
template <int kRegisters>
__device__ __forceinline__ void release_registers() {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}
template <int kRegisters>
__device__ __forceinline__ void claim_registers() {
#if SHARDTRAIN_WGMMA_COMPILED
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegisters));
#endif
}

// ---- host ----

// The TMA descriptor of a row-major [batch, seq, heads, head_dim] bf16 tensor whose box is
// `rows` consecutive tokens x 64 columns of one head (128 bytes a row, 128-byte swizzle): a
// kernel loads a head's D columns of tokens [t, t + rows) as D / 64 boxes at column 0, 64, ...
// into the column blocks of a swizzled tile (cuda_wgmma.cuh). Tokens at or past `seq` read as
// zeros. False (and `map` untouched) when the driver has no TMA or rejects the shape (e.g. a base
// address that is not 16-byte aligned): the caller falls back to a kernel without TMA.
bool tensor_map_of_heads(CUtensorMap& map, const void* base, int batch, int seq, int heads,
                         int head_dim, int rows);
// The same for a [batch, seq, heads, head_dim] fp32 tensor (e.g. an accumulator that
// reduce_add_4d adds tiles into): a box of `rows` tokens x 32 columns (128 bytes a row,
// 128-byte swizzle), D / 32 boxes a head.
bool tensor_map_of_heads_f32(CUtensorMap& map, const void* base, int batch, int seq, int heads,
                             int head_dim, int rows);
// The TMA descriptor of a row-major [rows, columns] bf16 matrix whose box is `box_rows` rows x 64
// columns (128 bytes a row, 128-byte swizzle: one column block of a swizzled tile). Rows and
// columns past the matrix read as zeros. False (and `map` untouched) when the driver has no TMA
// or rejects the shape (base not 16-byte aligned, columns not a multiple of 8, box_rows outside
// 1..256).
bool tensor_map_2d(CUtensorMap& map, const void* base, int64_t rows, int64_t columns, int box_rows);
// What a kernel's launcher says when tensor_map_of_heads refused (cuda_dispatch.h logs it once).
inline constexpr const char* kNoTensorMaps =
    "no TMA descriptor (the driver has no cuTensorMapEncodeTiled, or a tensor is not 16-byte "
    "aligned)";

}  // namespace shardtrain::cuda_kernels::tma
