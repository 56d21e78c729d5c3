// LoRA's rank-wide products on tensor cores (cuda_lora_gemm.h). cuBLASLt tiles these shapes as
// it would a square GEMM (few blocks over the rank-wide side, no split of the long reduction), and
// reaches a fraction of HBM speed; here each block stages a tile of the wide operand in shared
// memory with 16-byte loads (zero-filled past every edge), the rank-wide operand padded to a
// multiple of 16 (SP), and runs m16n16k16 bf16 WMMA with fp32 accumulators. Enough blocks for
// about four per SM come from splitting the long reduction; the split's fp32 partial sums are
// added in a fixed order (deterministic).
// Measured slower than cuBLASLt at Llama-3.2-1B's shapes (cuda_lora_linear.cpp: opt-in); what
// to look at next: occupancy (160-255 registers a thread), no load/compute overlap within a
// block (one synchronous tile at a time), thin_in's small tiles (4096 blocks of 64 x 128).
#include <mma.h>

#include <type_traits>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_lora_gemm.h"

namespace shardtrain::cuda_lora {
namespace {

namespace wmma = nvcuda::wmma;
using cuda_detail::bf16;
using cuda_detail::from_float;
using cuda_detail::to_float;

using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
template <typename Layout>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, Layout>;
template <typename Layout>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, Layout>;

// How a strided operand is loaded: 16-byte vectors along j (stride_j 1), along i (stride_i 1),
// or element by element (odd strides, unaligned data).
enum LoadMode : int { kScalar = 0, kVectorJ = 1, kVectorI = 2 };

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int load_mode(const void* data, int64_t stride_i, int64_t stride_j) {
  if (!cuda_detail::aligned16(data)) return kScalar;
  if (stride_j == 1 && stride_i % 8 == 0) return kVectorJ;
  if (stride_i == 1 && stride_j % 8 == 0) return kVectorI;
  return kScalar;
}

// Eight consecutive bf16 (raw bits) of a line from index `at`, zero at and past `end`.
// REQUIRES for the vector load: line + at 16-byte aligned.
__device__ __forceinline__ uint4 load8_line(const uint16_t* line, int64_t at, int64_t end) {
  if (at + 8 <= end) return *reinterpret_cast<const uint4*>(line + at);
  union {
    uint4 vector;
    uint16_t value[8];
  } r;
#pragma unroll
  for (int e = 0; e < 8; ++e) r.value[e] = at + e < end ? line[at + e] : uint16_t{0};
  return r.vector;
}

// tile[r * ld + c] (r < R, c < C) = m(r0 + r, c0 + c), zero where r0 + r >= r_end or
// c0 + c >= c_end; m(i, j) at data[i * si + j * sj]. REQUIRES: ld, c0 (kVectorJ) or r0
// (kVectorI) multiples of 8; C (kVectorJ) or R (kVectorI) a multiple of 8.
template <int R, int C, int kThreads>
__device__ __forceinline__ void load_tile(bf16* tile, int ld, const bf16* data, int64_t si,
                                          int64_t sj, int64_t r0, int64_t r_end, int64_t c0,
                                          int64_t c_end, int mode) {
  const int tid = threadIdx.x;
  const uint16_t* raw = reinterpret_cast<const uint16_t*>(data);
  uint16_t* out = reinterpret_cast<uint16_t*>(tile);
  constexpr uint4 kZero{0, 0, 0, 0};
  if (mode == kVectorJ) {
    constexpr int kChunks = R * (C / 8);
    constexpr int kPer = (kChunks + kThreads - 1) / kThreads;
    constexpr int kBatch = kPer < 16 ? kPer : 16;
    for (int base = 0; base < kChunks; base += kThreads * kBatch) {
      uint4 v[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = base + b * kThreads + tid;
        const int r = idx / (C / 8), c = (idx % (C / 8)) * 8;
        v[b] = idx < kChunks && r0 + r < r_end ? load8_line(raw + (r0 + r) * si, c0 + c, c_end)
                                               : kZero;
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = base + b * kThreads + tid;
        const int r = idx / (C / 8), c = (idx % (C / 8)) * 8;
        if (idx < kChunks) *reinterpret_cast<uint4*>(out + r * ld + c) = v[b];
      }
    }
  } else if (mode == kVectorI) {
    constexpr int kChunks = C * (R / 8);
    constexpr int kPer = (kChunks + kThreads - 1) / kThreads;
    constexpr int kBatch = kPer < 8 ? kPer : 8;
    for (int base = 0; base < kChunks; base += kThreads * kBatch) {
      uint4 v[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = base + b * kThreads + tid;
        const int c = idx / (R / 8), r = (idx % (R / 8)) * 8;
        v[b] = idx < kChunks && c0 + c < c_end ? load8_line(raw + (c0 + c) * sj, r0 + r, r_end)
                                               : kZero;
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int idx = base + b * kThreads + tid;
        const int c = idx / (R / 8), r = (idx % (R / 8)) * 8;
        if (idx >= kChunks) continue;
        const uint16_t* values = reinterpret_cast<const uint16_t*>(&v[b]);
#pragma unroll
        for (int e = 0; e < 8; ++e) out[(r + e) * ld + c] = values[e];
      }
    }
  } else {
    constexpr int kElems = R * C;
    const bool along_j = sj == 1;  // consecutive threads read consecutive addresses
    for (int base = 0; base < kElems; base += kThreads * 8) {
      uint16_t v[8];
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const int idx = base + b * kThreads + tid;
        const int r = along_j ? idx / C : idx % R, c = along_j ? idx % C : idx / R;
        v[b] = idx < kElems && r0 + r < r_end && c0 + c < c_end ? raw[(r0 + r) * si + (c0 + c) * sj]
                                                                : uint16_t{0};
      }
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        const int idx = base + b * kThreads + tid;
        const int r = along_j ? idx / C : idx % R, c = along_j ? idx % C : idx / R;
        if (idx < kElems) out[r * ld + c] = v[b];
      }
    }
  }
}

