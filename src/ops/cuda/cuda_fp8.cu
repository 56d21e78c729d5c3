// FP8 quantisation kernels (cuda_fp8.h): amax, then the scaled cast into a row-major and/or a
// transposed FP8 copy. All are memory-bound single passes, written for HBM bandwidth.
//
// amax: grid-stride max of |x| (16-byte loads for bf16), one block reduction, one atomicMax a
// block on the float's bits (non-negative floats order like their unsigned bit patterns).
// cast: 128 x 128 tiles, 256 threads, a persistent grid (as many blocks as fit on the GPU at
// once, each looping over tiles), so delayed scaling's amax bookkeeping is one atomic pair a
// block rather than a tile. Each thread loads 16 consecutive elements of 4 rows (16-byte loads,
// all issued before any conversion), writes their 16 FP8 bytes to the row-major copy (one
// 16-byte store a row) and to a shared tile; the transposed copy is then written from the tile,
// 16 source rows (16 bytes) of 4 columns a thread: each thread reads 16 words of the tile,
// transposes the 4 x 4 byte blocks in registers (byte permutes) and stores 4 x 16 bytes, a
// warp's stores covering 4 full 128-byte rows of the transposed copy. The tile's 16-byte
// columns are XOR-swizzled by the row's 16-row group, so both the row-major writes and the
// column reads of the tile are free of bank conflicts. Shapes off the 16-element grid (rows,
// cols multiples of 4 only) or pointers off 16-byte alignment take 4-element loads and stores
// in the same kernel (a block-uniform choice), with bounds at 4-element granularity.
// The delayed cast and the SwiGLU casts share the kernel through their source (what a thread's
// 16 elements are: a tensor's, silu(gate) * up, or SwiGLU's two gradients).
//
// __nv_cvt_float2_to_fp8x2 compiles on every architecture of the fat build (emulated below
// sm_89) and rounds as __nv_cvt_float_to_fp8 (one cvt.rn.satfinite instruction for two values);
// the FP8 GEMMs that consume the output run only on sm_89+ (cuda_gemm_fp8.cpp checks).
#include <cuda_fp8.h>

#include <cstdint>
#include <initializer_list>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_fp8.h"
#include "ops/cuda/cuda_swiglu_math.cuh"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::bf16;
using cuda_detail::to_float;

constexpr int kAmaxThreads = 256;
constexpr int kGroup = 4;  // the shapes' granularity (rows, cols multiples of it)
constexpr int kTile = 128;
constexpr int kCastThreads = 256;
constexpr int kChunk = 16;                                  // elements a thread loads a row
constexpr int kGroups = kChunk / kGroup;                    // 4
constexpr int kChunksPerRow = kTile / kChunk;               // 8
constexpr int kRowsPerPass = kCastThreads / kChunksPerRow;  // 32
constexpr int kPasses = kTile / kRowsPerPass;               // 4 rows of a tile a thread
constexpr int kTileWords = kTile / 4;                       // 32-bit words in a tile row
constexpr int kRunRows = 16;                                // transposed: source rows a thread
constexpr int kRunGroups = kTile / kRunRows;                // 8
static_assert(kCastThreads == kRunGroups * kTileWords, "one thread a 16 x 4 block of the tile");

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

// Delayed scaling's bookkeeping (once a block, after all its tiles): the block folds its |x| max
// into the running amax, the last block to finish (a ticket counter, as CUDA's
// threadFenceReduction sample) records it in the history and sets the next scale amax. All
// blocks read the scale amax before they take a ticket, so the last block's update cannot change
// a scale in use.
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

// ---- what a cast reads: kChunk consecutive elements of a row, as floats ----
// kMinBlocks: resident blocks an SM the kernel's registers must allow; kBatch: rows of the tile
// a thread has in flight at once (of kPasses).
// Each source loads a chunk into registers (load: all kChunk elements, 16-byte loads; or
// load_groups: the first `groups` 4-element groups, the rest zero, at the contract's 4-element
// alignment), then converts it (values), which for SwiGLU's forward also stores the bf16 act.
// Zero inputs give zero outputs, so the padding of a partial chunk never raises an amax.

