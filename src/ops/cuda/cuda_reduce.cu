// Deterministic column reductions: the bias gradient of a linear layer (sum of dout over
// tokens) and the second stage of RMSNorm's weight gradient. Stage one writes fp32 partial sums
// of row slices; stage two adds the partials in a fixed order into the (f32 or bf16) output.
#include <algorithm>

#include "ops/cuda/cuda_device_utils.cuh"
#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels {
namespace {

using cuda_detail::from_float;
using cuda_detail::to_float;

constexpr int kThreads = 256;
constexpr int64_t kRowsPerPart = 64;
constexpr int64_t kMaxParts = 256;

int64_t part_count(int64_t rows) {
  return std::clamp<int64_t>((rows + kRowsPerPart - 1) / kRowsPerPart, 1, kMaxParts);
}

// partials_PC[p][c] = sum of in_RC[r][c] over the rows of part p.
template <typename T>
__global__ void column_partials_kernel(const T* in_RC, int64_t rows, int64_t cols,
                                       int64_t rows_per_part, float* partials_PC) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= cols) return;
  const int64_t begin = blockIdx.y * rows_per_part;
  const int64_t end = min(rows, begin + rows_per_part);
  float sum = 0;
  for (int64_t r = begin; r < end; ++r) sum += to_float(in_RC[r * cols + c]);
  partials_PC[blockIdx.y * cols + c] = sum;
}

// out_C[c] (+)= sum over p of partials_PC[p][c] (+= when accumulate). A block covers 32 columns;
// its 16 thread rows sum interleaved parts (p = row, row + 16, ...), then row 0 adds the 16 sums in
// order: the result does not depend on scheduling, and every load has many independent loads in
// flight (a serial loop over hundreds of parts per column was latency-bound).
constexpr int kPartialColumns = 32, kPartialRows = 16;

template <typename T>
__global__ void accumulate_partials_kernel(const float* partials_PC, int64_t parts, int64_t cols,
                                           bool accumulate, T* out_C) {
  __shared__ float sums[kPartialRows][kPartialColumns + 1];
  const int64_t c = blockIdx.x * int64_t{kPartialColumns} + threadIdx.x;
  float sum = 0;
  if (c < cols) {
    for (int64_t p = threadIdx.y; p < parts; p += kPartialRows) sum += partials_PC[p * cols + c];
  }
  sums[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= cols) return;
  float total = 0;
  for (int r = 0; r < kPartialRows; ++r) total += sums[r][threadIdx.x];
  out_C[c] = from_float<T>(accumulate ? to_float(out_C[c]) + total : total);
}

unsigned column_blocks(int64_t cols) {
  return static_cast<unsigned>((cols + kThreads - 1) / kThreads);
}

}  // namespace

size_t column_sums_scratch_floats(int64_t rows, int64_t cols) {
  return static_cast<size_t>(part_count(rows) * cols);
}

void column_sums(DType in_dtype, const void* in_RC, int64_t rows, int64_t cols, DType out_dtype,
                 void* out_C, bool accumulate, float* scratch, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const int64_t parts = part_count(rows);
  const int64_t rows_per_part = (rows + parts - 1) / parts;
  const dim3 grid(column_blocks(cols), static_cast<unsigned>(parts));
  SHARDTRAIN_DISPATCH_FLOAT(in_dtype, T, {
    column_partials_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(in_RC), rows,
                                                             cols, rows_per_part, scratch);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
  accumulate_partials(scratch, parts, cols, out_dtype, out_C, accumulate, stream);
}

void accumulate_partials(const float* partials_PC, int64_t parts, int64_t cols, DType out_dtype,
                         void* out_C, bool accumulate, cudaStream_t stream) {
  if (cols == 0) return;
  const unsigned blocks = static_cast<unsigned>((cols + kPartialColumns - 1) / kPartialColumns);
  const dim3 threads(kPartialColumns, kPartialRows);
  SHARDTRAIN_DISPATCH_FLOAT(out_dtype, T, {
    accumulate_partials_kernel<T><<<blocks, threads, 0, stream>>>(
        partials_PC, parts, cols, accumulate, static_cast<T*>(out_C));
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
