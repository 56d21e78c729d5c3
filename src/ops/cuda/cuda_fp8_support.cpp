// Where FP8 matmuls run (cuda_fp8_support.h).
#include "ops/cuda/cuda_fp8_support.h"

#include <fmt/format.h>

#include "ops/ops_switches.h"

namespace shardtrain::cuda_kernels {

std::string fp8_unsupported_reason(const DeviceLimits& limits) {
  if (limits.compute_capability() >= kFp8MinComputeCapability) return "";
  return fmt::format(
      "{} (compute capability {}.{}) has no FP8 tensor cores; FP8 needs compute capability 8.9+ "
      "(L4, L40S, H100, H200)",
      limits.name, limits.major, limits.minor);
}

bool fp8_grad_fast_accum_enabled() {
  static const bool enabled = fp8_grad_fast_accum_switch();
  return enabled;
}

bool fp8_fused_swiglu_enabled() {
  static const bool enabled = fp8_fused_swiglu_switch();
  return enabled;
}

}  // namespace shardtrain::cuda_kernels
