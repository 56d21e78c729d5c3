// The FP8 all-gather casts on CUDA (cuda_fp8_gather.cu through CudaOps): the decode of all 256
// e4m3 bytes against core/fp8_e4m3.h's e4m3_to_f32, the encode of ~1M values of every kind
// (saturating, subnormal, exact ties, signed zero, inf, NaN) against f32_to_e4m3 for f32 and bf16
// inputs and several scales, and the three ops against CpuOps (ops/cpu/cpu_fp8_gather.cpp) over
// ranges that share a scale, sit at odd offsets, are empty or one element long, on aligned and
// unaligned tensors, with the bytes and elements outside the ranges left as they were. All bit
// for bit (a NaN matches any NaN). Skips without a GPU (the fixture); needs no FP8 GEMMs, so it
// runs below sm_89 too.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/fp8_e4m3.h"
#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain {
namespace {

using namespace cuda_testing;

uint32_t bits_of(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

bool same_value(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || bits_of(a) == bits_of(b);
}

// `values` as stored in `dtype` (f32 or bf16), read back as fp32.
float stored(float value, DType dtype) {
  return dtype == DType::kF32 ? value : bf16_to_f32(f32_to_bf16(value));
}

class CudaFp8GatherTest : public CudaOpsTest {
 protected:
  // A GPU u8 tensor of `n` bytes at byte `offset` of its allocation, holding `values`.
  Tensor gpu_bytes(const std::vector<uint8_t>& values, int64_t offset = 0) {
    const auto n = static_cast<int64_t>(values.size());
    buffers_.emplace_back(*gpu_, static_cast<size_t>(n + offset));
    Tensor t = buffers_.back().view(DType::kU8, {n + offset}).rows(offset, n + offset);
    gpu_->copy_from_host(t, values.data());
    return t;
  }
  std::vector<uint8_t> download_bytes(Tensor gpu) {
    std::vector<uint8_t> bytes(static_cast<size_t>(gpu.numel()));
    gpu_->copy_to_host(bytes.data(), gpu);
    return bytes;
  }
  // A GPU f32 or bf16 tensor holding `values` at element `offset` of its allocation (offset 1
  // takes the kernels off their vector path).
  Tensor gpu_values(const std::vector<float>& values, DType dtype, int64_t offset = 0) {
    const auto n = static_cast<int64_t>(values.size());
    std::vector<float> padded(static_cast<size_t>(offset), 0.0f);
    padded.insert(padded.end(), values.begin(), values.end());
    return gpu_tensor(padded, dtype, {n + offset}).rows(offset, n + offset);
  }
  // A CPU tensor of `dtype` holding `values` (bf16: rounded to nearest even, as upload does).
  Tensor cpu_values(const std::vector<float>& values, DType dtype) {
    const auto n = static_cast<int64_t>(values.size());
    if (dtype == DType::kF32) return cpu_tensor(values.data(), dtype, {n});
    std::vector<uint16_t> bits(values.size());
    convert_from_f32(values.data(), dtype, bits.data(), values.size());
    return cpu_tensor(bits.data(), dtype, {n});
  }
  static std::vector<float> cpu_floats(Tensor cpu) {
    std::vector<float> values(static_cast<size_t>(cpu.numel()));
    if (cpu.dtype() == DType::kF32) return host_values(cpu);
    convert_to_f32(cpu.data(), cpu.dtype(), values.data(), values.size());
    return values;
  }

  // Checks the three ops on CUDA against CpuOps for x in `x_dtype`, out in `out_dtype`, the GPU
  // tensors `offset` elements (bytes) into their allocations.
  void expect_matches_cpu(DType x_dtype, DType out_dtype, int64_t offset);
};

// Expects got[i] == want[i] bit for bit (NaN matches NaN), naming the first few mismatches.
void expect_same_values(const std::vector<float>& got, const std::vector<float>& want,
                        const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int64_t mismatches = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (same_value(got[i], want[i])) continue;
    if (++mismatches <= 5)
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " want " << want[i];
  }
  EXPECT_EQ(mismatches, 0) << what;
}

TEST_F(CudaFp8GatherTest, DequantizesEveryByteAsTheHost) {
  std::vector<uint8_t> all(256);
  for (int b = 0; b < 256; ++b) all[static_cast<size_t>(b)] = static_cast<uint8_t>(b);
  const Tensor bytes = gpu_bytes(all);
  const Tensor amax = gpu_tensor({kE4m3Max}, DType::kF32, {1});  // scale 1
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    const Tensor out = gpu_tensor(std::vector<float>(256), dtype, {256});
    poison(out);
    gpu_->fp8_range_dequantize(bytes, {{0, 256, 0}}, amax, out);
    std::vector<float> want(256);
    for (int b = 0; b < 256; ++b)
      want[static_cast<size_t>(b)] = stored(e4m3_to_f32(static_cast<uint8_t>(b)), dtype);
    expect_same_values(download(out), want,
                       std::string("decode to ") + std::string(dtype_name(dtype)));
  }
  // The table itself, so a wrong host decode cannot hide behind a matching device one.
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(bits_of(e4m3_to_f32(0x80)), bits_of(-0.0f));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)) && std::isnan(e4m3_to_f32(0xff)));
}