// 16 bf16 values: two 16-byte words.
struct Bf16Chunk {
  uint4 w[2];
};
__device__ __forceinline__ void load_chunk(const bf16* p, Bf16Chunk& c) {
  c.w[0] = reinterpret_cast<const uint4*>(p)[0];
  c.w[1] = reinterpret_cast<const uint4*>(p)[1];
}
__device__ __forceinline__ void load_chunk_groups(const bf16* p, int groups, Bf16Chunk& c) {
  uint2 g[kGroups];
#pragma unroll
  for (int i = 0; i < kGroups; ++i)
    g[i] = i < groups ? reinterpret_cast<const uint2*>(p)[i] : make_uint2(0u, 0u);
  c.w[0] = make_uint4(g[0].x, g[0].y, g[1].x, g[1].y);
  c.w[1] = make_uint4(g[2].x, g[2].y, g[3].x, g[3].y);
}
__device__ __forceinline__ float chunk_value(const Bf16Chunk& c, int i) {
  const uint4& w = c.w[i / 8];
  const unsigned word = (i % 8) / 2 == 0   ? w.x
                        : (i % 8) / 2 == 1 ? w.y
                        : (i % 8) / 2 == 2 ? w.z
                                           : w.w;
  return __uint_as_float(i % 2 == 0 ? word << 16 : word & 0xFFFF0000u);  // bf16 -> f32 exactly
}

template <typename T>
struct TensorSource;

template <>
struct TensorSource<bf16> {  // a bf16 tensor
  static constexpr int kOutputs = 1;
  static constexpr int kMinBlocks = 4;
  static constexpr int kBatch = kPasses;
  const bf16* x;
  using Raw = Bf16Chunk;
  __device__ __forceinline__ void load(int64_t at, Raw& r) const { load_chunk(x + at, r); }
  __device__ __forceinline__ void load_groups(int64_t at, int groups, Raw& r) const {
    load_chunk_groups(x + at, groups, r);
  }
  __device__ __forceinline__ void values(int64_t, bool, int, const Raw& r,
                                         float (&v)[1][kChunk]) const {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) v[0][i] = chunk_value(r, i);
  }
};

template <>
struct TensorSource<float> {  // an f32 tensor
  static constexpr int kOutputs = 1;
  static constexpr int kMinBlocks = 2;  // 64 bytes a row: two rows in flight, no spills
  static constexpr int kBatch = 2;
  const float* x;
  struct Raw {
    float4 w[kGroups];
  };
  __device__ __forceinline__ void load(int64_t at, Raw& r) const { load_groups(at, kGroups, r); }
  __device__ __forceinline__ void load_groups(int64_t at, int groups, Raw& r) const {
#pragma unroll
    for (int i = 0; i < kGroups; ++i)
      r.w[i] = i < groups ? reinterpret_cast<const float4*>(x + at)[i] : make_float4(0, 0, 0, 0);
  }
  __device__ __forceinline__ void values(int64_t, bool, int, const Raw& r,
                                         float (&v)[1][kChunk]) const {
#pragma unroll
    for (int i = 0; i < kGroups; ++i) {
      v[0][4 * i] = r.w[i].x, v[0][4 * i + 1] = r.w[i].y;
      v[0][4 * i + 2] = r.w[i].z, v[0][4 * i + 3] = r.w[i].w;
    }
  }
};

// SwiGLU's product silu(gate) * up (bf16 inputs), rounded to bf16 with swiglu_forward's
// arithmetic (cuda_swiglu.cu), so the cast sees the values the bf16 act would hold; also stored
// to `act` when set (the saved activation).
struct SwigluSource {
  static constexpr int kOutputs = 1;
  static constexpr int kMinBlocks = 2;
  static constexpr int kBatch = kPasses;
  const bf16* gate;
  const bf16* up;
  bf16* act;
  struct Raw {
    Bf16Chunk g, u;
  };
  __device__ __forceinline__ void load(int64_t at, Raw& r) const {
    load_chunk(gate + at, r.g);
    load_chunk(up + at, r.u);
  }
  __device__ __forceinline__ void load_groups(int64_t at, int groups, Raw& r) const {
    load_chunk_groups(gate + at, groups, r.g);
    load_chunk_groups(up + at, groups, r.u);
  }
  __device__ __forceinline__ void values(int64_t at, bool full, int groups, const Raw& r,
                                         float (&v)[1][kChunk]) const {
    unsigned packed[kChunk / 2];
#pragma unroll
    for (int i = 0; i < kChunk; i += 2) {
      const bf16 a0 = cuda_detail::from_float<bf16>(
          cuda_detail::swiglu_value(chunk_value(r.g, i), chunk_value(r.u, i)));
      const bf16 a1 = cuda_detail::from_float<bf16>(
          cuda_detail::swiglu_value(chunk_value(r.g, i + 1), chunk_value(r.u, i + 1)));
      v[0][i] = to_float(a0);
      v[0][i + 1] = to_float(a1);
      packed[i / 2] = unsigned{__bfloat16_as_ushort(a0)} | unsigned{__bfloat16_as_ushort(a1)} << 16;
    }
    if (act == nullptr) return;
    if (full) {
      reinterpret_cast<uint4*>(act + at)[0] =
          make_uint4(packed[0], packed[1], packed[2], packed[3]);
      reinterpret_cast<uint4*>(act + at)[1] =
          make_uint4(packed[4], packed[5], packed[6], packed[7]);
      return;
    }
#pragma unroll
    for (int i = 0; i < kGroups; ++i)
      if (i < groups)
        reinterpret_cast<uint2*>(act + at)[i] = make_uint2(packed[2 * i], packed[2 * i + 1]);
  }
};

