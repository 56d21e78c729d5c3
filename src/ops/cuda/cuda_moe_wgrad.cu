// The experts' f32 weight gradients in one launch (launcher: cuda_moe_kernels.h): for every
// expert e and every 128 x 128 tile of its (O x I) gradient, a block sums dout_e^T x_e over the
// expert's rows with mma.sync (bf16 operands, fp32 accumulators) and writes (or adds) the tile in
// f32. Why a kernel of our own: cuBLAS runs no grouped GEMM of bf16 inputs into f32, and one
// cuBLAS GEMM per expert runs the few hundred rows routing gives each expert at a fraction of the
// tensor cores (each GEMM's f32 output outweighs its math), one launch after another.
//
// Loop: rows stream through shared memory 32 at a time, four stages deep (cp.async, zero-filled
// past the expert's last row and the matrix edges: a stage's load takes longer than the math on
// the stage before it, and an expert's few hundred rows are only ~8 stages); both operands are
// row-major in the rows, so the A (dout^T) and B (x) fragments come from ldmatrix.trans of the
// staged rows. 8 warps as 2 x 4, a 64 x 32 piece of the tile each. Shared rows are padded by 16
// bytes (pitch 136) so ldmatrix's 8 row addresses hit distinct banks. Accumulating (gradient
// accumulation adds every micro-batch's gradient to the f32 one) reads a fragment row's old
// values with all its loads in flight at once, not one load's latency after another.
#include <algorithm>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_moe_kernels.h"
#include "ops/cuda/cuda_ptx.cuh"

namespace shardtrain::cuda_moe {
namespace {

using cuda_ptx::bf16;

constexpr int kTileM = 128;  // gradient rows (dout columns) per block
constexpr int kTileN = 128;  // gradient columns (x columns) per block
constexpr int kTileK = 32;   // token rows per stage
constexpr int kPitch = 128 + 8;
constexpr int kStages = 4;
constexpr int kThreads = 256;
// Dynamic shared memory: kStages stages of the dout rows, then kStages of the x rows.
constexpr size_t kSharedBytes = size_t{2} * kStages * kTileK * kPitch * sizeof(bf16);
using StageTile = bf16[kTileK][kPitch];
// Row offsets travel in the kernel's parameters (4 KB at most), so a launch covers at most this
// many experts; more take several launches.
constexpr int kExpertsPerLaunch = 512;

struct ExpertRows {
  int32_t start[kExpertsPerLaunch + 1];  // rows of the launch's experts, relative to its first
};

__global__ void __launch_bounds__(kThreads)
    expert_wgrad_kernel(const bf16* __restrict__ dout, const bf16* __restrict__ x, int O, int I,
                        int tiles_n, const ExpertRows rows_of, float* __restrict__ dweight,
                        bool accumulate) {
  extern __shared__ __align__(16) unsigned char shared[];
  auto* a_tile = reinterpret_cast<StageTile*>(shared);  // dout rows: [stage][row][o]
  auto* b_tile = a_tile + kStages;                      // x rows: [stage][row][i]
  const int e = blockIdx.y;
  const int first = rows_of.start[e], rows = rows_of.start[e + 1] - first;
  if (rows == 0 && accumulate) return;  // nothing to add
  const int m0 = (blockIdx.x / tiles_n) * kTileM, n0 = (blockIdx.x % tiles_n) * kTileN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warp_m = (warp / 4) * 64, warp_n = (warp % 4) * 32;

  // Every call commits one cp.async group (empty past the last row tile), so waiting for all but
  // the newest kStages - 2 groups always means "this iteration's stage has landed".
  const int k_tiles = (rows + kTileK - 1) / kTileK;
  const auto load = [&](int kt) {
    if (kt < k_tiles) {
      const int stage = kt % kStages, k0 = kt * kTileK;
      constexpr int kChunks = kTileK * (kTileM / 8);  // 16-byte chunks per operand tile
      for (int c = threadIdx.x; c < kChunks; c += kThreads) {
        const int r = c / (kTileM / 8), col = (c % (kTileM / 8)) * 8;
        const bool row_ok = k0 + r < rows;
        const int64_t row = static_cast<int64_t>(first) + k0 + r;
        const bool a_ok = row_ok && m0 + col < O, b_ok = row_ok && n0 + col < I;
        cuda_ptx::cp_async_16(&a_tile[stage][r][col], a_ok ? dout + row * O + m0 + col : dout,
                              a_ok);
        cuda_ptx::cp_async_16(&b_tile[stage][r][col], b_ok ? x + row * I + n0 + col : x, b_ok);
      }
    }
    cuda_ptx::cp_async_commit();
  };

  float acc[4][4][4] = {};  // [m16 piece][n8 piece][C fragment]
  for (int kt = 0; kt < kStages - 1; ++kt) load(kt);
  const int s = lane / 8, lane_row = lane % 8;
  for (int kt = 0; kt < k_tiles; ++kt) {
    cuda_ptx::cp_async_wait<kStages - 2>();
    // Landed for every thread, and every warp is past iteration kt - 1, whose stage the load
    // below overwrites.
    __syncthreads();
    load(kt + kStages - 1);
    const int stage = kt % kStages;
#pragma unroll
    for (int kk = 0; kk < kTileK; kk += 16) {
      // A (m x k) = dout^T: matrix j of ldmatrix is (m + (j % 2) * 8, k + (j / 2) * 8).
      uint32_t a[4][4];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        cuda_ptx::ldmatrix_x4_trans(
            a[mi], &a_tile[stage][kk + (s / 2) * 8 + lane_row][warp_m + mi * 16 + (s % 2) * 8]);
      }
      // B (k x n) = x: matrix j is (k + (j % 2) * 8, n + (j / 2) * 8): b0, b1 of two n8 pieces.
      uint32_t b[4][2];
#pragma unroll
      for (int nj = 0; nj < 2; ++nj) {
        uint32_t r[4];
        cuda_ptx::ldmatrix_x4_trans(
            r, &b_tile[stage][kk + (s % 2) * 8 + lane_row][warp_n + nj * 16 + (s / 2) * 8]);
        b[2 * nj][0] = r[0];
        b[2 * nj][1] = r[1];
        b[2 * nj + 1][0] = r[2];
        b[2 * nj + 1][1] = r[3];
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) cuda_ptx::mma(acc[mi][ni], a[mi], b[ni][0], b[ni][1]);
      }
    }
  }

