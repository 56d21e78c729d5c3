// CudaOps ops added for Gemma: RMSNorm scaled by 1 + weight (cuda_rmsnorm1p.cu), GeGLU with the
// tanh GELU (cuda_geglu.cu) and logit soft-capping (cuda_softcap.cu): shape and dtype checks,
// then the kernel launchers of cuda_kernels.h.
#include "core/error.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/op_checks.h"

namespace shardtrain {
namespace {

using op_checks::require_same_numel;
using op_checks::row_count;
using op_checks::row_width;

void require_float_on_gpu(const Tensor& t, const char* what) {
  SHARDTRAIN_CHECK(t.device() == Device::kCuda, "{} is a {} tensor, want cuda", what,
                   device_name(t.device()));
  SHARDTRAIN_CHECK(t.dtype() == DType::kF32 || t.dtype() == DType::kBF16,
                   "{} is {}, want bf16 or f32", what, dtype_name(t.dtype()));
}

void require_same_dtype(const Tensor& t, const Tensor& like, const char* what) {
  require_float_on_gpu(t, what);
  SHARDTRAIN_CHECK(t.dtype() == like.dtype(), "{} is {}, want {}", what, dtype_name(t.dtype()),
                   dtype_name(like.dtype()));
}

}  // namespace

void CudaOps::rmsnorm1p_forward(Tensor x_NC, Tensor weight_C, float eps, Tensor out_NC,
                                Tensor rstd_N) {
  op_checks::check_rmsnorm_forward(x_NC, weight_C, out_NC, rstd_N);
  require_float_on_gpu(x_NC, "rmsnorm1p x");
  require_float_on_gpu(weight_C, "rmsnorm1p weight");
  require_float_on_gpu(out_NC, "rmsnorm1p out");
  SHARDTRAIN_CHECK(rstd_N.dtype() == DType::kF32, "rmsnorm1p rstd must be f32");
  cuda_kernels::rmsnorm1p_forward(x_NC.dtype(), x_NC.data(), weight_C.dtype(), weight_C.data(), eps,
                                  row_count(x_NC), row_width(x_NC), out_NC.dtype(), out_NC.data(),
                                  rstd_N.f32(), stream_);
}

void CudaOps::rmsnorm1p_backward(Tensor dout_NC, Tensor x_NC, Tensor weight_C, Tensor rstd_N,
                                 Tensor dx_NC, Tensor dweight_C, bool accumulate_dx,
                                 bool accumulate_dweight) {
  const int64_t rows = row_count(x_NC);
  const int64_t channels = row_width(x_NC);
  op_checks::check_rmsnorm_backward(dout_NC, x_NC, weight_C, rstd_N, dx_NC, dweight_C);
  require_float_on_gpu(x_NC, "rmsnorm1p x");
  require_float_on_gpu(weight_C, "rmsnorm1p weight");
  require_float_on_gpu(dweight_C, "rmsnorm1p dweight");
  require_same_dtype(dout_NC, x_NC, "rmsnorm1p dout");
  require_same_dtype(dx_NC, x_NC, "rmsnorm1p dx");
  SHARDTRAIN_CHECK(rstd_N.dtype() == DType::kF32, "rmsnorm1p rstd must be f32");
  if (rows == 0) {  // no rows: nothing to add, and an overwritten dweight is zero
    if (!accumulate_dweight) fill_zero(dweight_C);
    return;
  }
  float* scratch = scratch_floats(cuda_kernels::rmsnorm1p_backward_scratch_floats(rows, channels));
  cuda_kernels::rmsnorm1p_backward(x_NC.dtype(), dout_NC.data(), x_NC.data(), weight_C.dtype(),
                                   weight_C.data(), rstd_N.f32(), rows, channels, dx_NC.data(),
                                   accumulate_dx, dweight_C.dtype(), dweight_C.data(),
                                   accumulate_dweight, scratch, stream_);
}

void CudaOps::geglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) {
  require_same_numel(gate_NF, up_NF, "geglu up");
  require_same_numel(gate_NF, out_NF, "geglu out");
  require_float_on_gpu(gate_NF, "geglu gate");
  require_same_dtype(up_NF, gate_NF, "geglu up");
  require_same_dtype(out_NF, gate_NF, "geglu out");
  cuda_kernels::geglu_forward(gate_NF.dtype(), gate_NF.data(), up_NF.data(), out_NF.data(),
                              gate_NF.numel(), stream_);
}

void CudaOps::geglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                             Tensor dup_NF) {
  require_same_numel(gate_NF, up_NF, "geglu up");
  require_same_numel(gate_NF, dout_NF, "geglu dout");
  require_same_numel(gate_NF, dgate_NF, "geglu dgate");
  require_same_numel(gate_NF, dup_NF, "geglu dup");
  require_float_on_gpu(gate_NF, "geglu gate");
  for (const Tensor* t : {&dout_NF, &up_NF, &dgate_NF, &dup_NF}) {
    require_same_dtype(*t, gate_NF, "geglu tensor");
  }
  cuda_kernels::geglu_backward(gate_NF.dtype(), dout_NF.data(), gate_NF.data(), up_NF.data(),
                               dgate_NF.data(), dup_NF.data(), gate_NF.numel(), stream_);
}

void CudaOps::softcap_forward(Tensor x, float cap, Tensor out) {
  require_same_numel(x, out, "softcap out");
  require_float_on_gpu(x, "softcap x");
  require_same_dtype(out, x, "softcap out");
  SHARDTRAIN_CHECK(cap > 0, "softcap cap {} must be positive", cap);
  cuda_kernels::softcap_forward(x.dtype(), x.data(), cap, out.data(), x.numel(), stream_);
}

void CudaOps::softcap_backward(Tensor dout, Tensor x, float cap, Tensor dx) {
  require_same_numel(x, dout, "softcap dout");
  require_same_numel(x, dx, "softcap dx");
  require_float_on_gpu(x, "softcap x");
  require_same_dtype(dout, x, "softcap dout");
  require_same_dtype(dx, x, "softcap dx");
  SHARDTRAIN_CHECK(cap > 0, "softcap cap {} must be positive", cap);
  cuda_kernels::softcap_backward(x.dtype(), dout.data(), x.data(), cap, dx.data(), x.numel(),
                                 stream_);
}

}  // namespace shardtrain
