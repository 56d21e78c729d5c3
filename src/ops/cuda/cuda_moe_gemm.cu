// The grouped expert GEMMs of cuda_moe_gemm.h: one persistent, warp-specialised wgmma kernel over
// every expert's output tiles (sm_90a).
//   Tiles: 128 rows of one expert x kTileN output columns; an expert of r rows has ceil(r / 128)
//   row tiles (the last one partial: rows past the expert's end are computed from whatever the
//   TMA box holds, the next expert's rows or zeros past the matrix, and never stored); experts
//   without rows have none. The tiles of one launch are numbered expert by expert, row tile by
//   row tile, column tile fastest (neighbouring blocks share an expert's weights and rows in L2);
//   tile_start (kernel parameters) finds a tile's expert by binary search.
//   Block: three warpgroups. Warpgroup 0 is the producer: one thread issues the TMA copies of
//   every k step (64 columns of the reduction) of the block's tiles into a ring of stages, each
//   guarded by a "full" mbarrier (bytes delivered) and an "empty" one (the 256 consumer threads
//   done reading); it keeps 40 registers (setmaxnreg) so the consumers get 232. Warpgroups 1 and
//   2 are the consumers, 64 rows of the tile each (m64nNk16 steps, fp32 accumulators), and write
//   their rows straight from registers, rounded to bf16 (added to the old value first when
//   accumulating), while the producer already fills the ring with the next tile.
//   Operands: A (x or dout rows) is K-major (a TMA box of 128 rows x 64 columns); B is W_e: in
//   the forward its rows are the output columns (K-major, one box of kTileN rows), in the input
//   gradient its rows are the reduction (MN-major: kTileN / 64 boxes of 64 rows x 64 columns).
//   The reduction width is a multiple of 64 (expert_gemm_fit), so a k step never reaches into the
//   next expert's weights; output columns past the width (none at multiples of kTileN) are not
//   stored.
// Why: cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx) ran Qwen3-30B-A3B's experts (~256 rows
// each, 2048 <-> 768) at 286-310 TFLOP/s; this kernel at 438-553 (ops/cuda/MOE_NOTES.md).
#include <cuda.h>

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_moe_gemm.h"
#include "ops/cuda/cuda_ptx.cuh"
#include "ops/cuda/cuda_tma.cuh"
#include "ops/cuda/cuda_wgmma.cuh"