// ---- thin_out: y_NS = alpha * x_NK @ w^T ----
// A block: kOutRows rows (one warp per 16), all SP outputs, K in tiles of kOutK.
constexpr int kOutThreads = 128, kOutRows = 64, kOutK = 256, kOutLd = kOutK + 8;

template <int SP>
constexpr size_t thin_out_smem() {
  const size_t tiles = (kOutRows + SP) * kOutLd * sizeof(bf16);
  const size_t result = kOutRows * (SP + 4) * sizeof(float);
  return tiles > result ? tiles : result;
}

template <int SP>
__global__ void __launch_bounds__(kOutThreads)
    thin_out_kernel(const bf16* x, int64_t ldx, int x_mode, Strided w, int w_mode, int64_t N,
                    int64_t K, int S, int64_t k_per_split, float alpha, bf16* y, int64_t ldy,
                    bool accumulate, float* partial) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* xs = reinterpret_cast<bf16*>(smem);  // [kOutRows][kOutLd]
  bf16* ws = xs + kOutRows * kOutLd;         // [SP][kOutLd]
  const int warp = threadIdx.x / 32;
  const int64_t row0 = int64_t{blockIdx.x} * kOutRows;
  const int64_t k_begin = int64_t{blockIdx.y} * k_per_split;
  const int64_t k_end = k_begin + k_per_split < K ? k_begin + k_per_split : K;
  FragC acc[SP / 16];
