// FP8 quantisation kernels (cuda_fp8.h): amax, then the scaled cast into a row-major and/or a
// transposed FP8 copy. Both are memory-bound single passes.
//
// amax: grid-stride max of |x| (16-byte loads for bf16), one block reduction, one atomicMax a
// block on the float's bits (non-negative floats order like their unsigned bit patterns).
// cast: 64 x 64 tiles, 256 threads (delayed scaling: the same kernel also takes the amax; the
// SwiGLU forward cast computes its input from gate and up); each thread loads 4 consecutive elements of a row, writes
// their 4 FP8 bytes to the row-major copy (one 4-byte store) and to a shared tile; the
// transposed copy is then written from the tile, 4 bytes (4 source rows) a thread, so both
// outputs are written with coalesced 4-byte stores and x is read once.
//
// __nv_cvt_float_to_fp8 compiles on every architecture of the fat build (emulated below sm_89);
// the FP8 GEMMs that consume the output run only on sm_89+ (cuda_gemm_fp8.cpp checks).
#include <cuda_fp8.h>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_fp8.h"
#include "ops/cuda/cuda_swiglu_math.cuh"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::bf16;
using cuda_detail::to_float;

constexpr int kAmaxThreads = 256;
constexpr int kTile = 64;
constexpr int kCastThreads = 256;
constexpr int kGroup = 4;                      // elements a thread converts at once
constexpr int kThreadsPerRow = kTile / kGroup;  // 16
constexpr int kRowsPerPass = kCastThreads / kThreadsPerRow;  // 16
constexpr int kTilePitch = kTile + 4;                        // bytes; keeps 4-byte alignment
constexpr int kPasses = kTile / kRowsPerPass;                // 4 rows of a tile a thread

__device__ __forceinline__ float abs_max(float m, float x) { return fmaxf(m, fabsf(x)); }

template <typename T>
__global__ void amax_kernel(const T* x, int64_t n, unsigned* amax_bits) {
  float m = 0.0f;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if constexpr (sizeof(T) == 2) {
    // bf16: 8 elements (16 bytes) per load where the pointer allows it; the tail one by one.
    const bool vector = reinterpret_cast<uintptr_t>(x) % 16 == 0;
    const int64_t vectors = vector ? n / cuda_detail::kBf16PerVector : 0;
    for (int64_t i = first; i < vectors; i += stride) {
      float v[cuda_detail::kBf16PerVector];
      cuda_detail::load8(x + i * cuda_detail::kBf16PerVector, v);
      for (int j = 0; j < cuda_detail::kBf16PerVector; ++j) m = abs_max(m, v[j]);
    }
    for (int64_t i = vectors * cuda_detail::kBf16PerVector + first; i < n; i += stride)
      m = abs_max(m, to_float(x[i]));
  } else {
    for (int64_t i = first; i < n; i += stride) m = abs_max(m, to_float(x[i]));
  }
  __shared__ float shared[32];
  m = cuda_detail::block_max(m, shared);
  if (threadIdx.x == 0) atomicMax(amax_bits, __float_as_uint(m));
}

__device__ __forceinline__ uint8_t to_fp8(float v, __nv_fp8_interpretation_t kind) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, kind));
}

// Delayed scaling's bookkeeping in the cast (kDelayed): every block folds its |x| max into the
// running amax, the last block to finish (a ticket counter, as CUDA's threadFenceReduction
// sample) records it in the history and sets the next scale amax. All blocks read the scale
// amax before they take a ticket, so the last block's update cannot change a scale in use.
__device__ void finish_delayed(float block_amax, float* state, int history_pos) {
  unsigned* running = reinterpret_cast<unsigned*>(state + kFp8ScaleAmaxIndex + 1);
  unsigned* counter = reinterpret_cast<unsigned*>(state + kFp8ScaleAmaxIndex + 2);
  atomicMax(running, __float_as_uint(block_amax));  // |x| >= 0: float order = bit order
  __threadfence();
  const unsigned blocks = gridDim.x * gridDim.y;
  if (atomicAdd(counter, 1u) != blocks - 1) return;
  __threadfence();
  const float amax = __uint_as_float(atomicExch(running, 0u));
  if (isfinite(amax)) state[history_pos] = amax;
  float next = 0.0f;
  for (int i = 0; i < kFp8AmaxHistory; ++i) next = fmaxf(next, state[i]);
  state[kFp8ScaleAmaxIndex] = next;
  atomicExch(counter, 0u);
}

