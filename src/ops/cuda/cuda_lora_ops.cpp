// CudaOps: the LoRA path's column-block copy and dropout (ops/ops.h), checked here and run by
// the kernels of cuda_lora.cu.
#include "core/error.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_checks.h"

namespace shardtrain {

void CudaOps::copy_columns(Tensor src_NX, int64_t src_col, Tensor dst_NY, int64_t dst_col,
                           int64_t width, float alpha, bool accumulate) {
  SHARDTRAIN_CHECK(src_NX.device() == Device::kCuda && dst_NY.device() == Device::kCuda,
                   "copy_columns: CUDA tensors");
  SHARDTRAIN_CHECK(src_NX.dtype() == dst_NY.dtype(), "copy_columns: dtypes {} and {}",
                   dtype_name(src_NX.dtype()), dtype_name(dst_NY.dtype()));
  const int64_t rows = op_checks::row_count(src_NX);
  const int64_t src_width = op_checks::row_width(src_NX), dst_width = op_checks::row_width(dst_NY);
  SHARDTRAIN_CHECK(rows == op_checks::row_count(dst_NY), "copy_columns: {} rows into {}", rows,
                   op_checks::row_count(dst_NY));
  SHARDTRAIN_CHECK(src_col >= 0 && dst_col >= 0 && width >= 0 && src_col + width <= src_width &&
                       dst_col + width <= dst_width,
                   "copy_columns: columns [{}, +{}) of {} into [{}, +{}) of {}", src_col, width,
                   src_width, dst_col, width, dst_width);
  cuda_kernels::copy_columns(src_NX.dtype(), src_NX.data(), src_width, src_col, dst_NY.data(),
                             dst_width, dst_col, rows, width, alpha, accumulate, stream_);
}

void CudaOps::dropout(Tensor x, Tensor out, float p, uint64_t seed, bool accumulate) {
  SHARDTRAIN_CHECK(x.device() == Device::kCuda && out.device() == Device::kCuda,
                   "dropout: CUDA tensors");
  SHARDTRAIN_CHECK(x.dtype() == out.dtype(), "dropout: dtypes {} and {}", dtype_name(x.dtype()),
                   dtype_name(out.dtype()));
  op_checks::require_same_numel(x, out, "dropout");
  SHARDTRAIN_CHECK(p >= 0.0f && p < 1.0f, "dropout probability {}", p);
  cuda_kernels::dropout(x.dtype(), x.data(), out.data(), x.numel(), p, seed, accumulate, stream_);
}

}  // namespace shardtrain