// SwiGLU's backward: dgate and dup from dact, gate and up (bf16), swiglu_backward's arithmetic,
// each rounded to bf16 as its output is (the values the unfused path's casts would read).
struct SwigluGradientSource {
  static constexpr int kOutputs = 2;
  // Two blocks an SM (128 registers) overlap one's loads with the other's transposed writes;
  // two rows' inputs in flight at a time fit that without spilling.
  static constexpr int kMinBlocks = 2;
  static constexpr int kBatch = 2;
  const bf16* dact;
  const bf16* gate;
  const bf16* up;
  struct Raw {
    Bf16Chunk d, g, u;
  };
  __device__ __forceinline__ void load(int64_t at, Raw& r) const {
    load_chunk(dact + at, r.d);
    load_chunk(gate + at, r.g);
    load_chunk(up + at, r.u);
  }
  __device__ __forceinline__ void load_groups(int64_t at, int groups, Raw& r) const {
    load_chunk_groups(dact + at, groups, r.d);
    load_chunk_groups(gate + at, groups, r.g);
    load_chunk_groups(up + at, groups, r.u);
  }
  __device__ __forceinline__ void values(int64_t, bool, int, const Raw& r,
                                         float (&v)[2][kChunk]) const {
#pragma unroll
    for (int i = 0; i < kChunk; ++i) {
      float dg, du;
      cuda_detail::swiglu_gradients(chunk_value(r.d, i), chunk_value(r.g, i), chunk_value(r.u, i),
                                    dg, du);
      v[0][i] = to_float(cuda_detail::from_float<bf16>(dg));
      v[1][i] = to_float(cuda_detail::from_float<bf16>(du));
    }
  }
};

// ---- the cast ----

// One output of a cast: its scale's amax, its copies (either may be null), where 1 / scale goes,
// and (delayed scaling) its state and history slot.
struct CastOutput {
  const float* amax;
  uint8_t* out;
  uint8_t* out_t;
  float* inv_scale;
  float* state;
  int history_pos;
};
template <int kOutputs>
struct CastOutputs {
  CastOutput o[kOutputs];
};

template <Fp8Format kFormat>
constexpr float kMaxOf = kFormat == Fp8Format::kE4M3 ? 448.0f : 57344.0f;  // as fp8_max

template <Fp8Format kFormat>
__device__ __forceinline__ unsigned to_fp8x4(float a, float b, float c, float d) {
  constexpr __nv_fp8_interpretation_t kind = kFormat == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  const unsigned lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kind);
  const unsigned hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, kind);
  return lo | hi << 16;
}

// The tile's word of (row r, 32-bit column w): 16-byte columns XOR-swizzled by the row's 16-row
// group (see the file comment).
__device__ __forceinline__ int swizzled(int r, int w) { return w ^ (((r / kRunRows) % 8) * 4); }