// Writes a block's 64 x 64 FP8 tile (already in shared memory) transposed into out_t
// (cols x rows), 4 source rows (4 bytes) a thread.
__device__ __forceinline__ void write_transposed(const uint8_t (*tile)[kTilePitch], int64_t rows,
                                                 int64_t cols, int64_t row0, int64_t col0,
                                                 uint8_t* out_t) {
  const int group_row = (threadIdx.x % kThreadsPerRow) * kGroup;
  for (int c = threadIdx.x / kThreadsPerRow; c < kTile; c += kRowsPerPass) {
    const int64_t out_row = col0 + c, out_col = row0 + group_row;
    if (out_row >= cols || out_col >= rows) continue;
    uint32_t packed = 0;
    for (int j = 0; j < kGroup; ++j) packed |= uint32_t{tile[group_row + j][c]} << (8 * j);
    *reinterpret_cast<uint32_t*>(out_t + out_row * rows + out_col) = packed;
  }
}

// What a cast reads: 4 consecutive elements at row-major offset `at`, as floats.
template <typename T>
struct TensorSource {  // a bf16 or f32 tensor
  const T* x;
  __device__ __forceinline__ void load(int64_t at, float (&v)[kGroup]) const {
    if constexpr (sizeof(T) == 2) {
      const uint2 raw = *reinterpret_cast<const uint2*>(x + at);
      const bf16* h = reinterpret_cast<const bf16*>(&raw);
      for (int j = 0; j < kGroup; ++j) v[j] = to_float(h[j]);
    } else {
      const float4 raw = *reinterpret_cast<const float4*>(x + at);
      v[0] = raw.x, v[1] = raw.y, v[2] = raw.z, v[3] = raw.w;
    }
  }
};

// SwiGLU's product silu(gate) * up (bf16 inputs), rounded to bf16 with swiglu_forward's
// arithmetic (cuda_swiglu.cu), so the cast sees the values the bf16 act would hold; also stored
// to `act` when set (the saved activation).
struct SwigluSource {
  const bf16* gate;
  const bf16* up;
  bf16* act;
  __device__ __forceinline__ void load(int64_t at, float (&v)[kGroup]) const {
    const uint2 rg = *reinterpret_cast<const uint2*>(gate + at);
    const uint2 ru = *reinterpret_cast<const uint2*>(up + at);
    uint2 packed;
    bf16* a = reinterpret_cast<bf16*>(&packed);
    for (int j = 0; j < kGroup; ++j) {
      const float g = to_float(reinterpret_cast<const bf16*>(&rg)[j]);
      const float u = to_float(reinterpret_cast<const bf16*>(&ru)[j]);
      a[j] = cuda_detail::from_float<bf16>(cuda_detail::swiglu_value(g, u));
      v[j] = to_float(a[j]);
    }
    if (act != nullptr) *reinterpret_cast<uint2*>(act + at) = packed;
  }
};

