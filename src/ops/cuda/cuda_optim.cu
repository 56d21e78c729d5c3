// Optimizer kernels over fp32 shards: AdamW (torch.optim.AdamW's single-tensor formula, the
// same element math as CpuOps::adamw), its multi-range form (one launch for a whole step, with
// the cast to the compute copy and the grad zeroing folded in) and the sum of squares for the
// global gradient norm.
#include <algorithm>
#include <cstring>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

constexpr int kThreads = 256;

// One element: IEEE sqrt and division (no fast-math) match the CPU reference to rounding.
__device__ __forceinline__ void adamw_element(float& param, float grad, float& m, float& v,
                                              const AdamWCoefficients& c) {
  const float g = grad * c.grad_scale;
  const float p = param * c.decay;
  const float m_new = m + c.m_weight * (g - m);
  const float v_new = c.v_decay * v + c.v_weight * g * g;
  const float denom = __fsqrt_rn(v_new) / c.bias_correction2_sqrt + c.eps;
  m = m_new;
  v = v_new;
  param = p - c.step_size * (m_new / denom);
}

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n,
                             AdamWCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    adamw_element(param[i], grad[i], m[i], v[i], c);
  }
}

// The same with float4 accesses (n a multiple of 4, 16-byte aligned arrays): memory-bound.
__global__ void adamw_vec_kernel(float4* param, const float4* grad, float4* m, float4* v,
                                 int64_t vectors, AdamWCoefficients c) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < vectors;
       i += int64_t{gridDim.x} * blockDim.x) {
    float4 p = param[i], mm = m[i], vv = v[i];
    const float4 g = grad[i];
    adamw_element(p.x, g.x, mm.x, vv.x, c);
    adamw_element(p.y, g.y, mm.y, vv.y, c);
    adamw_element(p.z, g.z, mm.z, vv.z, c);
    adamw_element(p.w, g.w, mm.w, vv.w, c);
    param[i] = p;
    m[i] = mm;
    v[i] = vv;
  }
}

// ---- adamw_multi ----
// Work layout: each range is cut into items of 4 elements. When its four fp32 arrays share one
// 16-byte phase (and the compute copy's 4-element groups are 8-byte aligned), the first `vectors`
// items are float4 groups starting at element `head` (0..3, the scalar prefix up to alignment);
// the remaining items walk the scalar elements (the prefix, then the tail) 4 at a time.
// Otherwise vectors = 0 and every item is scalar. Items are grouped into tiles of kTileItems;
// `first_tile` (the tiles of the ranges before) lets a block find its range by binary search.
constexpr int kItemsPerThread = 4;
constexpr int64_t kTileItems = int64_t{kThreads} * kItemsPerThread;
enum ComputeKind : int { kNoCompute = 0, kComputeBf16 = 1, kComputeF16 = 2 };

struct AdamWRangeWork {
  float* param;
  float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  void* compute_param;
  int64_t numel;
  int64_t head;
  int64_t vectors;
  int64_t items;
  int64_t first_tile;
  float weight_decay;
  int compute_kind;
  int zero_grad;
};

template <typename T>
struct alignas(4 * sizeof(T)) Vector4 {
  T values[4];
};

template <typename T>
__device__ __forceinline__ void store_compute4(void* base, int64_t e, const float4& p) {
  Vector4<T> out;
  out.values[0] = cuda_detail::from_float<T>(p.x);
  out.values[1] = cuda_detail::from_float<T>(p.y);
  out.values[2] = cuda_detail::from_float<T>(p.z);
  out.values[3] = cuda_detail::from_float<T>(p.w);
  *reinterpret_cast<Vector4<T>*>(static_cast<T*>(base) + e) = out;
}

