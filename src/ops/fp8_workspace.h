// Device memory the FP8 linears hold besides activations (Ops::linear_*_fp8 on CUDA): the FP8
// copies of one linear's operands (or of the fused SwiGLU backward's two), sized for the largest
// run so far, and the FP8 GEMM's cuBLASLt workspace. One formula for the CUDA backend
// (ops/cuda/cuda_linear_fp8.cpp sizes its buffer with it) and `shardtrain plan`
// (model/fp8_memory.h).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace shardtrain {

constexpr size_t kFp8GemmWorkspaceBytes = size_t{32} << 20;
constexpr size_t kFp8CopyAlignment = 256;

constexpr size_t fp8_copy_bytes(int64_t elements) {
  return (static_cast<size_t>(elements) + kFp8CopyAlignment - 1) / kFp8CopyAlignment *
         kFp8CopyAlignment;
}
// Forward: x (N x I) and W (O x I). Backward: dout and dout^T (N x O each), W^T, x^T.
constexpr size_t fp8_linear_forward_bytes(int64_t rows, int64_t in, int64_t out) {
  return fp8_copy_bytes(rows * in) + fp8_copy_bytes(out * in);
}
constexpr size_t fp8_linear_backward_bytes(int64_t rows, int64_t in, int64_t out) {
  return 2 * fp8_copy_bytes(rows * out) + fp8_copy_bytes(out * in) + fp8_copy_bytes(rows * in);
}
constexpr size_t fp8_linear_copies_bytes(int64_t rows, int64_t in, int64_t out) {
  return std::max(fp8_linear_forward_bytes(rows, in, out), fp8_linear_backward_bytes(rows, in, out));
}
// The MLP's fused SwiGLU backward (Ops::swiglu_linears_backward_fp8): dgate and dup in both
// layouts (rows x intermediate each), one W^T (intermediate x hidden) and x^T (hidden x rows).
constexpr size_t fp8_swiglu_backward_bytes(int64_t rows, int64_t hidden, int64_t intermediate) {
  return 4 * fp8_copy_bytes(rows * intermediate) + fp8_copy_bytes(intermediate * hidden) +
         fp8_copy_bytes(rows * hidden);
}

}  // namespace shardtrain
