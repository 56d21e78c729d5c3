// Where FP8 matmuls run (cuda_fp8_support.h).
#include "ops/cuda/cuda_fp8_support.h"

#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace shardtrain::cuda_kernels {

std::string fp8_unsupported_reason(const DeviceLimits& limits) {
  if (limits.compute_capability() >= kFp8MinComputeCapability) return "";
  return fmt::format(
      "{} (compute capability {}.{}) has no FP8 tensor cores; FP8 needs compute capability 8.9+ "
      "(L4, L40S, H100, H200)",
      limits.name, limits.major, limits.minor);
}

bool parse_fp8_fused_swiglu(const char* value) {
  if (value == nullptr || std::string_view(value) == "1") return true;
  if (std::string_view(value) == "0") return false;
  throw Error(fmt::format("SHARDTRAIN_FP8_FUSED_SWIGLU='{}': use 1 (default) or 0", value));
}

bool fp8_fused_swiglu_enabled() {
  static const bool enabled = parse_fp8_fused_swiglu(std::getenv("SHARDTRAIN_FP8_FUSED_SWIGLU"));
  return enabled;
}

}  // namespace shardtrain::cuda_kernels