#pragma unroll
  for (int j = 0; j < SP / 16; ++j) wmma::fill_fragment(acc[j], 0.0f);
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kOutK) {
    load_tile<kOutRows, kOutK, kOutThreads>(xs, kOutLd, x, ldx, 1, row0, N, k0, k_end, x_mode);
    load_tile<SP, kOutK, kOutThreads>(ws, kOutLd, static_cast<const bf16*>(w.data), w.stride_i,
                                      w.stride_j, 0, S, k0, k_end, w_mode);
    __syncthreads();
#pragma unroll 4
    for (int ks = 0; ks < kOutK / 16; ++ks) {
      FragA<wmma::row_major> a;
      wmma::load_matrix_sync(a, xs + warp * 16 * kOutLd + ks * 16, kOutLd);
#pragma unroll
      for (int j = 0; j < SP / 16; ++j) {
        FragB<wmma::col_major> b;
        wmma::load_matrix_sync(b, ws + j * 16 * kOutLd + ks * 16, kOutLd);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
    __syncthreads();
  }
  constexpr int kResultLd = SP + 4;
  float* result = reinterpret_cast<float*>(smem);  // [kOutRows][kResultLd]
#pragma unroll
  for (int j = 0; j < SP / 16; ++j) {
    wmma::store_matrix_sync(result + warp * 16 * kResultLd + j * 16, acc[j], kResultLd,
                            wmma::mem_row_major);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kOutRows * S; i += kOutThreads) {
    const int r = i / S, s = i % S;
    const int64_t n = row0 + r;
    if (n >= N) continue;
    const float value = result[r * kResultLd + s];
    if (partial != nullptr) {
      partial[(int64_t{blockIdx.y} * N + n) * S + s] = value;
    } else {
      bf16* out = y + n * ldy + s;
      *out = from_float<bf16>(alpha * value + (accumulate ? to_float(*out) : 0.0f));
    }
  }
}

__global__ void thin_out_reduce(const float* partial, int64_t splits, int64_t N, int64_t S,
                                float alpha, bf16* y, int64_t ldy, bool accumulate) {
  const int64_t n_total = N * S;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n_total;
       i += int64_t{gridDim.x} * blockDim.x) {
    float sum = 0;
    for (int64_t p = 0; p < splits; ++p) sum += partial[p * n_total + i];
    bf16* out = y + (i / S) * ldy + i % S;
    *out = from_float<bf16>(alpha * sum + (accumulate ? to_float(*out) : 0.0f));
  }
}

// ---- thin_in: y_NO = alpha * h_NS @ w^T + bias + c ----
// A block: kInRows x kInCols outputs, 8 warps of 16 x 64.
constexpr int kInThreads = 256, kInRows = 64, kInCols = 128, kInResultLd = kInCols + 4;

template <int SP>
constexpr size_t thin_in_smem() {
  const size_t tiles = (kInRows + kInCols) * (SP + 8) * sizeof(bf16);
  const size_t result = kInRows * kInResultLd * sizeof(float);
  return tiles > result ? tiles : result;
}

template <int SP>
__global__ void __launch_bounds__(kInThreads)
    thin_in_kernel(const bf16* h, int64_t ldh, int h_mode, Strided w, int w_mode, int64_t N,
                   int64_t O, int S, float alpha, const bf16* bias, const bf16* c, bf16* y,
                   int64_t ldy, bool vector_out) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kLd = SP + 8;
  bf16* hs = reinterpret_cast<bf16*>(smem);  // [kInRows][kLd]
  bf16* ws = hs + kInRows * kLd;             // [kInCols][kLd]: w(o, s) at ws[o * kLd + s]
  const int warp = threadIdx.x / 32;
  const int64_t row0 = int64_t{blockIdx.y} * kInRows, col0 = int64_t{blockIdx.x} * kInCols;
  load_tile<kInRows, SP, kInThreads>(hs, kLd, h, ldh, 1, row0, N, 0, S, h_mode);
  load_tile<kInCols, SP, kInThreads>(ws, kLd, static_cast<const bf16*>(w.data), w.stride_i,
                                     w.stride_j, col0, O, 0, S, w_mode);
  __syncthreads();
  const int warp_row = warp % 4, warp_col = warp / 4;
  FragC acc[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) wmma::fill_fragment(acc[j], 0.0f);
