// FP8 E4M3 (OCP "E4M3FN", the e4m3 of Hopper's FP8 GEMMs) on the host: 1 sign bit, 4 exponent
// bits (bias 7), 3 mantissa bits; no infinities; 0x7f / 0xff are NaN; largest finite 448,
// smallest subnormal 2^-9.
//
// f32_to_e4m3 rounds to nearest even and saturates to +-448 (what CUDA's
// __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) does: infinities too; NaN becomes 0x7f),
// so the CPU backend and the CUDA kernels of the FP8 all-gather (fsdp/fp8_gather.h) agree bit
// for bit (the GPU tests compare them).
//
// The all-gather's per-tensor scale: fp8_gather_scale(amax) = 448 / amax (1 when amax is 0 or
// not finite), applied as q = e4m3(x * scale) and undone as q * (1 / scale), both in fp32.
#pragma once

#include <cmath>
#include <cstdint>

namespace shardtrain {

inline constexpr float kE4m3Max = 448.0f;

uint8_t f32_to_e4m3(float value);
float e4m3_to_f32(uint8_t bits);

inline float fp8_gather_scale(float amax) {
  return amax > 0.0f && std::isfinite(amax) ? kE4m3Max / amax : 1.0f;
}

}  // namespace shardtrain
