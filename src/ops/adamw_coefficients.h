// The per-step scalars of an AdamW update, formed once on the host (in double, as PyTorch's
// Python code forms them) and used by every backend's element loop:
//   g = grad * grad_scale;  param *= decay;  m += m_weight * (g - m);
//   v = v_decay * v + v_weight * g * g;  param -= step_size * m / (sqrt(v) / bias_correction2_sqrt + eps)
// Plain data with no dependencies, so CUDA kernel files (C++17, no fmt) can include it.
#pragma once

namespace shardtrain {

struct AdamWCoefficients {
  float decay;                  // 1 - lr * weight_decay
  float m_weight;               // 1 - beta1
  float v_decay;                // beta2
  float v_weight;               // 1 - beta2
  float step_size;              // lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float eps;
  float grad_scale;
};

}  // namespace shardtrain