// One 64 x 64 tile of the source per block (blockIdx.x: column tile, blockIdx.y: row tile).
// kDelayed: `amax` is state + kFp8ScaleAmaxIndex, and the block's amax goes to finish_delayed.
template <typename Source, bool kDelayed>
__global__ void cast_kernel(Source source, int64_t rows, int64_t cols,
                            __nv_fp8_interpretation_t kind, float max_value, const float* amax,
                            uint8_t* out, uint8_t* out_t, float* inv_scale, float* state,
                            int history_pos) {
  __shared__ __align__(4) uint8_t tile[kTile][kTilePitch];
  float local_amax = 0.0f;
  const float a = *amax;
  const float scale = a > 0.0f ? max_value / a : 1.0f;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *inv_scale = 1.0f / scale;

  const int64_t row0 = int64_t{blockIdx.y} * kTile, col0 = int64_t{blockIdx.x} * kTile;
  const int group_col = (threadIdx.x % kThreadsPerRow) * kGroup;
  // All of the thread's loads first (kPasses rows of the tile), then the conversions: the loads
  // are in flight together instead of one at a time.
  const int first_row = threadIdx.x / kThreadsPerRow;
  const int64_t col = col0 + group_col;
  float v[kPasses][kGroup];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int64_t row = row0 + first_row + p * kRowsPerPass;
    if (row >= rows || col >= cols) continue;  // rows, cols multiples of kGroup: all or none
    source.load(row * cols + col, v[p]);
  }
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int r = first_row + p * kRowsPerPass;
    const int64_t row = row0 + r;
    if (row >= rows || col >= cols) continue;
    uint32_t packed = 0;
    for (int j = 0; j < kGroup; ++j) packed |= uint32_t{to_fp8(v[p][j] * scale, kind)} << (8 * j);
    if constexpr (kDelayed) {
      for (int j = 0; j < kGroup; ++j) local_amax = abs_max(local_amax, v[p][j]);
    }
    if (out != nullptr) *reinterpret_cast<uint32_t*>(out + row * cols + col) = packed;
    *reinterpret_cast<uint32_t*>(&tile[r][group_col]) = packed;
  }
  if constexpr (kDelayed) {
    __shared__ float shared[32];
    local_amax = cuda_detail::block_max(local_amax, shared);  // every thread reaches it
    if (threadIdx.x == 0) finish_delayed(local_amax, state, history_pos);
  }
  if (out_t == nullptr) return;  // uniform over the block: no thread waits at the barrier
  __syncthreads();
  write_transposed(tile, rows, cols, row0, col0, out_t);
}

// SwiGLU backward into FP8: one 64 x 64 tile of the (rows x cols) gradients per block, both
// outputs' row-major copies written directly, their transposed copies through shared tiles.
__global__ void swiglu_backward_fp8_kernel(const bf16* dact, const bf16* gate, const bf16* up,
                                           int64_t rows, int64_t cols,
                                           __nv_fp8_interpretation_t kind, float max_value,
                                           float* state_g, int pos_g, float* state_u, int pos_u,
                                           uint8_t* dg_q, uint8_t* dg_t, uint8_t* du_q,
                                           uint8_t* du_t, float* inv_g, float* inv_u) {
  __shared__ __align__(4) uint8_t tile_g[kTile][kTilePitch];
  __shared__ __align__(4) uint8_t tile_u[kTile][kTilePitch];
  const float ag = state_g[kFp8ScaleAmaxIndex], au = state_u[kFp8ScaleAmaxIndex];
  const float scale_g = ag > 0.0f ? max_value / ag : 1.0f;
  const float scale_u = au > 0.0f ? max_value / au : 1.0f;
  if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    *inv_g = 1.0f / scale_g;
    *inv_u = 1.0f / scale_u;
  }
  const int64_t row0 = int64_t{blockIdx.y} * kTile, col0 = int64_t{blockIdx.x} * kTile;
  const int group_col = (threadIdx.x % kThreadsPerRow) * kGroup;
  const int first_row = threadIdx.x / kThreadsPerRow;
  const int64_t col = col0 + group_col;
  float amax_g = 0.0f, amax_u = 0.0f;
  float d[kPasses][kGroup], g[kPasses][kGroup], u[kPasses][kGroup];
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int64_t row = row0 + first_row + p * kRowsPerPass;
    if (row >= rows || col >= cols) continue;  // rows, cols multiples of kGroup: all or none
    const int64_t at = row * cols + col;
    const uint2 rd = *reinterpret_cast<const uint2*>(dact + at);
    const uint2 rg = *reinterpret_cast<const uint2*>(gate + at);
    const uint2 ru = *reinterpret_cast<const uint2*>(up + at);
    for (int j = 0; j < kGroup; ++j) {
      d[p][j] = to_float(reinterpret_cast<const bf16*>(&rd)[j]);
      g[p][j] = to_float(reinterpret_cast<const bf16*>(&rg)[j]);
      u[p][j] = to_float(reinterpret_cast<const bf16*>(&ru)[j]);
    }
  }