// ~1M values that exercise every rounding case of e4m3(x * scale): log-uniform magnitudes from
// below the smallest subnormal to beyond 448, exact e4m3 values and exact midpoints between
// neighbours (exact after scaling when the scale is a power of two), values past the largest
// finite, tiny and f32-subnormal values, and the specials. Random signs throughout.
std::vector<float> rounding_cases(int64_t n, float scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 0x7d);
  // Beyond 448: 464 is the tie of 448 and (the NaN's) 480. Near zero: 2^-10 is the tie of 0 and
  // the smallest subnormal 2^-9 (17 * 2^-14 just above it), 3 * 2^-11 the one of 2^-9 and 2^-8;
  // 232 the one of 224 and 240.
  const std::vector<float> specials = {0.0f,       -0.0f,   INFINITY, -INFINITY, NAN,
                                       -NAN,       448.0f,  449.0f,   464.0f,    480.0f,
                                       1e30f,      FLT_MAX, 1e-45f,   FLT_MIN,   0x1p-10f,
                                       0x1.8p-10f, 0x1p-9f, 240.0f,   232.0f,    0x1.1p-10f};
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const float sign = unit(rng) < 0.5f ? -1.0f : 1.0f;
    float scaled = 0;  // the value x * scale is meant to be
    switch (i % 8) {
      case 0:
      case 1:
        scaled = std::exp2(-14.0f + 25.0f * unit(rng));
        break;  // 2^-14 .. 2^11
      case 2:
        scaled = e4m3_to_f32(static_cast<uint8_t>(byte(rng)));
        break;
      case 3: {  // the midpoint of two neighbours (0x7e's upper one being 480, past the max)
        const auto b = static_cast<uint8_t>(byte(rng) + 1);
        const float next = b == 0x7e ? 480.0f : e4m3_to_f32(static_cast<uint8_t>(b + 1));
        scaled = (e4m3_to_f32(b) + next) / 2;
        break;
      }
      case 4:
        scaled = 448.0f + 1e6f * unit(rng) * unit(rng);
        break;
      case 5:
        scaled = std::exp2(-40.0f + 31.0f * unit(rng));
        break;  // mostly below 2^-9
      case 6:
        scaled = specials[static_cast<size_t>(i / 8) % specials.size()];
        break;
      default:
        scaled = 2 * unit(rng) - 1;
        break;
    }
    x[static_cast<size_t>(i)] = sign * scaled / scale;
  }
  return x;
}

TEST_F(CudaFp8GatherTest, QuantizesEveryRoundingCaseAsTheHost) {
  constexpr int64_t kCount = (int64_t{1} << 20) + 3;  // a tail off the 8-element vectors
  // 448 / 3.5 = 128 (exact ties survive the scaling), a scale that is no power of two, and the
  // amax values that give scale 1 (0, inf, NaN).
  for (const float amax : {3.5f, 1.7f, 0.0f, INFINITY, NAN}) {
    const float scale = fp8_gather_scale(amax);
    const std::vector<float> x = rounding_cases(kCount, scale, next_seed_++);
    const Tensor amax_1 = gpu_tensor({amax}, DType::kF32, {1});
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      const Tensor x_gpu = gpu_values(x, dtype);
      const Tensor bytes = gpu_bytes(std::vector<uint8_t>(static_cast<size_t>(kCount), 0xAB));
      gpu_->fp8_range_quantize(x_gpu, {{0, kCount, 0}}, amax_1, bytes);
      const std::vector<uint8_t> got = download_bytes(bytes);
      int64_t mismatches = 0;
      for (int64_t i = 0; i < kCount; ++i) {
        const float value = stored(x[static_cast<size_t>(i)], dtype);
        const uint8_t want = f32_to_e4m3(value * scale);
        if (got[static_cast<size_t>(i)] == want) continue;
        if (++mismatches <= 5)
          ADD_FAILURE() << dtype_name(dtype) << " amax " << amax << " x[" << i << "] = " << value
                        << " (x * scale = " << value * scale << "): got 0x" << std::hex
                        << int{got[static_cast<size_t>(i)]} << " want 0x" << int{want} << std::dec;
      }
      EXPECT_EQ(mismatches, 0) << dtype_name(dtype) << " amax " << amax;
    }
  }
}

