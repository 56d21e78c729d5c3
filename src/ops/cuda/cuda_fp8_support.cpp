// Where FP8 matmuls run (cuda_fp8_support.h).
#include "ops/cuda/cuda_fp8_support.h"

#include <fmt/format.h>

#include "core/env_switch.h"
#include "ops/ops_switches.h"

namespace shardtrain::cuda_kernels {

std::string fp8_unsupported_reason(const DeviceLimits& limits) {
  if (limits.compute_capability() >= kFp8MinComputeCapability) return "";
  return fmt::format(
      "{} (compute capability {}.{}) has no FP8 tensor cores; FP8 needs compute capability 8.9+ "
      "(L4, L40S, H100, H200)",
      limits.name, limits.major, limits.minor);
}

bool parse_fp8_fused_swiglu(const char* value) {
  return parse_env_switch("SHARDTRAIN_FP8_FUSED_SWIGLU", value, true);
}

bool parse_fp8_grad_fast_accum(const char* value) {
  return parse_env_switch("SHARDTRAIN_FP8_GRAD_FAST_ACCUM", value, true);
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