#pragma unroll
  for (int ks = 0; ks < SP / 16; ++ks) {
    FragA<wmma::row_major> a;
    wmma::load_matrix_sync(a, hs + warp_row * 16 * kLd + ks * 16, kLd);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      FragB<wmma::col_major> b;
      wmma::load_matrix_sync(b, ws + (warp_col * 64 + j * 16) * kLd + ks * 16, kLd);
      wmma::mma_sync(acc[j], a, b, acc[j]);
    }
  }
  __syncthreads();
  float* result = reinterpret_cast<float*>(smem);  // [kInRows][kInResultLd]
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    wmma::store_matrix_sync(result + warp_row * 16 * kInResultLd + warp_col * 64 + j * 16, acc[j],
                            kInResultLd, wmma::mem_row_major);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kInRows * (kInCols / 8); i += kInThreads) {
    const int r = i / (kInCols / 8), cc = (i % (kInCols / 8)) * 8;
    const int64_t n = row0 + r, o = col0 + cc;
    if (n >= N || o >= O) continue;
    float v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = alpha * result[r * kInResultLd + cc + e];
    if (vector_out && o + 8 <= O) {
      float extra[8];
      if (bias != nullptr) {
        cuda_detail::load8(bias + o, extra);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] += extra[e];
      }
      if (c != nullptr) {
        cuda_detail::load8(c + n * ldy + o, extra);
#pragma unroll
        for (int e = 0; e < 8; ++e) v[e] += extra[e];
      }
      cuda_detail::store8(y + n * ldy + o, v);
    } else {
      for (int e = 0; e < 8 && o + e < O; ++e) {
        float value = v[e];
        if (bias != nullptr) value += to_float(bias[o + e]);
        if (c != nullptr) value += to_float(c[n * ldy + o + e]);
        y[n * ldy + o + e] = from_float<bf16>(value);
      }
    }
  }
}

// ---- thin_grad: g(s, k) = alpha * sum_n p[n][s] x[n][k] ----
// A block: kGradCols columns of k (one warp per 16), all SP rows of g, rows n in tiles of
// kGradRows.
constexpr int kGradThreads = 128, kGradRows = 128, kGradCols = 64, kGradLd = kGradCols + 8,
              kGradResultLd = kGradCols + 4;

template <int SP>
constexpr size_t thin_grad_smem() {
  const size_t tiles = kGradRows * (kGradLd + SP + 8) * sizeof(bf16);
  const size_t result = SP * kGradResultLd * sizeof(float);
  return tiles > result ? tiles : result;
}

template <typename G>
__device__ __forceinline__ void store_grad(G* out, float value, bool accumulate) {
  *out = from_float<G>(value + (accumulate ? to_float(*out) : 0.0f));
}

template <int SP, typename G>
__global__ void __launch_bounds__(kGradThreads)
    thin_grad_kernel(const bf16* p, int64_t ldp, int p_mode, const bf16* x, int64_t ldx,
                     int x_mode, int64_t N, int64_t K, int S, int64_t rows_per_split, float alpha,
                     G* g, int64_t gs, int64_t gk, bool accumulate, float* partial) {
  extern __shared__ __align__(128) unsigned char smem[];
  constexpr int kPLd = SP + 8;
  bf16* xs = reinterpret_cast<bf16*>(smem);  // [kGradRows][kGradLd]
  bf16* ps = xs + kGradRows * kGradLd;       // [kGradRows][kPLd]
  const int warp = threadIdx.x / 32;
  const int64_t col0 = int64_t{blockIdx.x} * kGradCols;
  const int64_t n_begin = int64_t{blockIdx.y} * rows_per_split;
  const int64_t n_end = n_begin + rows_per_split < N ? n_begin + rows_per_split : N;
  FragC acc[SP / 16];
#pragma unroll
  for (int j = 0; j < SP / 16; ++j) wmma::fill_fragment(acc[j], 0.0f);
  for (int64_t n0 = n_begin; n0 < n_end; n0 += kGradRows) {
    load_tile<kGradRows, kGradCols, kGradThreads>(xs, kGradLd, x, ldx, 1, n0, n_end, col0, K,
                                                  x_mode);
    load_tile<kGradRows, SP, kGradThreads>(ps, kPLd, p, ldp, 1, n0, n_end, 0, S, p_mode);
    __syncthreads();
#pragma unroll 2
    for (int ks = 0; ks < kGradRows / 16; ++ks) {
      FragB<wmma::row_major> b;  // x(n, k)
      wmma::load_matrix_sync(b, xs + ks * 16 * kGradLd + warp * 16, kGradLd);
#pragma unroll
      for (int j = 0; j < SP / 16; ++j) {
        FragA<wmma::col_major> a;  // p^T(s, n) = p[n][s]
        wmma::load_matrix_sync(a, ps + ks * 16 * kPLd + j * 16, kPLd);
        wmma::mma_sync(acc[j], a, b, acc[j]);
      }
    }
    __syncthreads();
  }
  float* result = reinterpret_cast<float*>(smem);  // [SP][kGradResultLd]
#pragma unroll
  for (int j = 0; j < SP / 16; ++j) {
    wmma::store_matrix_sync(result + j * 16 * kGradResultLd + warp * 16, acc[j], kGradResultLd,
                            wmma::mem_row_major);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < S * kGradCols; i += kGradThreads) {
    const int s = i / kGradCols, kk = i % kGradCols;
    const int64_t k = col0 + kk;
    if (k >= K) continue;
    const float value = result[s * kGradResultLd + kk];
    if (partial != nullptr) {
      partial[(int64_t{blockIdx.y} * S + s) * K + k] = value;
    } else {
      store_grad(g + s * gs + k * gk, alpha * value, accumulate);
    }
  }
}

