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

}  // namespace shardtrain
