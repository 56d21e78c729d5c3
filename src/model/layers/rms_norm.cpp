#include "model/layers/rms_norm.h"

#include "model/layers/layer_dims.h"

namespace shardtrain {

RmsNormSaved RmsNormSaved::declare(ActivationPlan& plan, ActivationUse use, int64_t rows,
                                   int64_t C) {
  RmsNormSaved s;
  s.out_RC = plan.take(use, {rows, C});
  s.rstd_R = plan.take(use, DType::kF32, {rows});
  return s;
}

RmsNormSaved RmsNormSaved::sized(int64_t rows, int64_t C) const {
  return RmsNormSaved{fit(out_RC, {rows, C}), fit(rstd_R, {rows})};
}

void RmsNorm::forward(Ops& ops, Tensor weight_C, Tensor x_RC, const RmsNormSaved& saved) const {
  if (one_plus_weight) {
    ops.rmsnorm1p_forward(x_RC, weight_C, eps, saved.out_RC, saved.rstd_R);
    return;
  }
  ops.rmsnorm_forward(x_RC, weight_C, eps, saved.out_RC, saved.rstd_R);
}

void RmsNorm::backward(Ops& ops, Tensor weight_C, Tensor dweight_C, bool accumulate_dweight,
                       Tensor dout_RC, Tensor x_RC, const RmsNormSaved& saved, Tensor dx_RC,
                       bool accumulate_dx) const {
  if (one_plus_weight) {
    ops.rmsnorm1p_backward(dout_RC, x_RC, weight_C, saved.rstd_R, dx_RC, dweight_C, accumulate_dx,
                           accumulate_dweight);
    return;
  }
  ops.rmsnorm_backward(dout_RC, x_RC, weight_C, saved.rstd_R, dx_RC, dweight_C, accumulate_dx,
                       accumulate_dweight);
}

}  // namespace shardtrain
