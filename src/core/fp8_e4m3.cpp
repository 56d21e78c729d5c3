#include "core/fp8_e4m3.h"

#include <cstring>

namespace shardtrain {

uint8_t f32_to_e4m3(float value) {
  if (std::isnan(value)) return 0x7f;
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80u);
  const float magnitude = std::fabs(value);
  if (magnitude >= kE4m3Max) return sign | 0x7e;  // saturate (infinities included)
  constexpr float kSmallestNormal = 0.015625f;    // 2^-6
  if (magnitude < kSmallestNormal) {
    // Subnormal: multiples of 2^-9; magnitude * 512 is exact, nearbyint rounds half to even.
    // 8 (a carry to 2^-6) encodes the smallest normal, exponent 1 mantissa 0, as it should.
    return sign | static_cast<uint8_t>(std::nearbyint(magnitude * 512.0f));
  }
  // Normal: keep the exponent and the top 3 mantissa bits, rounding the 20 dropped bits to
  // nearest even (a carry moves into the exponent, as it should).
  const uint32_t abs_bits = bits & 0x7fffffffu;
  const uint32_t rounded = (abs_bits + 0x7ffffu + ((abs_bits >> 20) & 1u)) >> 20;
  const int exponent = static_cast<int>(rounded >> 3) - 127 + 7;
  const uint32_t mantissa = rounded & 7u;
  if (exponent > 15 || (exponent == 15 && mantissa == 7)) return sign | 0x7e;
  return sign | static_cast<uint8_t>((exponent << 3) | static_cast<int>(mantissa));
}

float e4m3_to_f32(uint8_t bits) {
  const int exponent = (bits >> 3) & 0xf;
  const int mantissa = bits & 7;
  if (exponent == 15 && mantissa == 7) return std::nanf("");
  const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                        : std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
  return (bits & 0x80) ? -magnitude : magnitude;
}

}  // namespace shardtrain