// Writes the transposed tile (source rows row0.., cols col0..) from shared memory: a thread the
// 16 source rows of group threadIdx.x % 8 for 4 source columns, 16 bytes a transposed row.
__device__ __forceinline__ void write_transposed(const uint32_t (*tile)[kTileWords], int64_t rows,
                                                 int64_t cols, int64_t row0, int64_t col0,
                                                 bool wide_t, uint8_t* out_t) {
  const int run = threadIdx.x % kRunGroups, word = threadIdx.x / kRunGroups;
  const int64_t first_row = row0 + run * kRunRows, first_col = col0 + word * 4;
  if (first_row >= rows || first_col >= cols) return;
  uint32_t w[kRunRows];
#pragma unroll
  for (int j = 0; j < kRunRows; ++j) {
    const int r = run * kRunRows + j;
    w[j] = tile[r][swizzled(r, word)];
  }
  // out[k][m]: bytes k (column first_col + k) of rows 4m .. 4m + 3, a 4 x 4 byte transpose each.
  uint32_t out[4][4];
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const uint32_t t0 = __byte_perm(w[4 * m], w[4 * m + 1], 0x5140);
    const uint32_t t1 = __byte_perm(w[4 * m + 2], w[4 * m + 3], 0x5140);
    const uint32_t t2 = __byte_perm(w[4 * m], w[4 * m + 1], 0x7362);
    const uint32_t t3 = __byte_perm(w[4 * m + 2], w[4 * m + 3], 0x7362);
    out[0][m] = __byte_perm(t0, t1, 0x5410);
    out[1][m] = __byte_perm(t0, t1, 0x7632);
    out[2][m] = __byte_perm(t2, t3, 0x5410);
    out[3][m] = __byte_perm(t2, t3, 0x7632);
  }
  const bool full_run = wide_t && first_row + kRunRows <= rows;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    if (first_col + k >= cols) break;
    uint8_t* at = out_t + (first_col + k) * rows + first_row;
    if (full_run) {
      *reinterpret_cast<uint4*>(at) = make_uint4(out[k][0], out[k][1], out[k][2], out[k][3]);
      continue;
    }
#pragma unroll
    for (int m = 0; m < 4; ++m)
      if (first_row + 4 * m < rows) reinterpret_cast<uint32_t*>(at)[m] = out[k][m];
  }
}

// The cast of a rows x cols source into kOutputs FP8 outputs, kTile x kTile tiles over a
// persistent grid. wide: the source and row-major outputs take 16-byte accesses (cols a
// multiple of 16, pointers 16-byte aligned); wide_t: the transposed outputs do (rows a multiple
// of 16, pointers 16-byte aligned). kDelayed: each output's amax is its state's scale amax, and
// the block's amax goes to finish_delayed.
template <typename Source, Fp8Format kFormat, bool kDelayed>
__global__ void __launch_bounds__(kCastThreads, Source::kMinBlocks)
    cast_kernel(Source source, int64_t rows, int64_t cols, bool wide, bool wide_t,
                CastOutputs<Source::kOutputs> outputs) {
  constexpr int K = Source::kOutputs;
  __shared__ __align__(16) uint32_t tile[K][kTile][kTileWords];
  float scale[K], local_amax[K];
  bool transposed = false;
#pragma unroll
  for (int o = 0; o < K; ++o) {
    const float a = *outputs.o[o].amax;
    scale[o] = a > 0.0f ? kMaxOf<kFormat> / a : 1.0f;
    local_amax[o] = 0.0f;
    transposed = transposed || outputs.o[o].out_t != nullptr;
    if (blockIdx.x == 0 && threadIdx.x == 0) *outputs.o[o].inv_scale = 1.0f / scale[o];
  }
  const int64_t tile_cols = (cols + kTile - 1) / kTile;
  const int64_t tiles = tile_cols * ((rows + kTile - 1) / kTile);
  const int chunk = threadIdx.x % kChunksPerRow, first_row = threadIdx.x / kChunksPerRow;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t row0 = t / tile_cols * kTile, col0 = t % tile_cols * kTile;
    const int64_t col = col0 + chunk * kChunk;
    const int64_t left = col < cols ? (cols - col) / kGroup : 0;  // 4-element groups in range
    const int groups = left < kGroups ? static_cast<int>(left) : kGroups;
    const bool full = wide && groups == kGroups;
    // The thread's loads first (Source::kBatch rows of the tile), then their conversions: the
    // loads are in flight together instead of one at a time.
#pragma unroll
    for (int p0 = 0; p0 < kPasses; p0 += Source::kBatch) {
      typename Source::Raw raw[Source::kBatch];
#pragma unroll
      for (int b = 0; b < Source::kBatch; ++b) {
        const int64_t row = row0 + first_row + (p0 + b) * kRowsPerPass;
        if (row >= rows || groups == 0) continue;
        if (full) {
          source.load(row * cols + col, raw[b]);
        } else {
          source.load_groups(row * cols + col, groups, raw[b]);
        }
      }
#pragma unroll
      for (int b = 0; b < Source::kBatch; ++b) {
        const int r = first_row + (p0 + b) * kRowsPerPass;
        const int64_t row = row0 + r;
        if (row >= rows || groups == 0) continue;
        float v[K][kChunk];
        source.values(row * cols + col, full, groups, raw[b], v);
#pragma unroll
        for (int o = 0; o < K; ++o) {
          uint32_t packed[kGroups];
#pragma unroll
          for (int i = 0; i < kGroups; ++i) {
            packed[i] = to_fp8x4<kFormat>(v[o][4 * i] * scale[o], v[o][4 * i + 1] * scale[o],
                                          v[o][4 * i + 2] * scale[o], v[o][4 * i + 3] * scale[o]);
            if constexpr (kDelayed) {
#pragma unroll
              for (int j = 0; j < kGroup; ++j)
                local_amax[o] = abs_max(local_amax[o], v[o][4 * i + j]);
            }
          }
          const uint4 bytes = make_uint4(packed[0], packed[1], packed[2], packed[3]);
          uint8_t* out = outputs.o[o].out;
          if (out != nullptr) {
            if (full) {
              *reinterpret_cast<uint4*>(out + row * cols + col) = bytes;
            } else {
#pragma unroll
              for (int i = 0; i < kGroups; ++i)
                if (i < groups) reinterpret_cast<uint32_t*>(out + row * cols + col)[i] = packed[i];
            }
          }
          if (transposed) *reinterpret_cast<uint4*>(&tile[o][r][swizzled(r, chunk * 4)]) = bytes;
        }
      }
    }
    if (!transposed) continue;  // uniform over the block: no thread waits at a barrier
    __syncthreads();
#pragma unroll
    for (int o = 0; o < K; ++o)
      if (outputs.o[o].out_t != nullptr)
        write_transposed(tile[o], rows, cols, row0, col0, wide_t, outputs.o[o].out_t);
    __syncthreads();  // the tile is read before the next tile overwrites it
  }
  if constexpr (kDelayed) {
    __shared__ float shared[32];
#pragma unroll
    for (int o = 0; o < K; ++o) {
      const float block_amax = cuda_detail::block_max(local_amax[o], shared);  // every thread
      if (threadIdx.x == 0)
        finish_delayed(block_amax, outputs.o[o].state, outputs.o[o].history_pos);
    }
  }
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