void CudaFp8GatherTest::expect_matches_cpu(DType x_dtype, DType out_dtype, int64_t offset) {
  SCOPED_TRACE(std::string("x ") + std::string(dtype_name(x_dtype)) + ", out " +
               std::string(dtype_name(out_dtype)) + ", offset " + std::to_string(offset));
  constexpr int64_t kCount = 10007;
  // Scale 0: two ranges, one amax. 1: odd begin and end, an inf (scale 1) and values past 448.
  // 2: an empty range and a one-element one, over an amax already larger than its values. 3: a
  // long range to the end of x, its amax from its own values. 4: no range (its amax stays put).
  const std::vector<Fp8Range> ranges = {{0, 640, 0},     {1024, 2048, 0}, {2051, 4097, 1},
                                        {4097, 4097, 2}, {4100, 4101, 2}, {4103, kCount, 3}};
  const std::vector<float> amax_start = {0.0f, 0.0f, 1000.0f, 0.0f, 0.5f};
  std::vector<float> x = random(kCount, -3.0f, 3.0f);
  for (int64_t i = 2051; i < 4097; ++i) x[static_cast<size_t>(i)] *= 300.0f;
  x[100] = NAN;
  x[1500] = -0.0f;
  x[3000] = INFINITY;
  x[4100] = -5.0f;
  x[9000] = std::ldexp(1.0f, -20);

  const int64_t bytes_count = kCount + 5;  // longer than x: its tail is outside every range
  const std::vector<uint8_t> bytes_start(static_cast<size_t>(bytes_count), 0xAB);
  constexpr float kUntouched = -7.25f;  // exact in bf16
  const std::vector<float> out_start(static_cast<size_t>(kCount), kUntouched);

  const Tensor x_gpu = gpu_values(x, x_dtype, offset);
  const Tensor x_cpu = cpu_values(x, x_dtype);
  const Tensor amax_gpu = gpu_tensor(amax_start, DType::kF32, {5});
  const Tensor amax_cpu = cpu_values(amax_start, DType::kF32);
  const Tensor bytes_gpu = gpu_bytes(bytes_start, offset);
  const Tensor bytes_cpu = cpu_tensor(bytes_start.data(), DType::kU8, {bytes_count});
  const Tensor out_gpu = gpu_values(out_start, out_dtype, offset);
  const Tensor out_cpu = cpu_values(out_start, out_dtype);

  gpu_->fp8_range_amax(x_gpu, ranges, amax_gpu);
  cpu_->fp8_range_amax(x_cpu, ranges, amax_cpu);
  const std::vector<float> amax = download(amax_gpu);
  expect_same_values(amax, host_values(amax_cpu), "amax");
  EXPECT_EQ(amax[1], INFINITY);
  EXPECT_EQ(amax[2], 1000.0f);  // combined with the value there, not overwritten
  EXPECT_EQ(amax[4], 0.5f);

  gpu_->fp8_range_quantize(x_gpu, ranges, amax_gpu, bytes_gpu);
  cpu_->fp8_range_quantize(x_cpu, ranges, amax_cpu, bytes_cpu);
  const std::vector<uint8_t> bytes = download_bytes(bytes_gpu);
  std::vector<bool> in_range(static_cast<size_t>(bytes_count), false);
  for (const Fp8Range& r : ranges)
    for (int64_t i = r.begin; i < r.end; ++i) in_range[static_cast<size_t>(i)] = true;
  int64_t byte_mismatches = 0, bytes_touched = 0;
  const auto* want_bytes = static_cast<const uint8_t*>(bytes_cpu.data());
  for (int64_t i = 0; i < bytes_count; ++i) {
    const auto at = static_cast<size_t>(i);
    if (bytes[at] != want_bytes[i] && ++byte_mismatches <= 5)
      ADD_FAILURE() << "bytes[" << i << "]: got " << int{bytes[at]} << " want "
                    << int{want_bytes[i]};
    if (!in_range[at] && bytes[at] != 0xAB) ++bytes_touched;
  }
  EXPECT_EQ(byte_mismatches, 0);
  EXPECT_EQ(bytes_touched, 0) << "bytes outside the ranges written";
  EXPECT_EQ(bytes[100], 0x7f);   // NaN
  EXPECT_EQ(bytes[1500], 0x80);  // -0

  gpu_->fp8_range_dequantize(bytes_gpu, ranges, amax_gpu, out_gpu);
  cpu_->fp8_range_dequantize(bytes_cpu, ranges, amax_cpu, out_cpu);
  const std::vector<float> out = download(out_gpu);
  expect_same_values(out, cpu_floats(out_cpu), "out");
  int64_t out_touched = 0;
  for (int64_t i = 0; i < kCount; ++i)
    if (!in_range[static_cast<size_t>(i)] && !same_value(out[static_cast<size_t>(i)], kUntouched))
      ++out_touched;
  EXPECT_EQ(out_touched, 0) << "out elements outside the ranges written";
  // Scale 448 / 1000: -5 becomes -2.24, the nearest e4m3 -2.25, back as -2.25 * (1000 / 448).
  EXPECT_EQ(out[4100], stored(-2.25f * (1.0f / fp8_gather_scale(1000.0f)), out_dtype));
}

TEST_F(CudaFp8GatherTest, MatchesCpuOverRanges) {
  for (const int64_t offset : {0, 1}) {
    expect_matches_cpu(DType::kF32, DType::kF32, offset);
    expect_matches_cpu(DType::kBF16, DType::kBF16, offset);
    expect_matches_cpu(DType::kF32, DType::kBF16, offset);
  }
}

}  // namespace
}  // namespace shardtrain
