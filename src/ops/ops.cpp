#include "ops/ops.h"

#include <cmath>

#include "core/error.h"

namespace shardtrain {

AdamWCoefficients adamw_coefficients(const AdamWStep& step) {
  SHARDTRAIN_CHECK(step.step >= 1, "adamw step {} must be >= 1", step.step);
  const double beta1 = step.beta1;
  const double beta2 = step.beta2;
  const double step_count = static_cast<double>(step.step);
  AdamWCoefficients c;
  c.decay = adamw_decay(step.lr, step.weight_decay);
  c.m_weight = static_cast<float>(1.0 - beta1);
  c.v_decay = static_cast<float>(beta2);
  c.v_weight = static_cast<float>(1.0 - beta2);
  c.step_size = static_cast<float>(step.lr / (1.0 - std::pow(beta1, step_count)));
  c.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, step_count)));
  c.eps = step.eps;
  c.grad_scale = step.grad_scale;
  return c;
}

std::string Ops::fp8_unsupported_reason() const {
  return "this backend has no FP8 matmuls (they run on CUDA GPUs of compute capability 8.9+)";
}

void Ops::linear_forward_fp8(Tensor, Tensor, Tensor, Tensor, Tensor, Fp8Site) {
  throw Error(fp8_unsupported_reason());
}

void Ops::linear_backward_fp8(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, bool, bool, Fp8Site) {
  throw Error(fp8_unsupported_reason());
}

void Ops::lora_linear_forward(Tensor x_NI, Tensor weight_OI, float alpha, Tensor bias_O,
                              Tensor residual_NO, Tensor out_NO) {
  SHARDTRAIN_CHECK(!(bias_O.defined() && residual_NO.defined()),
                   "lora_linear_forward: a bias or a residual, not both");
  SHARDTRAIN_CHECK(alpha == 1.0f || (!bias_O.defined() && !residual_NO.defined()),
                   "lora_linear_forward: alpha {} with a bias or a residual", alpha);
  if (residual_NO.defined()) {
    linear_forward_residual(x_NI, weight_OI, residual_NO, out_NO);
  } else {
    linear_forward(x_NI, weight_OI, bias_O, out_NO);
  }
  if (alpha != 1.0f) copy_columns(out_NO, 0, out_NO, 0, out_NO.dim(-1), alpha, false);
}

void Ops::lora_linear_backward(Tensor dout_NO, Tensor x_NI, Tensor weight_OI, float alpha,
                               Tensor dx_NI, Tensor dweight_OI, bool accumulate_dx,
                               bool accumulate_dweight) {
  SHARDTRAIN_CHECK(alpha == 1.0f || !dx_NI.defined() || !accumulate_dx,
                   "lora_linear_backward: alpha {} with an accumulated dx", alpha);
  // An undefined dweight skips the weight gradient (linear_backward's frozen weight).
  linear_backward(dout_NO, x_NI, weight_OI, dx_NI, dweight_OI, Tensor(), accumulate_dx,
                  accumulate_dweight);
  if (alpha != 1.0f && dx_NI.defined()) {
    copy_columns(dx_NI, 0, dx_NI, 0, dx_NI.dim(-1), alpha, false);
  }
}

void Ops::swiglu_linears_backward_fp8(Tensor dact_NF, Tensor gate_NF, Tensor up_NF, Tensor x_NC,
                                      Tensor gate_weight_FC, Tensor up_weight_FC, Tensor dgate_NF,
                                      Tensor dup_NF, Tensor dx_NC, Tensor dgate_weight_FC,
                                      Tensor dup_weight_FC, bool accumulate_dweight,
                                      Fp8Site gate_site, Fp8Site up_site) {
  swiglu_backward(dact_NF, gate_NF, up_NF, dgate_NF, dup_NF);
  linear_backward_fp8(dgate_NF, x_NC, gate_weight_FC, dx_NC, dgate_weight_FC, Tensor(), false,
                      accumulate_dweight, gate_site);
  linear_backward_fp8(dup_NF, x_NC, up_weight_FC, dx_NC, dup_weight_FC, Tensor(), true,
                      accumulate_dweight, up_site);
}

void Ops::swiglu_linear_forward_fp8(Tensor gate_NF, Tensor up_NF, Tensor act_NF,
                                    Tensor weight_CF, Tensor residual_NC, Tensor out_NC,
                                    Fp8Site site) {
  swiglu_forward(gate_NF, up_NF, act_NF);
  linear_forward_fp8(act_NF, weight_CF, Tensor(), residual_NC, out_NC, site);
}

}  // namespace shardtrain