bool slot_ok(int pos) { return pos >= 0 && pos < kFp8AmaxHistory; }

// 16-byte accesses along rows: cols a multiple of 16 and every pointer (null allowed) aligned.
bool wide_rows(int64_t cols, std::initializer_list<const void*> pointers) {
  if (cols % kChunk != 0) return false;
  for (const void* p : pointers)
    if (!aligned(p, 16)) return false;
  return true;
}

// A persistent grid: one block a tile up to as many blocks as are resident on the GPU at once
// (the occupancy of `kernel`, cached: the same on every GPU of a process in practice, and only
// the grid's size, never a result, depends on it).
template <auto kKernel>
unsigned persistent_grid(int64_t rows, int64_t cols) {
  static const int64_t resident = [] {
    int device = 0, sms = 0, per_sm = 0;
    SHARDTRAIN_CUDA_CHECK(cudaGetDevice(&device));
    SHARDTRAIN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    SHARDTRAIN_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kKernel, kCastThreads, 0));
    return int64_t{sms} * (per_sm > 0 ? per_sm : 1);
  }();
  const int64_t tiles = ((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile);
  return static_cast<unsigned>(tiles < resident ? tiles : resident);
}

template <typename Source, Fp8Format kFormat, bool kDelayed>
void launch_cast(const Source& source, int64_t rows, int64_t cols, bool wide, bool wide_t,
                 const CastOutputs<Source::kOutputs>& outputs, cudaStream_t stream) {
  constexpr auto kernel = cast_kernel<Source, kFormat, kDelayed>;
  cast_kernel<Source, kFormat, kDelayed>
      <<<persistent_grid<kernel>(rows, cols), kCastThreads, 0, stream>>>(source, rows, cols, wide,
                                                                         wide_t, outputs);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

template <typename Source, bool kDelayed>
void launch_cast(Fp8Format format, const Source& source, int64_t rows, int64_t cols, bool wide,
                 bool wide_t, const CastOutputs<Source::kOutputs>& outputs, cudaStream_t stream) {
  if (format == Fp8Format::kE4M3) {
    launch_cast<Source, Fp8Format::kE4M3, kDelayed>(source, rows, cols, wide, wide_t, outputs,
                                                    stream);
  } else {
    launch_cast<Source, Fp8Format::kE5M2, kDelayed>(source, rows, cols, wide, wide_t, outputs,
                                                    stream);
  }
}

// A tensor cast (current or delayed scaling) of `dtype`.
template <bool kDelayed>
void launch_tensor_cast(DType dtype, const void* x, int64_t rows, int64_t cols, Fp8Format format,
                        const CastOutput& output, cudaStream_t stream) {
  const bool wide = wide_rows(cols, {x, output.out});
  const bool wide_t = wide_rows(rows, {output.out_t});
  SHARDTRAIN_DISPATCH_FLOAT(dtype, T,
                            launch_cast<TensorSource<T>, kDelayed>(
                                format, TensorSource<T>{static_cast<const T*>(x)}, rows, cols, wide,
                                wide_t, CastOutputs<1>{{output}}, stream));
}

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
  launch_tensor_cast<false>(dtype, x, rows, cols, format,
                            CastOutput{amax, out, out_t, inv_scale, nullptr, 0}, stream);
}