template <typename G>
__global__ void thin_grad_reduce(const float* partial, int64_t splits, int64_t S, int64_t K,
                                 float alpha, G* g, int64_t gs, int64_t gk, bool accumulate) {
  const int64_t n_total = S * K;
  const bool along_k = gk == 1;  // write g in its own order
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n_total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = along_k ? i / K : i % S, k = along_k ? i % K : i / S;
    float sum = 0;
    for (int64_t q = 0; q < splits; ++q) sum += partial[q * n_total + s * K + k];
    store_grad(g + s * gs + k * gk, alpha * sum, accumulate);
  }
}

// ---- launch helpers ----

int sm_count() {
  static const int count = [] {
    int device = 0, sms = 132;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      (void)cudaGetLastError();
      sms = 132;
    }
    return sms;
  }();
  return count;
}

// How a reduction of `length` in tiles of `tile` is split over blocks, given `blocks` blocks
// from the other dimension: about four blocks per SM, whole tiles per split.
struct Split {
  int64_t count = 1, length = 0;  // splits, and the reduction length each covers
};
Split split_for(int64_t length, int64_t tile, int64_t blocks) {
  const int64_t tiles = ceil_div(length, tile);
  int64_t want = ceil_div(4 * int64_t{sm_count()}, blocks);
  want = want < 1 ? 1 : (want > tiles ? tiles : want);
  const int64_t tiles_per_split = ceil_div(tiles, want);
  return {ceil_div(tiles, tiles_per_split), tiles_per_split * tile};
}

// Calls fn(std::integral_constant<int, SP>) with SP = S rounded up to a multiple of 16.
template <typename Fn>
void dispatch_padded(int64_t S, Fn&& fn) {
  switch ((S + 15) / 16) {
    case 1: return fn(std::integral_constant<int, 16>{});
    case 2: return fn(std::integral_constant<int, 32>{});
    case 3: return fn(std::integral_constant<int, 48>{});
    case 4: return fn(std::integral_constant<int, 64>{});
    case 5: return fn(std::integral_constant<int, 80>{});
    case 6: return fn(std::integral_constant<int, 96>{});
    case 7: return fn(std::integral_constant<int, 112>{});
    case 8: return fn(std::integral_constant<int, 128>{});
    default:
      std::fprintf(stderr, "%s:%d: rank-wide dimension %lld > %lld\n", __FILE__, __LINE__,
                   static_cast<long long>(S), static_cast<long long>(kMaxThin));
      std::abort();
  }
}

template <typename Kernel>
void allow_smem(Kernel kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    SHARDTRAIN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(bytes)));
  }
}

unsigned reduce_grid(int64_t n) { return cuda_detail::grid_for(n, 256); }

}  // namespace

int64_t thin_out_scratch_floats(int64_t N, int64_t K, int64_t S) {
  const Split split = split_for(K, kOutK, ceil_div(N, kOutRows));
  return split.count > 1 ? split.count * N * S : 0;
}

