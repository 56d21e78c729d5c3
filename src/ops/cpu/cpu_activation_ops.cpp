// CpuOps GeGLU (tanh GELU) and logit soft-capping, forward and backward side by side, in fp32
// with PyTorch's formulas (gelu(approximate="tanh") and its backward), so the golden tests
// against transformers' Gemma hold.
#include <cmath>

#include "ops/cpu/cpu_ops.h"
#include "ops/op_checks.h"

namespace shardtrain {
namespace {

using op_checks::require_same_numel;

constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;

float gelu_tanh(float g) {
  const float inner = kGeluBeta * (g + kGeluKappa * g * g * g);
  return 0.5f * g * (1.0f + std::tanh(inner));
}

float gelu_tanh_derivative(float g) {
  const float tanh_inner = std::tanh(kGeluBeta * (g + kGeluKappa * g * g * g));
  const float left = 0.5f * g;
  const float right = 1.0f + tanh_inner;
  const float right_derivative =
      left * (1.0f - tanh_inner * tanh_inner) * kGeluBeta * (1.0f + 3.0f * kGeluKappa * g * g);
  return 0.5f * right + right_derivative;
}

}  // namespace

void CpuOps::geglu_forward(Tensor gate_NF, Tensor up_NF, Tensor out_NF) {
  require_same_numel(gate_NF, up_NF, "geglu up");
  require_same_numel(gate_NF, out_NF, "geglu out");
  const float* gate = gate_NF.f32();
  const float* up = up_NF.f32();
  float* out = out_NF.f32();
  const int64_t n = gate_NF.numel();
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

void CpuOps::geglu_backward(Tensor dout_NF, Tensor gate_NF, Tensor up_NF, Tensor dgate_NF,
                            Tensor dup_NF) {
  require_same_numel(gate_NF, up_NF, "geglu up");
  require_same_numel(gate_NF, dout_NF, "geglu dout");
  require_same_numel(gate_NF, dgate_NF, "geglu dgate");
  require_same_numel(gate_NF, dup_NF, "geglu dup");
  const float* dout = dout_NF.f32();
  const float* gate = gate_NF.f32();
  const float* up = up_NF.f32();
  float* dgate = dgate_NF.f32();
  float* dup = dup_NF.f32();
  const int64_t n = gate_NF.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];  // all inputs read before writing: outputs may alias them
    const float u = up[i];
    const float dy = dout[i];
    dgate[i] = dy * u * gelu_tanh_derivative(g);
    dup[i] = dy * gelu_tanh(g);
  }
}

void CpuOps::softcap_forward(Tensor x, float cap, Tensor out) {
  require_same_numel(x, out, "softcap out");
  SHARDTRAIN_CHECK(cap > 0, "softcap cap {} must be positive", cap);
  const float* in = x.f32();
  float* result = out.f32();
  for (int64_t i = 0; i < x.numel(); ++i) result[i] = cap * std::tanh(in[i] / cap);
}

void CpuOps::softcap_backward(Tensor dout, Tensor x, float cap, Tensor dx) {
  require_same_numel(x, dout, "softcap dout");
  require_same_numel(x, dx, "softcap dx");
  SHARDTRAIN_CHECK(cap > 0, "softcap cap {} must be positive", cap);
  const float* dy = dout.f32();
  const float* in = x.f32();
  float* result = dx.f32();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float t = std::tanh(in[i] / cap);
    result[i] = dy[i] * (1.0f - t * t);
  }
}

}  // namespace shardtrain
