// e4m3 on the host (core/fp8_e4m3.h) and the CPU backend's casts of the FP8 all-gather
// (Ops::fp8_range_*): the encoding's values, round to nearest even, saturation, NaN; amax over
// ranges sharing a scale; bytes and elements outside the ranges untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/fp8_e4m3.h"
#include "ops/cpu/cpu_ops.h"

namespace shardtrain {
namespace {

TEST(E4m3, EncodingValues) {
  EXPECT_EQ(e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)));
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);    // exponent 7 = bias
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);  // largest finite
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
}

TEST(E4m3, EveryFiniteByteRoundTrips) {
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    if ((b & 0x7f) == 0x7f) continue;  // NaN
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(byte)), byte) << "byte " << b;
  }
}

TEST(E4m3, RoundsToNearestEvenBetweenNeighbours) {
  // Between every two adjacent positive values: just below the midpoint, the midpoint (to the
  // even code) and just above.
  for (int b = 0; b < 0x7e; ++b) {
    const float lo = e4m3_to_f32(static_cast<uint8_t>(b));
    const float hi = e4m3_to_f32(static_cast<uint8_t>(b + 1));
    const float mid = (lo + hi) / 2;  // exact in fp32
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, lo)), b) << "below the midpoint after " << b;
    EXPECT_EQ(f32_to_e4m3(std::nextafter(mid, hi)), b + 1) << "above the midpoint after " << b;
    EXPECT_EQ(f32_to_e4m3(mid), (b % 2 == 0) ? b : b + 1) << "midpoint after " << b;
    EXPECT_EQ(f32_to_e4m3(-mid), 0x80 | ((b % 2 == 0) ? b : b + 1)) << "negative, after " << b;
  }
}

TEST(E4m3, SaturatesAndKeepsNan) {
  EXPECT_EQ(f32_to_e4m3(449.0f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7e);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(f32_to_e4m3(std::nanf("")), 0x7f);
  EXPECT_EQ(f32_to_e4m3(1e-30f), 0x00);  // below half the smallest subnormal
  EXPECT_EQ(f32_to_e4m3(-1e-30f), 0x80);
  EXPECT_EQ(fp8_gather_scale(0.0f), 1.0f);
  EXPECT_EQ(fp8_gather_scale(std::numeric_limits<float>::infinity()), 1.0f);
  EXPECT_EQ(fp8_gather_scale(2.0f), 224.0f);
}

Tensor cpu(std::vector<float>& v) {
  return Tensor(v.data(), DType::kF32, {static_cast<int64_t>(v.size())});
}

TEST(CpuFp8RangeOps, AmaxQuantizeDequantizeOverRanges) {
  CpuOps ops;
  std::vector<float> x(40);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (static_cast<float>(i % 9) - 4.0f) * 0.37f;
  x[3] = std::nanf("");  // ignored by the amax
  x[30] = -9.0f;         // outside every range: not in any amax
  // Two ranges share scale 0, one has scale 1.
  const std::vector<Fp8Range> ranges{{0, 7, 0}, {10, 13, 0}, {20, 29, 1}};
  std::vector<float> amax{0.5f, 0.0f};  // combined with what is there
  ops.fp8_range_amax(cpu(x), ranges, cpu(amax));
  float want0 = 0.5f, want1 = 0.0f;
  for (int i : {0, 1, 2, 4, 5, 6, 10, 11, 12}) want0 = std::fmax(want0, std::fabs(x[i]));
  for (int i = 20; i < 29; ++i) want1 = std::fmax(want1, std::fabs(x[i]));
  EXPECT_EQ(amax[0], want0);
  EXPECT_EQ(amax[1], want1);

  std::vector<uint8_t> bytes(x.size(), 0xab);
  const Tensor bytes_u8(bytes.data(), DType::kU8, {static_cast<int64_t>(bytes.size())});
  ops.fp8_range_quantize(cpu(x), ranges, cpu(amax), bytes_u8);
  std::vector<float> out(x.size(), -1.0f);
  ops.fp8_range_dequantize(bytes_u8, ranges, cpu(amax), cpu(out));
  for (int64_t i = 0; i < static_cast<int64_t>(x.size()); ++i) {
    const Fp8Range* in = nullptr;
    for (const Fp8Range& r : ranges) {
      if (i >= r.begin && i < r.end) in = &r;
    }
    if (in == nullptr) {
      EXPECT_EQ(bytes[i], 0xab) << "byte " << i << " outside the ranges was written";
      EXPECT_EQ(out[i], -1.0f) << "element " << i << " outside the ranges was written";
      continue;
    }
    const float scale = fp8_gather_scale(amax[in->scale]);
    EXPECT_EQ(bytes[i], f32_to_e4m3(x[i] * scale)) << "element " << i;
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(out[i]));
    } else {
      EXPECT_EQ(out[i], e4m3_to_f32(bytes[i]) * (1.0f / scale)) << "element " << i;
      EXPECT_NEAR(out[i], x[i], std::fabs(x[i]) / 16 + 1e-6) << "element " << i;
    }
  }
  // The weight's largest element maps to 448 exactly.
  EXPECT_EQ(bytes[26], 0x7e);  // x[26] = 4 * 0.37, the amax of scale 1
  EXPECT_EQ(bytes[27], 0xfe);  // x[27] = -4 * 0.37
}

TEST(CpuFp8RangeOps, Bf16InAndOut) {
  CpuOps ops;
  std::vector<uint16_t> x{f32_to_bf16(1.5f), f32_to_bf16(-0.01f), f32_to_bf16(3.0f),
                          f32_to_bf16(0.2f)};
  const Tensor x_bf16(x.data(), DType::kBF16, {4});
  std::vector<float> amax{0.0f};
  const std::vector<Fp8Range> ranges{{0, 4, 0}};
  ops.fp8_range_amax(x_bf16, ranges, cpu(amax));
  EXPECT_EQ(amax[0], 3.0f);
  std::vector<uint8_t> bytes(4);
  const Tensor bytes_u8(bytes.data(), DType::kU8, {4});
  ops.fp8_range_quantize(x_bf16, ranges, cpu(amax), bytes_u8);
  std::vector<uint16_t> out(4);
  ops.fp8_range_dequantize(bytes_u8, ranges, cpu(amax), Tensor(out.data(), DType::kBF16, {4}));
  for (int i = 0; i < 4; ++i) {
    const float scale = fp8_gather_scale(3.0f);
    EXPECT_EQ(out[i],
              f32_to_bf16(e4m3_to_f32(f32_to_e4m3(bf16_to_f32(x[i]) * scale)) * (1.0f / scale)))
        << i;
  }
}

}  // namespace
}  // namespace shardtrain
