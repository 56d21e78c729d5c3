// CpuOps memory, elementwise, optimizer and norm ops; the layer ops live in the sibling files
// named in cpu_ops.h.
#include "ops/cpu/cpu_ops.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/host_buffer.h"
#include "ops/op_checks.h"

namespace shardtrain {

using op_checks::require_same_numel;

void* CpuOps::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;
  constexpr size_t kAlignment = HostBuffer::kAlignment;
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* pointer = std::aligned_alloc(kAlignment, rounded);
  if (pointer == nullptr) throw std::bad_alloc();
  std::memset(pointer, 0, rounded);
  return pointer;
}

void CpuOps::release(void* pointer) { std::free(pointer); }

void CpuOps::copy_from_host(Tensor dst, const void* src) {
  if (dst.bytes() != 0) std::memcpy(dst.data(), src, dst.bytes());
}

void CpuOps::copy_to_host(void* dst, Tensor src) {
  if (src.bytes() != 0) std::memcpy(dst, src.data(), src.bytes());
}

void CpuOps::fill_zero(Tensor dst) {
  if (dst.bytes() != 0) std::memset(dst.data(), 0, dst.bytes());
}

void CpuOps::cast(Tensor dst, Tensor src) {
  require_same_numel(dst, src, "cast");
  const size_t count = static_cast<size_t>(src.numel());
  if (dst.dtype() == src.dtype()) {
    copy_from_host(dst, src.data());
  } else if (dst.dtype() == DType::kF32) {
    SHARDTRAIN_CHECK(src.dtype() != DType::kI32, "cast from i32 is not supported");
    convert_to_f32(src.data(), src.dtype(), dst.f32(), count);
  } else if (src.dtype() == DType::kF32) {
    SHARDTRAIN_CHECK(dst.dtype() != DType::kI32, "cast to i32 is not supported");
    convert_from_f32(src.f32(), dst.dtype(), dst.data(), count);
  } else {
    SHARDTRAIN_CHECK(false, "cast {} -> {}: one side must be f32", dtype_name(src.dtype()),
                     dtype_name(dst.dtype()));
  }
}

void CpuOps::add(Tensor out, Tensor a, Tensor b) {
  require_same_numel(out, a, "add");
  require_same_numel(out, b, "add");
  float* out_data = out.f32();
  const float* a_data = a.f32();
  const float* b_data = b.f32();
  const int64_t n = out.numel();
  for (int64_t i = 0; i < n; ++i) out_data[i] = a_data[i] + b_data[i];
}

void CpuOps::scale(Tensor x, float factor) {
  float* data = x.f32();
  const int64_t n = x.numel();
  for (int64_t i = 0; i < n; ++i) data[i] *= factor;
}

// torch.optim.AdamW, single-tensor (non-fused) path:
//   param *= 1 - lr*wd; m.lerp_(g, 1-b1); v = b2*v + (1-b2)*g*g;
//   denom = sqrt(v) / sqrt(bc2) + eps; param -= (lr / bc1) * m / denom.
// Scalar coefficients are formed in double as Python does, element math is fp32 as in PyTorch.
void CpuOps::adamw(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& step) {
  require_same_numel(param, grad, "adamw grad");
  require_same_numel(param, m, "adamw m");
  require_same_numel(param, v, "adamw v");
  const AdamWCoefficients c = adamw_coefficients(step);

  float* param_data = param.f32();
  const float* grad_data = grad.f32();
  float* m_data = m.f32();
  float* v_data = v.f32();
  const int64_t n = param.numel();
  for (int64_t i = 0; i < n; ++i) {
    const float g = grad_data[i] * c.grad_scale;
    const float p = param_data[i] * c.decay;
    const float m_new = m_data[i] + c.m_weight * (g - m_data[i]);
    const float v_new = c.v_decay * v_data[i] + c.v_weight * g * g;
    const float denom = std::sqrt(v_new) / c.bias_correction2_sqrt + c.eps;
    m_data[i] = m_new;
    v_data[i] = v_new;
    param_data[i] = p - c.step_size * (m_new / denom);
  }
}

void CpuOps::adamw_multi(const std::vector<AdamWSegment>& segments, const AdamWStep& step) {
  AdamWStep segment_step = step;
  for (const AdamWSegment& segment : segments) {
    segment_step.weight_decay = segment.weight_decay;
    adamw(segment.param, segment.grad, segment.exp_avg, segment.exp_avg_sq, segment_step);
    if (segment.compute_param.defined()) cast(segment.compute_param, segment.param);
    if (segment.zero_grad) fill_zero(segment.grad);
  }
}

void CpuOps::sum_squares(Tensor x, Tensor out_1) {
  const float* data = x.f32();
  const int64_t n = x.numel();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += static_cast<double>(data[i]) * data[i];
  out_1.f32()[0] += static_cast<float>(total);
}

float CpuOps::read_scalar(Tensor x_1) {
  SHARDTRAIN_CHECK(x_1.numel() >= 1, "read_scalar of an empty tensor");
  return x_1.f32()[0];
}

std::unique_ptr<Ops> make_cpu_ops() { return std::make_unique<CpuOps>(); }

}  // namespace shardtrain
