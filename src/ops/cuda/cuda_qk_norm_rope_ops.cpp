// CudaOps' per-head q/k norms fused with the packed split and rope (ops/ops.h
// split_qkv_norm_rope, qk_norm_rope, pack_qkv_norm_rope_backward): shape and dtype checks, then
// the launchers of cuda_qk_norm_rope.cu (cuda_kernels.h QkNormRope).
#include <initializer_list>

#include "core/error.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_checks.h"

namespace shardtrain {
namespace {

using op_checks::PackedQkv;
using op_checks::row_width;

void require_on_gpu(const Tensor& t, DType dtype, const char* what) {
  SHARDTRAIN_CHECK(t.device() == Device::kCuda, "{} is a {} tensor, want cuda", what,
                   device_name(t.device()));
  SHARDTRAIN_CHECK(t.dtype() == dtype, "{} is {}, want {}", what, dtype_name(t.dtype()),
                   dtype_name(dtype));
}

void require_float_on_gpu(const Tensor& t, const char* what) {
  SHARDTRAIN_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16,
                   "{} is {}, want bf16 or f32", what, dtype_name(t.dtype()));
  require_on_gpu(t, t.dtype(), what);
}

// Checks everything but the packed tensor and returns the launchers' description. `heads_like`:
// the (N, H, D) and (N, K, D) tensors of the call, all of the activation dtype of q_NHD.
cuda_kernels::QkNormRope describe(const PackedQkv& p, const QkNorm& norm, const Tensor& positions_N,
                                  const Tensor& cos_PR, const Tensor& sin_PR,
                                  std::initializer_list<const Tensor*> heads_like) {
  SHARDTRAIN_CHECK(row_width(cos_PR) == p.head_dim / 2 && cos_PR.shape() == sin_PR.shape(),
                   "rope tables cos {} sin {} for head dim {}", cos_PR.shape().to_string(),
                   sin_PR.shape().to_string(), p.head_dim);
  require_on_gpu(positions_N, DType::kI32, "rope positions");
  require_on_gpu(cos_PR, DType::kF32, "rope cos");
  require_on_gpu(sin_PR, DType::kF32, "rope sin");
  const DType act = (*heads_like.begin())->dtype();
  for (const Tensor* t : heads_like) require_float_on_gpu(*t, "q/k norm activation");
  for (const Tensor* t : heads_like) require_on_gpu(*t, act, "q/k norm activation");
  require_float_on_gpu(norm.q_weight_D, "q norm weight");
  require_on_gpu(norm.k_weight_D, norm.q_weight_D.dtype(), "k norm weight");
  cuda_kernels::QkNormRope s;
  s.tokens = p.tokens;
  s.q_heads = p.q_heads;
  s.kv_heads = p.kv_heads;
  s.head_dim = p.head_dim;
  s.positions_N = positions_N.i32();
  s.cos_PR = cos_PR.f32();
  s.sin_PR = sin_PR.f32();
  s.weight_dtype = norm.q_weight_D.dtype();
  s.q_weight_D = norm.q_weight_D.data();
  s.k_weight_D = norm.k_weight_D.data();
  s.eps = norm.eps;
  s.one_plus_weight = norm.one_plus_weight;
  return s;
}

}  // namespace

void CudaOps::split_qkv_norm_rope(Tensor qkv_NX, const QkNorm& norm, Tensor positions_N,
                                  Tensor cos_PR, Tensor sin_PR, Tensor q_raw_NHD, Tensor k_raw_NKD,
                                  Tensor v_NKD, Tensor q_NHD, Tensor k_NKD) {
  const PackedQkv p = op_checks::check_packed_qkv(qkv_NX, q_NHD, k_NKD, v_NKD, positions_N);
  op_checks::check_qk_norm(p, q_raw_NHD, k_raw_NKD, q_NHD, k_NKD, norm);
  const cuda_kernels::QkNormRope s =
      describe(p, norm, positions_N, cos_PR, sin_PR,
               {&q_NHD, &k_NKD, &v_NKD, &q_raw_NHD, &k_raw_NKD, &qkv_NX});
  cuda_kernels::split_qkv_norm_rope(qkv_NX.dtype(), s, qkv_NX.data(), q_raw_NHD.data(),
                                    k_raw_NKD.data(), v_NKD.data(), q_NHD.data(), k_NKD.data(),
                                    stream_);
}

void CudaOps::qk_norm_rope(Tensor q_raw_NHD, Tensor k_raw_NKD, const QkNorm& norm,
                           Tensor positions_N, Tensor cos_PR, Tensor sin_PR, Tensor q_NHD,
                           Tensor k_NKD) {
  SHARDTRAIN_CHECK(q_NHD.shape().rank() == 3 && k_NKD.shape().rank() == 3 &&
                       q_NHD.dim(0) == positions_N.numel() && q_NHD.dim(0) > 0 &&
                       k_NKD.dim(0) == q_NHD.dim(0) && q_NHD.dim(2) == k_NKD.dim(2) &&
                       q_NHD.dim(2) % 2 == 0,
                   "q/k norm: q {}, k {} for {} positions", q_NHD.shape().to_string(),
                   k_NKD.shape().to_string(), positions_N.numel());
  const PackedQkv p{q_NHD.dim(0), q_NHD.dim(1), k_NKD.dim(1), q_NHD.dim(2)};
  op_checks::check_qk_norm(p, q_raw_NHD, k_raw_NKD, q_NHD, k_NKD, norm);
  const cuda_kernels::QkNormRope s =
      describe(p, norm, positions_N, cos_PR, sin_PR, {&q_NHD, &k_NKD, &q_raw_NHD, &k_raw_NKD});
  cuda_kernels::qk_norm_rope(q_NHD.dtype(), s, q_raw_NHD.data(), k_raw_NKD.data(), q_NHD.data(),
                             k_NKD.data(), stream_);
}

void CudaOps::pack_qkv_norm_rope_backward(Tensor dq_NHD, Tensor dk_NKD, Tensor dv_NKD,
                                          Tensor q_raw_NHD, Tensor k_raw_NKD, const QkNorm& norm,
                                          Tensor positions_N, Tensor cos_PR, Tensor sin_PR,
                                          Tensor dq_weight_D, Tensor dk_weight_D,
                                          bool accumulate_dweight, Tensor dqkv_NX) {
  const PackedQkv p = op_checks::check_packed_qkv(dqkv_NX, dq_NHD, dk_NKD, dv_NKD, positions_N);
  op_checks::check_qk_norm(p, q_raw_NHD, k_raw_NKD, dq_NHD, dk_NKD, norm);
  op_checks::check_qk_norm_dweights(p, dq_weight_D, dk_weight_D);
  require_float_on_gpu(dq_weight_D, "q norm dweight");
  require_on_gpu(dk_weight_D, dq_weight_D.dtype(), "k norm dweight");
  const cuda_kernels::QkNormRope s =
      describe(p, norm, positions_N, cos_PR, sin_PR,
               {&dq_NHD, &dk_NKD, &dv_NKD, &q_raw_NHD, &k_raw_NKD, &dqkv_NX});
  float* scratch = scratch_floats(cuda_kernels::qk_norm_rope_backward_scratch_floats(s));
  cuda_kernels::pack_qkv_norm_rope_backward(
      dqkv_NX.dtype(), s, dq_NHD.data(), dk_NKD.data(), dv_NKD.data(), q_raw_NHD.data(),
      k_raw_NKD.data(), dq_weight_D.dtype(), dq_weight_D.data(), dk_weight_D.data(),
      accumulate_dweight, dqkv_NX.data(), scratch, stream_);
}

}  // namespace shardtrain
