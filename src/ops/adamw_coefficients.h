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

#if defined(__CUDACC__)
#define SHARDTRAIN_HOST_DEVICE __host__ __device__
#else
#define SHARDTRAIN_HOST_DEVICE
#endif

// AdamWCoefficients::decay. The product of two floats is exact in double, so the result is the
// same on the host and on a device (with or without a fused multiply-add): kernels that take
// one weight decay per range form it themselves from lr and get adamw's value bit for bit.
SHARDTRAIN_HOST_DEVICE inline float adamw_decay(float lr, float weight_decay) {
  return static_cast<float>(1.0 - static_cast<double>(lr) * static_cast<double>(weight_decay));
}

}  // namespace shardtrain