namespace shardtrain::cuda_moe {
namespace {

namespace wgmma = cuda_kernels::wgmma;
namespace tma = cuda_kernels::tma;
using cuda_ptx::bf16;

constexpr int kTileM = 128;  // rows of a tile: two consumer warpgroups of 64
constexpr int kTileK = 64;   // reduction columns of a k step: one 128-byte swizzle block
constexpr int kThreads = 384;
[[maybe_unused]] constexpr int kConsumerThreads = 256;
[[maybe_unused]] constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
// Tile row offsets travel in the kernel's parameters (4 KB at most): a launch covers at most
// this many experts; more take several launches.
constexpr int kExpertsPerLaunch = 256;
constexpr int kRingBytes = 192 * 1024;  // the stages of the ring
constexpr int kAlignSlack = 1024;       // swizzled tiles start 1024-byte aligned

template <int kTileN>
constexpr int kStages = kRingBytes / ((kTileM + kTileN) * kTileK * 2);  // 4 at 256, 6 at 128
template <int kTileN>
constexpr size_t shared_bytes() {
  return size_t{kRingBytes} + 8 * 2 * kStages<kTileN> + kAlignSlack;
}

struct GemmParams {
  CUtensorMap a, b;
  int32_t row_start[kExpertsPerLaunch + 1];   // absolute first row of each expert, then the end
  int32_t tile_start[kExpertsPerLaunch + 1];  // first tile of each expert in this launch
  int32_t experts;                            // in this launch
  int32_t first_expert;                       // absolute index of the launch's expert 0
  int32_t n, k;                               // output width, reduction width
  int32_t tiles_n;                            // column tiles per row tile
};

struct Tile {
  int expert;  // absolute
  int row;     // absolute first row
  int rows;    // rows of the expert in the tile (1..128)
  int n_tile;  // output columns n_tile * kTileN ..
};

__device__ __forceinline__ Tile locate(const GemmParams& p, int tile) {
  int lo = 0, hi = p.experts - 1;  // the last expert whose first tile is at or before `tile`
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (p.tile_start[mid] <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int local = tile - p.tile_start[lo];
  Tile t;
  t.expert = p.first_expert + lo;
  t.row = p.row_start[lo] + (local / p.tiles_n) * kTileM;
  t.rows = min(kTileM, p.row_start[lo + 1] - t.row);
  t.n_tile = local % p.tiles_n;
  return t;
}

// REQUIRES: blockDim.x == kThreads; dynamic shared memory shared_bytes<kTileN>(); maps from
// tensor_map_2d: a with 128-row boxes, b with kTileN-row (forward) or 64-row (kMnMajorB) boxes.
template <int kTileN, int kMnMajorB>
__global__ void __launch_bounds__(kThreads, 1)
    expert_gemm_kernel(const __grid_constant__ GemmParams p, bf16* __restrict__ out,
                       bool accumulate) {
#if SHARDTRAIN_WGMMA_COMPILED
  constexpr int kStageCount = kStages<kTileN>;
  constexpr uint32_t kABytes = kTileM * kTileK * sizeof(bf16);
  constexpr uint32_t kBBytes = kTileN * kTileK * sizeof(bf16);
  extern __shared__ unsigned char shared_raw[];
  const uint32_t raw = cuda_ptx::shared_address(shared_raw);
  const uint32_t a_base = (raw + kAlignSlack - 1) & ~uint32_t{kAlignSlack - 1};
  const uint32_t b_base = a_base + kStageCount * kABytes;
  const uint32_t barriers = b_base + kStageCount * kBBytes;
  const auto full = [&](int stage) { return barriers + 8 * stage; };
  const auto empty = [&](int stage) { return barriers + 8 * (kStageCount + stage); };
  const int tiles = p.tile_start[p.experts];
  const int k_steps = p.k / kTileK;

  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kStageCount; ++stage) {
      tma::mbarrier_init(full(stage), 1);
      tma::mbarrier_init(empty(stage), kConsumerThreads);
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128;
  if (warpgroup == 0) {
    tma::release_registers<kProducerRegisters>();
    if (threadIdx.x == 0) {
      tma::prefetch_map(&p.a);
      tma::prefetch_map(&p.b);
      int step = 0;  // k steps issued by this block, over all its tiles: the ring position
      for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        const Tile t = locate(p, tile);
        const int n0 = t.n_tile * kTileN;
        for (int ks = 0; ks < k_steps; ++ks, ++step) {
          const int stage = step % kStageCount;
          tma::wait(empty(stage), ((step / kStageCount) & 1) ^ 1);  // first pass: at once
          tma::arrive_expect_tx(full(stage), kABytes + kBBytes);
          tma::load_2d(a_base + stage * kABytes, &p.a, ks * kTileK, t.row, full(stage));
          const uint32_t b_tile = b_base + stage * kBBytes;
          if constexpr (kMnMajorB == 0) {
            // W_e rows n0.. (output columns), reduction columns ks * 64..
            tma::load_2d(b_tile, &p.b, ks * kTileK, t.expert * p.n + n0, full(stage));
          } else {
            // W_e rows ks * 64.. (reduction), output columns n0.. as column blocks of 64.
#pragma unroll
            for (int block = 0; block < kTileN / wgmma::kBlockColumns; ++block) {
              tma::load_2d(b_tile + block * kTileK * wgmma::kSwizzleBytes, &p.b,
                           n0 + block * wgmma::kBlockColumns, t.expert * p.k + ks * kTileK,
                           full(stage));
            }
          }
        }
      }
    }
    return;
  }
  tma::claim_registers<kConsumerRegisters>();

  const int consumer = warpgroup - 1;  // rows 64 * consumer .. of each tile
  const int warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t4 = lane % 4;
  float acc[kTileN / 2];
  int step = 0;
  for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const Tile t = locate(p, tile);
    const int n0 = t.n_tile * kTileN;
    for (int ks = 0; ks < k_steps; ++ks, ++step) {
      const int stage = step % kStageCount;
      tma::wait(full(stage), (step / kStageCount) & 1);
      const uint32_t a_tile = a_base + stage * kABytes, b_tile = b_base + stage * kBBytes;
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < kTileK / 16; ++kk) {
        const uint64_t b_desc =
            kMnMajorB ? wgmma::mn_major(b_tile, kTileK, kk) : wgmma::k_major(b_tile, kTileN, 0, kk);
        wgmma::mma_ss<kTileN, 0, kMnMajorB>(acc, wgmma::k_major(a_tile, kTileM, consumer * 64, kk),
                                            b_desc, ks > 0 || kk > 0);
      }
      wgmma::commit();
      wgmma::wait<1>();  // the previous k step's products are done: release its stage
      wgmma::fence_registers(acc);
      if (ks > 0) tma::arrive(empty((step - 1) % kStageCount));
    }
    wgmma::wait<0>();
    wgmma::fence_registers(acc);
    tma::arrive(empty((step - 1) % kStageCount));

    // Accumulator (cuda_wgmma.cuh): acc[4j + e] is row 16 warp + g + 8 (e / 2), column
    // 8j + 2 t4 + e % 2 of the warpgroup's 64 x kTileN piece.
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = consumer * 64 + warp * 16 + g + 8 * half;
      if (r >= t.rows) continue;
      bf16* row_out = out + static_cast<int64_t>(t.row + r) * p.n;
#pragma unroll
      for (int j = 0; j < kTileN / 8; ++j) {
        const int col = n0 + 8 * j + 2 * t4;
        if (col >= p.n) continue;  // p.n is even: the pair is in or out together
        auto* dst = reinterpret_cast<__nv_bfloat162*>(row_out + col);
        float2 v{acc[4 * j + 2 * half], acc[4 * j + 2 * half + 1]};
        if (accumulate) {
          const float2 old = __bfloat1622float2(*dst);
          v.x += old.x;
          v.y += old.y;
        }
        *dst = __float22bfloat162_rn(v);
      }
    }
  }
