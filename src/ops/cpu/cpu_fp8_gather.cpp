// CpuOps' casts of the FP8 all-gather (ops/ops.h "FP8 all-gather"): plain loops over
// core/fp8_e4m3.h, the reference the CUDA kernels match bit for bit.
#include <algorithm>
#include <cmath>

#include "core/fp8_e4m3.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/op_checks.h"

namespace shardtrain {

namespace {

// Element i of a CPU f32 or bf16 tensor, as fp32.
float element(const Tensor& x, int64_t i) {
  return x.dtype() == DType::kF32 ? static_cast<const float*>(x.data())[i]
                                  : bf16_to_f32(static_cast<const uint16_t*>(x.data())[i]);
}

}  // namespace

void CpuOps::fp8_range_amax(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S) {
  op_checks::check_fp8_ranges("fp8_range_amax", x, ranges, amax_S);
  float* amax = amax_S.f32();
  for (const Fp8Range& r : ranges) {
    for (int64_t i = r.begin; i < r.end; ++i) {
      amax[r.scale] = std::fmax(amax[r.scale], std::fabs(element(x, i)));  // NaN ignored
    }
  }
}

void CpuOps::fp8_range_quantize(Tensor x, const std::vector<Fp8Range>& ranges, Tensor amax_S,
                                Tensor bytes_u8) {
  op_checks::check_fp8_ranges("fp8_range_quantize", x, ranges, amax_S, bytes_u8);
  auto* bytes = static_cast<uint8_t*>(bytes_u8.data());
  for (const Fp8Range& r : ranges) {
    const float scale = fp8_gather_scale(amax_S.f32()[r.scale]);
    for (int64_t i = r.begin; i < r.end; ++i) bytes[i] = f32_to_e4m3(element(x, i) * scale);
  }
}

void CpuOps::fp8_range_dequantize(Tensor bytes_u8, const std::vector<Fp8Range>& ranges,
                                  Tensor amax_S, Tensor out) {
  op_checks::check_fp8_ranges("fp8_range_dequantize", out, ranges, amax_S, bytes_u8);
  const auto* bytes = static_cast<const uint8_t*>(bytes_u8.data());
  for (const Fp8Range& r : ranges) {
    const float inverse = 1.0f / fp8_gather_scale(amax_S.f32()[r.scale]);
    for (int64_t i = r.begin; i < r.end; ++i) {
      const float value = e4m3_to_f32(bytes[i]) * inverse;
      if (out.dtype() == DType::kF32) {
        static_cast<float*>(out.data())[i] = value;
      } else {
        static_cast<uint16_t*>(out.data())[i] = f32_to_bf16(value);
      }
    }
  }
}

}  // namespace shardtrain
