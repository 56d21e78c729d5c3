// Shape checks shared by the op backends (ops/cpu, ops/cuda). Internal to ops/.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace shardtrain::op_checks {

// Elements per row (the last dimension) and row count (all leading dimensions) of `t`.
inline int64_t row_width(const Tensor& t) { return t.shape().rank() == 0 ? 1 : t.dim(-1); }
inline int64_t row_count(const Tensor& t) {
  const int64_t width = row_width(t);
  return width == 0 ? 0 : t.numel() / width;
}

// The FP8 all-gather's casts (Ops::fp8_range_*): `values` (x, or out when dequantising) f32 or
// bf16, amax_S f32, each range inside `values` with its scale inside amax_S, and bytes_u8 (when
// given) u8 and at least as long as `values`.
inline void check_fp8_ranges(const char* op, const Tensor& values,
                             const std::vector<Fp8Range>& ranges, const Tensor& amax_S,
                             const Tensor& bytes_u8 = Tensor()) {
  SHARDTRAIN_CHECK(values.dtype() == DType::kF32 || values.dtype() == DType::kBF16,
                   "{}: values are {}, want f32 or bf16", op, dtype_name(values.dtype()));
  SHARDTRAIN_CHECK(amax_S.dtype() == DType::kF32, "{}: amax is {}, want f32", op,
                   dtype_name(amax_S.dtype()));
  for (const Fp8Range& r : ranges) {
    SHARDTRAIN_CHECK(0 <= r.begin && r.begin <= r.end && r.end <= values.numel(),
                     "{}: range [{}, {}) of {} elements", op, r.begin, r.end, values.numel());
    SHARDTRAIN_CHECK(0 <= r.scale && r.scale < amax_S.numel(), "{}: scale {} of {}", op, r.scale,
                     amax_S.numel());
  }
  if (bytes_u8.defined()) {
    SHARDTRAIN_CHECK(bytes_u8.dtype() == DType::kU8 && bytes_u8.numel() >= values.numel(),
                     "{}: bytes are {} x {} for {} elements", op, dtype_name(bytes_u8.dtype()),
                     bytes_u8.numel(), values.numel());
  }
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

// Packed q/k/v (Ops::split_qkv_rope): q (N, H, D), k and v (N, K, D), qkv (N, (H + 2K) * D),
// one position per token, D even. Returns the sizes.
struct PackedQkv {
  int64_t tokens, q_heads, kv_heads, head_dim;
  int64_t q_width() const { return q_heads * head_dim; }
  int64_t kv_width() const { return kv_heads * head_dim; }
  int64_t row() const { return q_width() + 2 * kv_width(); }
};
inline PackedQkv check_packed_qkv(const Tensor& qkv, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& positions) {
  const int64_t tokens = positions.numel();
  SHARDTRAIN_CHECK(tokens > 0 && q.shape().rank() == 3 && k.shape().rank() == 3 &&
                       q.dim(0) == tokens && k.dim(0) == tokens && k.shape() == v.shape() &&
                       q.dim(2) == k.dim(2) && q.dim(2) % 2 == 0,
                   "packed qkv: q {}, k {}, v {} for {} positions", q.shape().to_string(),
                   k.shape().to_string(), v.shape().to_string(), tokens);
  const PackedQkv p{tokens, q.dim(1), k.dim(1), q.dim(2)};
  SHARDTRAIN_CHECK(qkv.numel() == tokens * p.row(), "packed qkv {} for q {}, k {}, v {}",
                   qkv.shape().to_string(), q.shape().to_string(), k.shape().to_string(),
                   v.shape().to_string());
  return p;
}

// Per-head q/k norms (Ops::split_qkv_norm_rope): q_raw and q (N, H, D), k_raw and k (N, K, D)
// as check_packed_qkv wants them, each norm weight (D).
inline void check_qk_norm(const PackedQkv& p, const Tensor& q_raw, const Tensor& k_raw,
                          const Tensor& q, const Tensor& k, const QkNorm& norm) {
  SHARDTRAIN_CHECK(q_raw.shape() == q.shape() && k_raw.shape() == k.shape() &&
                       q.numel() == p.tokens * p.q_width() && k.numel() == p.tokens * p.kv_width() &&
                       norm.q_weight_D.numel() == p.head_dim &&
                       norm.k_weight_D.numel() == p.head_dim,
                   "q/k norm: q_raw {}, q {}, k_raw {}, k {}, weights {} and {} for head dim {}",
                   q_raw.shape().to_string(), q.shape().to_string(), k_raw.shape().to_string(),
                   k.shape().to_string(), norm.q_weight_D.shape().to_string(),
                   norm.k_weight_D.shape().to_string(), p.head_dim);
}

// The q/k norms' weight gradients of pack_qkv_norm_rope_backward: one head dim each.
inline void check_qk_norm_dweights(const PackedQkv& p, const Tensor& dq_weight,
                                   const Tensor& dk_weight) {
  SHARDTRAIN_CHECK(dq_weight.numel() == p.head_dim && dk_weight.numel() == p.head_dim,
                   "q/k norm dweights {} and {} for head dim {}", dq_weight.shape().to_string(),
                   dk_weight.shape().to_string(), p.head_dim);
}

}  // namespace shardtrain::op_checks