__device__ __forceinline__ void store_compute(const AdamWRangeWork& r, int64_t e, float value) {
  if (r.compute_kind == kComputeBf16) {
    static_cast<cuda_detail::bf16*>(r.compute_param)[e] =
        cuda_detail::from_float<cuda_detail::bf16>(value);
  } else if (r.compute_kind == kComputeF16) {
    static_cast<__half*>(r.compute_param)[e] = cuda_detail::from_float<__half>(value);
  }
}

__device__ __forceinline__ void adamw_vector_item(const AdamWRangeWork& r, int64_t item,
                                                  const AdamWCoefficients& c) {
  const int64_t e = r.head + 4 * item;
  float4 p = *reinterpret_cast<const float4*>(r.param + e);
  float4 m = *reinterpret_cast<const float4*>(r.exp_avg + e);
  float4 v = *reinterpret_cast<const float4*>(r.exp_avg_sq + e);
  const float4 g = *reinterpret_cast<const float4*>(r.grad + e);
  adamw_element(p.x, g.x, m.x, v.x, c);
  adamw_element(p.y, g.y, m.y, v.y, c);
  adamw_element(p.z, g.z, m.z, v.z, c);
  adamw_element(p.w, g.w, m.w, v.w, c);
  *reinterpret_cast<float4*>(r.param + e) = p;
  *reinterpret_cast<float4*>(r.exp_avg + e) = m;
  *reinterpret_cast<float4*>(r.exp_avg_sq + e) = v;
  if (r.zero_grad) *reinterpret_cast<float4*>(r.grad + e) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  if (r.compute_kind == kComputeBf16) store_compute4<cuda_detail::bf16>(r.compute_param, e, p);
  if (r.compute_kind == kComputeF16) store_compute4<__half>(r.compute_param, e, p);
}

__device__ __forceinline__ void adamw_scalar_item(const AdamWRangeWork& r, int64_t item,
                                                  const AdamWCoefficients& c) {
  const int64_t vector_elements = 4 * r.vectors;
  const int64_t scalar_elements = r.numel - vector_elements;
  const int64_t first = 4 * (item - r.vectors);
  const int64_t end = first + 4 < scalar_elements ? first + 4 : scalar_elements;
  for (int64_t s = first; s < end; ++s) {
    const int64_t e = s < r.head ? s : s + vector_elements;
    adamw_element(r.param[e], r.grad[e], r.exp_avg[e], r.exp_avg_sq[e], c);
    if (r.zero_grad) r.grad[e] = 0.0f;
    store_compute(r, e, r.param[e]);
  }
}

__global__ void adamw_multi_kernel(const AdamWRangeWork* __restrict__ ranges, int count,
                                   int64_t tiles, float lr, AdamWCoefficients c) {
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    int lo = 0, hi = count - 1;  // the last range whose first tile is <= tile
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (ranges[mid].first_tile <= tile) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const AdamWRangeWork r = ranges[lo];
    AdamWCoefficients range_c = c;
    range_c.decay = adamw_decay(lr, r.weight_decay);
    const int64_t first_item = (tile - r.first_tile) * kTileItems + threadIdx.x;
    for (int k = 0; k < kItemsPerThread; ++k) {
      const int64_t item = first_item + int64_t{k} * kThreads;
      if (item >= r.items) break;
      if (item < r.vectors) {
        adamw_vector_item(r, item, range_c);
      } else {
        adamw_scalar_item(r, item, range_c);
      }
    }
  }
}