#pragma unroll
  for (int p = 0; p < kPasses; ++p) {
    const int r = first_row + p * kRowsPerPass;
    const int64_t row = row0 + r;
    if (row >= rows || col >= cols) continue;
    uint32_t packed_g = 0, packed_u = 0;
    for (int j = 0; j < kGroup; ++j) {
      // swiglu_backward's arithmetic, rounded to bf16 as its output is.
      float dg, du;
      cuda_detail::swiglu_gradients(d[p][j], g[p][j], u[p][j], dg, du);
      dg = to_float(cuda_detail::from_float<bf16>(dg));
      du = to_float(cuda_detail::from_float<bf16>(du));
      amax_g = abs_max(amax_g, dg);
      amax_u = abs_max(amax_u, du);
      packed_g |= uint32_t{to_fp8(dg * scale_g, kind)} << (8 * j);
      packed_u |= uint32_t{to_fp8(du * scale_u, kind)} << (8 * j);
    }
    *reinterpret_cast<uint32_t*>(dg_q + row * cols + col) = packed_g;
    *reinterpret_cast<uint32_t*>(du_q + row * cols + col) = packed_u;
    *reinterpret_cast<uint32_t*>(&tile_g[r][group_col]) = packed_g;
    *reinterpret_cast<uint32_t*>(&tile_u[r][group_col]) = packed_u;
  }
  __shared__ float shared_g[32], shared_u[32];
  amax_g = cuda_detail::block_max(amax_g, shared_g);
  amax_u = cuda_detail::block_max(amax_u, shared_u);
  if (threadIdx.x == 0) {
    finish_delayed(amax_g, state_g, pos_g);
    finish_delayed(amax_u, state_u, pos_u);
  }
  __syncthreads();
  write_transposed(tile_g, rows, cols, row0, col0, dg_t);
  write_transposed(tile_u, rows, cols, row0, col0, du_t);
}

__nv_fp8_interpretation_t interpretation(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The launchers' own contract (ops/cuda's callers check shapes with errors first): aborts
// naming the launcher, the shape and what it needs unless `ok`.
void require_launch(bool ok, const char* launcher, int64_t rows, int64_t cols) {
  if (ok) return;
  std::fprintf(stderr,
               "%s: %s of %lld x %lld needs positive multiples of %d, aligned pointers and "
               "history slots below %d\n",
               __FILE__, launcher, static_cast<long long>(rows), static_cast<long long>(cols),
               kGroup, kFp8AmaxHistory);
  std::abort();
}

// One block per kTile x kTile tile of a rows x cols tensor.
dim3 tile_grid(int64_t rows, int64_t cols) {
  return dim3(static_cast<unsigned>((cols + kTile - 1) / kTile),
              static_cast<unsigned>((rows + kTile - 1) / kTile));
}

bool slot_ok(int pos) { return pos >= 0 && pos < kFp8AmaxHistory; }

}  // namespace

float fp8_max(Fp8Format format) { return format == Fp8Format::kE4M3 ? 448.0f : 57344.0f; }

const char* fp8_format_name(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? "e4m3" : "e5m2";
}