#else
  __trap();  // not built for sm_90a: expert_gemm_fit keeps the launcher from choosing it
#endif
}

template <int kTileN, int kMnMajorB>
void launch(const GemmParams& params, int tiles, bf16* out, bool accumulate, cudaStream_t stream) {
  auto kernel = expert_gemm_kernel<kTileN, kMnMajorB>;
  constexpr size_t bytes = shared_bytes<kTileN>();
  static std::once_flag once;
  std::call_once(once, [&] {
    cuda_kernels::require_shared_fits(bytes, cuda_kernels::device_limits(), "expert_gemm_kernel");
    SHARDTRAIN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes)));
  });
  const int blocks = std::min(tiles, std::max(1, cuda_kernels::device_limits().sm_count));
  kernel<<<blocks, kThreads, bytes, stream>>>(params, out, accumulate);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool expert_gemm_fit(int64_t M, int64_t E, int64_t O, int64_t I, const void* a, const void* w,
                     const void* out) {
  if (!cuda_kernels::wgmma_kernels_compiled()) return false;
  const cuda_kernels::DeviceLimits& limits = cuda_kernels::device_limits();
  if (limits.compute_capability() != 90 || limits.shared_per_block_optin < shared_bytes<256>()) {
    return false;
  }
  return M > 0 && E > 0 && O >= kTileK && I >= kTileK && O % kTileK == 0 && I % kTileK == 0 &&
         M + kTileM <= INT32_MAX && E * O <= INT32_MAX && E * I <= INT32_MAX && aligned16(a) &&
         aligned16(w) && aligned16(out);
}

bool expert_gemm(ExpertGemm kind, const void* a, const void* w, const std::vector<int64_t>& rows_E,
                 int64_t O, int64_t I, void* out, bool accumulate, cudaStream_t stream,
                 int tile_n) {
  const bool forward = kind == ExpertGemm::kForward;
  const int64_t E = static_cast<int64_t>(rows_E.size());
  int64_t M = 0;
  for (int64_t r : rows_E) M += r;
  const int64_t a_width = forward ? I : O, n = forward ? O : I;
  SHARDTRAIN_CHECK(expert_gemm_fit(M, E, O, I, a, w, out),
                   "expert GEMM: {} rows, {} experts of {} x {} (want multiples of 64, sm_90a)", M,
                   E, O, I);
  if (tile_n == 0) tile_n = 128;  // as fast as 256 at balanced rows, faster at skewed ones
  SHARDTRAIN_CHECK(tile_n == 128 || tile_n == 256, "expert GEMM tile width {}", tile_n);
  GemmParams params{};
  if (!cuda_kernels::tma::tensor_map_2d(params.a, a, M, a_width, kTileM) ||
      !cuda_kernels::tma::tensor_map_2d(params.b, w, E * O, I, forward ? tile_n : kTileK)) {
    return false;
  }
  params.n = static_cast<int32_t>(n);
  params.k = static_cast<int32_t>(a_width);
  params.tiles_n = static_cast<int32_t>((n + tile_n - 1) / tile_n);
  int64_t row = 0;
  for (int64_t e0 = 0; e0 < E; e0 += kExpertsPerLaunch) {
    const int64_t count = std::min<int64_t>(kExpertsPerLaunch, E - e0);
    params.experts = static_cast<int32_t>(count);
    params.first_expert = static_cast<int32_t>(e0);
    int64_t tiles = 0;
    for (int64_t j = 0; j < count; ++j) {
      SHARDTRAIN_CHECK(rows_E[e0 + j] >= 0, "expert GEMM: expert {} has {} rows", e0 + j,
                       rows_E[e0 + j]);
      params.row_start[j] = static_cast<int32_t>(row);
      params.tile_start[j] = static_cast<int32_t>(tiles);
      row += rows_E[e0 + j];
      tiles += (rows_E[e0 + j] + kTileM - 1) / kTileM * params.tiles_n;
    }
    params.row_start[count] = static_cast<int32_t>(row);
    params.tile_start[count] = static_cast<int32_t>(tiles);
    SHARDTRAIN_CHECK(tiles <= INT32_MAX, "expert GEMM: {} tiles in one launch", tiles);
    if (tiles == 0) continue;
    auto* o = static_cast<bf16*>(out);
    const int t = static_cast<int>(tiles);
    if (tile_n == 256) {
      forward ? launch<256, 0>(params, t, o, accumulate, stream)
              : launch<256, 1>(params, t, o, accumulate, stream);
    } else {
      forward ? launch<128, 0>(params, t, o, accumulate, stream)
              : launch<128, 1>(params, t, o, accumulate, stream);
    }
  }
  return true;
}

}  // namespace shardtrain::cuda_moe