AdamWRangeWork range_work(const AdamWRange& range, int64_t first_tile) {
  AdamWRangeWork w;
  std::memset(&w, 0, sizeof(w));  // padding too: tables are compared byte for byte
  w.param = range.param;
  w.grad = range.grad;
  w.exp_avg = range.exp_avg;
  w.exp_avg_sq = range.exp_avg_sq;
  w.compute_param = range.compute_param;
  w.numel = range.numel;
  w.weight_decay = range.weight_decay;
  w.zero_grad = range.zero_grad ? 1 : 0;
  if (range.compute_param != nullptr) {
    if (range.compute_dtype == DType::kBF16) {
      w.compute_kind = kComputeBf16;
    } else if (range.compute_dtype == DType::kF16) {
      w.compute_kind = kComputeF16;
    } else {
      cuda_detail::unsupported_dtype(__FILE__, __LINE__, range.compute_dtype);
    }
  }
  const auto phase = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16; };
  const uintptr_t param_phase = phase(range.param);
  const bool same_phase = param_phase % 4 == 0 && phase(range.grad) == param_phase &&
                          phase(range.exp_avg) == param_phase &&
                          phase(range.exp_avg_sq) == param_phase;
  w.head = std::min<int64_t>(static_cast<int64_t>((16 - param_phase) % 16 / 4), range.numel);
  const bool compute_aligned =
      range.compute_param == nullptr ||
      (reinterpret_cast<uintptr_t>(range.compute_param) + 2 * w.head) % 8 == 0;
  w.vectors = same_phase && compute_aligned ? (range.numel - w.head) / 4 : 0;
  if (w.vectors == 0) w.head = 0;
  w.items = w.vectors + (range.numel - 4 * w.vectors + 3) / 4;
  w.first_tile = first_tile;
  return w;
}

__global__ void sum_squares_kernel(const float* x, int64_t n, float* out) {
  __shared__ float shared[32];
  float partial = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    partial += x[i] * x[i];
  }
  const float total = cuda_detail::block_sum(partial, shared);
  if (threadIdx.x == 0) atomicAdd(out, total);
}

// float4 loads, four in flight per thread per iteration; the tail (n % 4 elements after the
// vectors) goes to block 0. REQUIRES: x 16-byte aligned.
__global__ void sum_squares_vec_kernel(const float4* x, int64_t vectors, const float* tail,
                                       int tail_count, float* out) {
  __shared__ float shared[32];
  float partial = 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const auto add = [&](const float4& v) {
    partial += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
  };
  for (; i + 3 * stride < vectors; i += 4 * stride) {
    const float4 a = x[i], b = x[i + stride], c = x[i + 2 * stride], d = x[i + 3 * stride];
    add(a);
    add(b);
    add(c);
    add(d);
  }
  for (; i < vectors; i += stride) add(x[i]);
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < tail_count) {
    partial += tail[threadIdx.x] * tail[threadIdx.x];
  }
  const float total = cuda_detail::block_sum(partial, shared);
  if (threadIdx.x == 0) atomicAdd(out, total);
}

}  // namespace