void thin_out(const void* x, int64_t ldx, Strided w, int64_t N, int64_t K, int64_t S, float alpha,
              void* y, int64_t ldy, bool accumulate, float* scratch, cudaStream_t stream) {
  const int64_t row_blocks = ceil_div(N, kOutRows);
  const Split split = split_for(K, kOutK, row_blocks);
  float* partial = split.count > 1 ? scratch : nullptr;
  const int x_mode = load_mode(x, ldx, 1), w_mode = load_mode(w.data, w.stride_i, w.stride_j);
  dispatch_padded(S, [&](auto padded) {
    constexpr int SP = decltype(padded)::value;
    constexpr size_t smem = thin_out_smem<SP>();
    allow_smem(thin_out_kernel<SP>, smem);
    thin_out_kernel<SP><<<dim3(static_cast<unsigned>(row_blocks), static_cast<unsigned>(split.count)), kOutThreads, smem, stream>>>(
        static_cast<const bf16*>(x), ldx, x_mode, w, w_mode, N, K, static_cast<int>(S),
        split.length, alpha, static_cast<bf16*>(y), ldy, accumulate, partial);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
  if (partial != nullptr) {
    thin_out_reduce<<<reduce_grid(N * S), 256, 0, stream>>>(
        partial, split.count, N, S, alpha, static_cast<bf16*>(y), ldy, accumulate);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
  }
}

void thin_in(const void* h, int64_t ldh, Strided w, int64_t N, int64_t O, int64_t S, float alpha,
             const void* bias, const void* c, void* y, int64_t ldy, cudaStream_t stream) {
  const int h_mode = load_mode(h, ldh, 1), w_mode = load_mode(w.data, w.stride_i, w.stride_j);
  const bool vector_out = ldy % 8 == 0 && cuda_detail::aligned16(y) &&
                          (bias == nullptr || cuda_detail::aligned16(bias)) &&
                          (c == nullptr || cuda_detail::aligned16(c));
  dispatch_padded(S, [&](auto padded) {
    constexpr int SP = decltype(padded)::value;
    constexpr size_t smem = thin_in_smem<SP>();
    allow_smem(thin_in_kernel<SP>, smem);
    thin_in_kernel<SP><<<dim3(static_cast<unsigned>(ceil_div(O, kInCols)), static_cast<unsigned>(ceil_div(N, kInRows))), kInThreads, smem,
                         stream>>>(static_cast<const bf16*>(h), ldh, h_mode, w, w_mode, N, O,
                                   static_cast<int>(S), alpha, static_cast<const bf16*>(bias),
                                   static_cast<const bf16*>(c), static_cast<bf16*>(y), ldy,
                                   vector_out);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

int64_t thin_grad_scratch_floats(int64_t N, int64_t K, int64_t S) {
  const Split split = split_for(N, kGradRows, ceil_div(K, kGradCols));
  return split.count > 1 ? split.count * S * K : 0;
}

void thin_grad(const void* p, int64_t ldp, const void* x, int64_t ldx, int64_t N, int64_t K,
               int64_t S, float alpha, DType g_dtype, void* g, int64_t g_stride_s,
               int64_t g_stride_k, bool accumulate, float* scratch, cudaStream_t stream) {
  const int64_t col_blocks = ceil_div(K, kGradCols);
  const Split split = split_for(N, kGradRows, col_blocks);
  float* partial = split.count > 1 ? scratch : nullptr;
  const int p_mode = load_mode(p, ldp, 1), x_mode = load_mode(x, ldx, 1);
  SHARDTRAIN_DISPATCH_FLOAT(g_dtype, G, {
    dispatch_padded(S, [&](auto padded) {
      constexpr int SP = decltype(padded)::value;
      constexpr size_t smem = thin_grad_smem<SP>();
      allow_smem(thin_grad_kernel<SP, G>, smem);
      thin_grad_kernel<SP, G><<<dim3(static_cast<unsigned>(col_blocks), static_cast<unsigned>(split.count)), kGradThreads, smem, stream>>>(
          static_cast<const bf16*>(p), ldp, p_mode, static_cast<const bf16*>(x), ldx, x_mode, N, K,
          static_cast<int>(S), split.length, alpha, static_cast<G*>(g), g_stride_s, g_stride_k,
          accumulate, partial);
    });
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    if (partial != nullptr) {
      thin_grad_reduce<G><<<reduce_grid(S * K), 256, 0, stream>>>(
          partial, split.count, S, K, alpha, static_cast<G*>(g), g_stride_s, g_stride_k,
          accumulate);
      SHARDTRAIN_CUDA_CHECK_LAUNCH();
    }
  });
}

}  // namespace shardtrain::cuda_lora