void fp8_cast_delayed(DType dtype, const void* x, int64_t rows, int64_t cols, Fp8Format format,
                      float* state, int history_pos, uint8_t* out, uint8_t* out_t, float* inv_scale,
                      cudaStream_t stream) {
  const size_t vector_bytes = kGroup * dtype_size(dtype);
  require_launch(rows > 0 && cols > 0 && rows % kGroup == 0 && cols % kGroup == 0 &&
                     aligned(x, vector_bytes) && aligned(out, 4) && aligned(out_t, 4) &&
                     slot_ok(history_pos),
                 "fp8_cast_delayed", rows, cols);
  launch_tensor_cast<true>(
      dtype, x, rows, cols, format,
      CastOutput{state + kFp8ScaleAmaxIndex, out, out_t, inv_scale, state, history_pos}, stream);
}

void swiglu_backward_fp8(const void* dact, const void* gate, const void* up, int64_t rows,
                         int64_t cols, Fp8Format format, float* state_gate, int pos_gate,
                         float* state_up, int pos_up, uint8_t* dgate_q, uint8_t* dgate_t,
                         uint8_t* dup_q, uint8_t* dup_t, float* inv_scale_gate, float* inv_scale_up,
                         cudaStream_t stream) {
  require_launch(rows > 0 && cols > 0 && rows % kGroup == 0 && cols % kGroup == 0 &&
                     aligned(dact, 8) && aligned(gate, 8) && aligned(up, 8) &&
                     aligned(dgate_q, 4) && aligned(dgate_t, 4) && aligned(dup_q, 4) &&
                     aligned(dup_t, 4) && slot_ok(pos_gate) && slot_ok(pos_up),
                 "swiglu_backward_fp8", rows, cols);
  const SwigluGradientSource source{static_cast<const bf16*>(dact), static_cast<const bf16*>(gate),
                                    static_cast<const bf16*>(up)};
  const CastOutputs<2> outputs{
      {CastOutput{state_gate + kFp8ScaleAmaxIndex, dgate_q, dgate_t, inv_scale_gate, state_gate,
                  pos_gate},
       CastOutput{state_up + kFp8ScaleAmaxIndex, dup_q, dup_t, inv_scale_up, state_up, pos_up}}};
  launch_cast<SwigluGradientSource, true>(format, source, rows, cols,
                                          wide_rows(cols, {dact, gate, up, dgate_q, dup_q}),
                                          wide_rows(rows, {dgate_t, dup_t}), outputs, stream);
}

void swiglu_forward_fp8(const void* gate, const void* up, int64_t rows, int64_t cols, float* state,
                        int history_pos, void* act, uint8_t* out, uint8_t* out_t, float* inv_scale,
                        cudaStream_t stream) {
  require_launch(rows > 0 && cols > 0 && rows % kGroup == 0 && cols % kGroup == 0 &&
                     aligned(gate, 8) && aligned(up, 8) && aligned(act, 8) && aligned(out, 4) &&
                     aligned(out_t, 4) && slot_ok(history_pos),
                 "swiglu_forward_fp8", rows, cols);
  const SwigluSource source{static_cast<const bf16*>(gate), static_cast<const bf16*>(up),
                            static_cast<bf16*>(act)};
  launch_cast<SwigluSource, Fp8Format::kE4M3, true>(
      source, rows, cols, wide_rows(cols, {gate, up, act, out}), wide_rows(rows, {out_t}),
      CastOutputs<1>{
          {CastOutput{state + kFp8ScaleAmaxIndex, out, out_t, inv_scale, state, history_pos}}},
      stream);
}

}  // namespace shardtrain::cuda_kernels
