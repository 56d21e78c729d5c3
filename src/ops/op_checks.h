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

}  // namespace shardtrain::op_checks
