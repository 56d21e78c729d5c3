// Shape checks shared by the op backends (ops/cpu, ops/cuda). Internal to ops/.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace shardtrain::op_checks {

// Elements per row (the last dimension) and row count (all leading dimensions) of `t`.
inline int64_t row_width(const Tensor& t) { return t.shape().rank() == 0 ? 1 : t.dim(-1); }
inline int64_t row_count(const Tensor& t) {
  const int64_t width = row_width(t);
  return width == 0 ? 0 : t.numel() / width;
}

inline void require_same_numel(const Tensor& a, const Tensor& b, const char* what) {
  SHARDTRAIN_CHECK(a.numel() == b.numel(), "{}: {} vs {} elements ({} vs {})", what, a.numel(),
                   b.numel(), a.shape().to_string(), b.shape().to_string());
}

// RMSNorm shapes: x (rows, C), weight (C), rstd (rows), out/dout/dx like x, dweight like weight.
inline void check_rmsnorm_forward(const Tensor& x, const Tensor& weight, const Tensor& out,
                                  const Tensor& rstd) {
  SHARDTRAIN_CHECK(weight.numel() == row_width(x) && rstd.numel() == row_count(x),
                   "rmsnorm: x {}, weight {}, rstd {}", x.shape().to_string(),
                   weight.shape().to_string(), rstd.shape().to_string());
  require_same_numel(x, out, "rmsnorm out");
}
inline void check_rmsnorm_backward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                   const Tensor& rstd, const Tensor& dx, const Tensor& dweight) {
  SHARDTRAIN_CHECK(weight.numel() == row_width(x) && dweight.numel() == row_width(x) &&
                       rstd.numel() == row_count(x),
                   "rmsnorm backward: x {}, weight {}, dweight {}, rstd {}",
                   x.shape().to_string(), weight.shape().to_string(),
                   dweight.shape().to_string(), rstd.shape().to_string());
  require_same_numel(x, dout, "rmsnorm dout");
  require_same_numel(x, dx, "rmsnorm dx");
}

}  // namespace shardtrain::op_checks