  float* out = dweight + static_cast<int64_t>(e) * O * I;
  const int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int mi = 0; mi < 4; ++mi) {
    // This m16 piece's 8 pairs: [n8 piece][half]; outside the gradient: null.
    float2* p[4][2];
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
      const int col = n0 + warp_n + ni * 8 + 2 * t;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = m0 + warp_m + mi * 16 + g + half * 8;
        // I is even: the pair is in or out together.
        p[ni][half] = row < O && col < I
                          ? reinterpret_cast<float2*>(out + static_cast<int64_t>(row) * I + col)
                          : nullptr;
      }
    }
    float2 old[4][2] = {};
    if (accumulate) {
#pragma unroll
      for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          if (p[ni][half] != nullptr) old[ni][half] = *p[ni][half];
        }
      }
    }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        if (p[ni][half] == nullptr) continue;
        *p[ni][half] = float2{acc[mi][ni][2 * half] + old[ni][half].x,
                              acc[mi][ni][2 * half + 1] + old[ni][half].y};
      }
    }
  }
}

}  // namespace

bool expert_weight_gradients_fit(int64_t O, int64_t I, const void* dout, const void* x,
                                 const float* dweight) {
  const auto aligned = [](const void* p, uintptr_t bytes) {
    return reinterpret_cast<uintptr_t>(p) % bytes == 0;
  };
  return O > 0 && I > 0 && O % 8 == 0 && I % 8 == 0 && O <= INT32_MAX / kTileM &&
         I <= INT32_MAX / kTileN && aligned(dout, 16) && aligned(x, 16) && aligned(dweight, 8);
}

void expert_weight_gradients(const void* dout, const void* x, const std::vector<int64_t>& rows_E,
                             int64_t O, int64_t I, float* dweight, bool accumulate,
                             cudaStream_t stream) {
  SHARDTRAIN_CHECK(expert_weight_gradients_fit(O, I, dout, x, dweight),
                   "expert weight gradients: {} x {} (want multiples of 8, aligned pointers)", O,
                   I);
  static std::once_flag once;
  std::call_once(once, [] {
    cuda_kernels::require_shared_fits(kSharedBytes, cuda_kernels::device_limits(),
                                      "expert_wgrad_kernel");
    SHARDTRAIN_CUDA_CHECK(cudaFuncSetAttribute(expert_wgrad_kernel,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kSharedBytes)));
  });
  const int64_t E = static_cast<int64_t>(rows_E.size());
  const int64_t tiles_m = (O + kTileM - 1) / kTileM, tiles_n = (I + kTileN - 1) / kTileN;
  SHARDTRAIN_CHECK(tiles_m * tiles_n <= INT32_MAX, "expert weight gradients: {} x {} tiles",
                   tiles_m, tiles_n);
  int64_t row = 0;  // first row of the launch
  for (int64_t e0 = 0; e0 < E; e0 += kExpertsPerLaunch) {
    const int64_t count = std::min<int64_t>(kExpertsPerLaunch, E - e0);
    ExpertRows rows_of{};
    int64_t offset = 0;
    for (int64_t j = 0; j < count; ++j) {
      rows_of.start[j] = static_cast<int32_t>(offset);
      offset += rows_E[e0 + j];
      SHARDTRAIN_CHECK(rows_E[e0 + j] >= 0 && offset <= INT32_MAX,
                       "expert weight gradients: {} rows in one launch", offset);
    }
    rows_of.start[count] = static_cast<int32_t>(offset);
    expert_wgrad_kernel<<<dim3(static_cast<unsigned>(tiles_m * tiles_n),
                               static_cast<unsigned>(count)),
                          kThreads, kSharedBytes, stream>>>(
        static_cast<const bf16*>(dout) + row * O, static_cast<const bf16*>(x) + row * I,
        static_cast<int>(O), static_cast<int>(I), static_cast<int>(tiles_n), rows_of,
        dweight + e0 * O * I, accumulate);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    row += offset;
  }
}

}  // namespace shardtrain::cuda_moe
