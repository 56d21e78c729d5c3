// Element types and host-side conversions between them.
//
// bf16 and fp16 are stored as raw uint16 bit patterns; conversions round to nearest even.
// u8 is raw bytes (FP8 copies: core/fp8_e4m3.h); it converts to nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace shardtrain {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kU8 };

size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);  // "f32", "bf16", "f16", "i32", "u8"

inline float bf16_to_f32(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, sizeof(value));
  return value;
}

inline uint16_t f32_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // keep NaN a NaN
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

// Converts `count` elements from `src` (of type `from`) to fp32 in `dst`. i32 and u8 are not
// accepted.
void convert_to_f32(const void* src, DType from, float* dst, size_t count);
// Converts `count` fp32 values to `to` in `dst`.
void convert_from_f32(const float* src, DType to, void* dst, size_t count);

}  // namespace shardtrain
