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

template <typename T>
__global__ void accumulate_partials_kernel(const float* partials_PC, int64_t parts, int64_t cols,
                                           T* out_C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= cols) return;
  float sum = 0;
  for (int64_t p = 0; p < parts; ++p) sum += partials_PC[p * cols + c];
  out_C[c] = from_float<T>(to_float(out_C[c]) + sum);
}

unsigned column_blocks(int64_t cols) {
  return static_cast<unsigned>((cols + kThreads - 1) / kThreads);
}

}  // namespace

size_t column_sums_scratch_floats(int64_t rows, int64_t cols) {
  return static_cast<size_t>(part_count(rows) * cols);
}

void column_sums_accumulate(DType in_dtype, const void* in_RC, int64_t rows, int64_t cols,
                            DType out_dtype, void* out_C, float* scratch, cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const int64_t parts = part_count(rows);
  const int64_t rows_per_part = (rows + parts - 1) / parts;
  const dim3 grid(column_blocks(cols), static_cast<unsigned>(parts));
  SHARDTRAIN_DISPATCH_FLOAT(in_dtype, T, {
    column_partials_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(in_RC), rows,
                                                             cols, rows_per_part, scratch);
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
  accumulate_partials(scratch, parts, cols, out_dtype, out_C, stream);
}

void accumulate_partials(const float* partials_PC, int64_t parts, int64_t cols, DType out_dtype,
                         void* out_C, cudaStream_t stream) {
  if (cols == 0) return;
  SHARDTRAIN_DISPATCH_FLOAT(out_dtype, T, {
    accumulate_partials_kernel<T><<<column_blocks(cols), kThreads, 0, stream>>>(
        partials_PC, parts, cols, static_cast<T*>(out_C));
  });
  SHARDTRAIN_CUDA_CHECK_LAUNCH();
}

}  // namespace shardtrain::cuda_kernels