void adamw(float* param, const float* grad, float* m, float* v, int64_t n,
           const AdamWCoefficients& coefficients, cudaStream_t stream) {
  if (n == 0) return;
  using cuda_detail::aligned16;
  if (n % 4 == 0 && aligned16(param) && aligned16(grad) && aligned16(m) && aligned16(v)) {
    const int64_t vectors = n / 4;
    adamw_vec_kernel<<<cuda_detail::grid_for(vectors, kThreads), kThreads, 0, stream>>>(
        reinterpret_cast<float4*>(param), reinterpret_cast<const float4*>(grad),
        reinterpret_cast<float4*>(m), reinterpret_cast<float4*>(v), vectors, coefficients);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  adamw_kernel<<<cuda_detail::grid_for(n, kThreads), kThreads, 0, stream>>>(param, grad, m, v, n,
                                                                            coefficients);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

AdamWMultiLauncher::~AdamWMultiLauncher() { release_tables(); }

void AdamWMultiLauncher::release_tables() {
  for (Table& t : tables_) {
    if (t.device != nullptr) cudaFree(t.device);  // synchronises the device first
    if (t.pinned != nullptr) cudaFreeHost(t.pinned);
  }
  tables_.clear();
  last_ = 0;
}

void AdamWMultiLauncher::launch(const AdamWRange* ranges, int count, float lr,
                                const AdamWCoefficients& coefficients, cudaStream_t stream,
                                bool short_blocks) {
  std::vector<unsigned char> table;
  int table_count = 0;
  int64_t tiles = 0;
  for (int i = 0; i < count; ++i) {
    if (ranges[i].numel == 0) continue;
    const AdamWRangeWork w = range_work(ranges[i], tiles);
    tiles += (w.items + kTileItems - 1) / kTileItems;
    const auto* bytes = reinterpret_cast<const unsigned char*>(&w);
    table.insert(table.end(), bytes, bytes + sizeof(w));
    ++table_count;
  }
  if (table_count == 0) return;
  const Table& t = table_for(std::move(table), table_count, tiles, stream);
  // Short blocks: one tile each (a few microseconds), so a block never holds an SM long when
  // another stream's kernel is waiting for it.
  const unsigned grid = short_blocks ? static_cast<unsigned>(std::min<int64_t>(t.tiles, 0x7fffffff))
                                     : cuda_detail::grid_for(t.tiles * kThreads, kThreads);
  adamw_multi_kernel<<<grid, kThreads, 0, stream>>>(static_cast<const AdamWRangeWork*>(t.device),
                                                    t.count, t.tiles, lr, coefficients);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

const AdamWMultiLauncher::Table& AdamWMultiLauncher::table_for(std::vector<unsigned char> bytes,
                                                               int count, int64_t tiles,
                                                               cudaStream_t stream) {
  // Launches come in the same order every step: try the one after the last first.
  for (size_t k = 0; k < tables_.size(); ++k) {
    const size_t i = (last_ + 1 + k) % tables_.size();
    if (tables_[i].bytes == bytes) {
      last_ = i;
      return tables_[i];
    }
  }
  if (tables_.size() >= kMaxTables) {
    // Launches queued earlier, on any stream, may still read the tables: wait for them once.
    SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
    release_tables();
  }
  Table t;
  t.bytes = std::move(bytes);
  t.count = count;
  t.tiles = tiles;
  SHARDTRAIN_CUDA_CHECK(cudaMalloc(&t.device, t.bytes.size()));
  SHARDTRAIN_CUDA_CHECK(cudaMallocHost(&t.pinned, t.bytes.size()));
  std::memcpy(t.pinned, t.bytes.data(), t.bytes.size());
  SHARDTRAIN_CUDA_CHECK(
      cudaMemcpyAsync(t.device, t.pinned, t.bytes.size(), cudaMemcpyHostToDevice, stream));
  tables_.push_back(std::move(t));
  last_ = tables_.size() - 1;
  return tables_.back();
}

void sum_squares(const float* x, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  if (cuda_detail::aligned16(x)) {
    // Few blocks, each adding one atomic: 8 per SM with four 16-byte loads per thread in flight.
    const int64_t vectors = n / 4;
    const int64_t blocks = std::clamp<int64_t>((vectors + kThreads - 1) / kThreads, 1, 132 * 8);
    sum_squares_vec_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
        reinterpret_cast<const float4*>(x), vectors, x + 4 * vectors, static_cast<int>(n % 4), out);
    SHARDTRAIN_CUDA_CHECK_LAUNCH();
    return;
  }
  // Few blocks: each adds one atomic; 4 per SM keeps the loads in flight.
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 132 * 4);
  sum_squares_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(x, n, out);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

void sum_squares_in_small_blocks(const float* x, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  if (!cuda_detail::aligned16(x)) {
    sum_squares(x, n, out, stream);
    return;
  }
  // A block reads kThreads x 16 float4 (64 KiB at 256 threads): a few microseconds of HBM time.
  const int64_t vectors = n / 4;
  constexpr int64_t kVectorsPerBlock = int64_t{kThreads} * 16;
  const int64_t blocks =
      std::clamp<int64_t>((vectors + kVectorsPerBlock - 1) / kVectorsPerBlock, 1, int64_t{1} << 30);
  sum_squares_vec_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      reinterpret_cast<const float4*>(x), vectors, x + 4 * vectors, static_cast<int>(n % 4), out);
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
