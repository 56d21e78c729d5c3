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

namespace {

// An on/off switch of the environment: unset or "1" on, "0" off, anything else refused.
bool parse_switch(const char* name, const char* value) {
  if (value == nullptr || std::string_view(value) == "1") return true;
  if (std::string_view(value) == "0") return false;
  throw Error(fmt::format("{}='{}': use 1 (default) or 0", name, value));
}

}  // namespace

bool parse_fp8_fused_swiglu(const char* value) {
  return parse_switch("SHARDTRAIN_FP8_FUSED_SWIGLU", value);
}

bool parse_fp8_grad_fast_accum(const char* value) {
  return parse_switch("SHARDTRAIN_FP8_GRAD_FAST_ACCUM", value);
}

bool fp8_grad_fast_accum_enabled() {
  static const bool enabled =
      parse_fp8_grad_fast_accum(std::getenv("SHARDTRAIN_FP8_GRAD_FAST_ACCUM"));
  return enabled;
}

bool fp8_fused_swiglu_enabled() {
  static const bool enabled = parse_fp8_fused_swiglu(std::getenv("SHARDTRAIN_FP8_FUSED_SWIGLU"));
  return enabled;
}

}  // namespace shardtrain::cuda_kernels