void fp8_amax(DType dtype, const void* x, int64_t n, float* amax, cudaStream_t stream) {
  SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(amax, 0, sizeof(float), stream));
  if (n == 0) return;
  const unsigned blocks = cuda_detail::grid_for(
      dtype == DType::kBF16 ? (n + cuda_detail::kBf16PerVector - 1) / cuda_detail::kBf16PerVector
                            : n,
      kAmaxThreads);
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T,
                            amax_kernel<T><<<blocks, kAmaxThreads, 0, stream>>>(
                                static_cast<const T*>(x), n, reinterpret_cast<unsigned*>(amax)));
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void fp8_cast(DType dtype, const void* x, int64_t rows, int64_t cols, Fp8Format format,
              const float* amax, uint8_t* out, uint8_t* out_t, float* inv_scale,
              cudaStream_t stream) {
  const size_t vector_bytes = kGroup * dtype_size(dtype);
  require_launch(rows >= 0 && cols >= 0 && rows % kGroup == 0 && cols % kGroup == 0 &&
                     aligned(x, vector_bytes) && aligned(out, 4) && aligned(out_t, 4),
                 "fp8_cast", rows, cols);
  if (rows == 0 || cols == 0) {
    // Still define the scale: an empty tensor dequantises with 1.
    const float one = 1.0f;
    SHARDTRAIN_CUDA_CHECK(
        cudaMemcpyAsync(inv_scale, &one, sizeof(float), cudaMemcpyHostToDevice, stream));
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));  // `one` is on this stack frame
    return;
  }
  const dim3 grid = tile_grid(rows, cols);
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T,
                            cast_kernel<TensorSource<T>, false><<<grid, kCastThreads, 0, stream>>>(
                                TensorSource<T>{static_cast<const T*>(x)}, rows, cols, interpretation(format),
                                fp8_max(format), amax, out, out_t, inv_scale, nullptr, 0));
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void fp8_cast_delayed(DType dtype, const void* x, int64_t rows, int64_t cols, Fp8Format format,
                      float* state, int history_pos, uint8_t* out, uint8_t* out_t,
                      float* inv_scale, cudaStream_t stream) {
  const size_t vector_bytes = kGroup * dtype_size(dtype);
  require_launch(rows > 0 && cols > 0 && rows % kGroup == 0 && cols % kGroup == 0 &&
                     aligned(x, vector_bytes) && aligned(out, 4) && aligned(out_t, 4) &&
                     slot_ok(history_pos),
                 "fp8_cast_delayed", rows, cols);
  const dim3 grid = tile_grid(rows, cols);
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T,
                            cast_kernel<TensorSource<T>, true><<<grid, kCastThreads, 0, stream>>>(
                                TensorSource<T>{static_cast<const T*>(x)}, rows, cols, interpretation(format),
                                fp8_max(format), state + kFp8ScaleAmaxIndex, out, out_t,
                                inv_scale, state, history_pos));
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels

namespace shardtrain::cuda_kernels {

void swiglu_backward_fp8(const void* dact, const void* gate, const void* up, int64_t rows,
                         int64_t cols, Fp8Format format, float* state_gate, int pos_gate,
                         float* state_up, int pos_up, uint8_t* dgate_q, uint8_t* dgate_t,
                         uint8_t* dup_q, uint8_t* dup_t, float* inv_scale_gate,
                         float* inv_scale_up, cudaStream_t stream) {
  require_launch(rows > 0 && cols > 0 && rows % kGroup == 0 && cols % kGroup == 0 &&
                     aligned(dact, 8) && aligned(gate, 8) && aligned(up, 8) &&
                     aligned(dgate_q, 4) && aligned(dgate_t, 4) && aligned(dup_q, 4) &&
                     aligned(dup_t, 4) && slot_ok(pos_gate) && slot_ok(pos_up),
                 "swiglu_backward_fp8", rows, cols);
  const dim3 grid = tile_grid(rows, cols);
  swiglu_backward_fp8_kernel<<<grid, kCastThreads, 0, stream>>>(
      static_cast<const bf16*>(dact), static_cast<const bf16*>(gate), static_cast<const bf16*>(up),
      rows, cols, interpretation(format), fp8_max(format), state_gate, pos_gate, state_up, pos_up,
      dgate_q, dgate_t, dup_q, dup_t, inv_scale_gate, inv_scale_up);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void swiglu_forward_fp8(const void* gate, const void* up, int64_t rows, int64_t cols,
                        float* state, int history_pos, void* act, uint8_t* out, uint8_t* out_t,
                        float* inv_scale, cudaStream_t stream) {
  require_launch(rows > 0 && cols > 0 && rows % kGroup == 0 && cols % kGroup == 0 &&
                     aligned(gate, 8) && aligned(up, 8) && aligned(act, 8) && aligned(out, 4) &&
                     aligned(out_t, 4) && slot_ok(history_pos),
                 "swiglu_forward_fp8", rows, cols);
  const dim3 grid = tile_grid(rows, cols);
  const SwigluSource source{static_cast<const bf16*>(gate), static_cast<const bf16*>(up),
                            static_cast<bf16*>(act)};
  cast_kernel<SwigluSource, true><<<grid, kCastThreads, 0, stream>>>(
      source, rows, cols, __NV_E4M3, fp8_max(Fp8Format::kE4M3), state + kFp8ScaleAmaxIndex, out,
      out_t, inv_scale, state, history_pos);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
