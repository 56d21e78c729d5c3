// Tests for CpuOps. Every backward is checked against central finite differences of
// L = sum(out * R) for a fixed random R (L evaluated in double from the fp32 outputs); forwards
// are checked against direct double-precision evaluations of the defining formulas.
#include "ops/cpu/cpu_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "core/host_buffer.h"
#include "ops/device_buffer.h"

namespace shardtrain {
namespace {

// Random values in ±[0.2, 1.0] * magnitude: never zero, both signs.
std::vector<float> random_values(size_t count, uint32_t seed, float magnitude = 1.0f) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> size(0.2f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> values(count);
  for (float& value : values)
    value = (negative(generator) ? -1.0f : 1.0f) * size(generator) * magnitude;
  return values;
}

// A host tensor filled from `values`.
HostTensor make_tensor(Shape shape, const std::vector<float>& values) {
  HostTensor tensor(DType::kF32, shape);
  EXPECT_EQ(static_cast<size_t>(tensor.tensor.numel()), values.size());
  std::copy(values.begin(), values.end(), tensor.tensor.f32());
  return tensor;
}

HostTensor make_ids(Shape shape, const std::vector<int32_t>& values) {
  HostTensor tensor(DType::kI32, shape);
  std::copy(values.begin(), values.end(), tensor.tensor.i32());
  return tensor;
}

std::vector<float> to_vector(const Tensor& tensor) {
  return std::vector<float>(tensor.f32(), tensor.f32() + tensor.numel());
}

// sum(out * weights) in double.
double weighted_sum(const Tensor& out, const std::vector<float>& weights) {
  double total = 0;
  for (int64_t i = 0; i < out.numel(); ++i) total += static_cast<double>(out.f32()[i]) * weights[i];
  return total;
}

// Compares `analytic` with central differences of `loss` with respect to the `count` floats at
// `input`: ||analytic - numeric|| <= 1e-2 ||numeric|| and every element within 2e-2 max|numeric|.
void expect_matches_finite_differences(float* input, const std::vector<float>& analytic,
                                       const std::function<double()>& loss, float step,
                                       const char* what) {
  SCOPED_TRACE(what);
  double difference_norm = 0, numeric_norm = 0, numeric_max = 0;
  std::vector<double> numeric(analytic.size());
  for (size_t i = 0; i < analytic.size(); ++i) {
    const float saved = input[i];
    input[i] = saved + step;
    const double loss_plus = loss();
    input[i] = saved - step;
    const double loss_minus = loss();
    input[i] = saved;
    // The perturbation actually applied in fp32, not the nominal step.
    const double applied = static_cast<double>(saved + step) - static_cast<double>(saved - step);
    numeric[i] = (loss_plus - loss_minus) / applied;
    difference_norm += (analytic[i] - numeric[i]) * (analytic[i] - numeric[i]);
    numeric_norm += numeric[i] * numeric[i];
    numeric_max = std::max(numeric_max, std::abs(numeric[i]));
  }
  ASSERT_GT(numeric_norm, 0) << "degenerate check: zero gradient";
  EXPECT_LE(std::sqrt(difference_norm / numeric_norm), 1e-2);
  for (size_t i = 0; i < analytic.size(); ++i) {
    EXPECT_NEAR(analytic[i], numeric[i], 2e-2 * numeric_max) << "element " << i;
  }
}

void expect_close(const std::vector<float>& actual, const std::vector<double>& expected,
                  double relative, const char* what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(actual.size(), expected.size());
  double scale = 0;
  for (double value : expected) scale = std::max(scale, std::abs(value));
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], relative * scale) << "element " << i;
  }
}

class CpuOpsTest : public ::testing::Test {
 protected:
  CpuOps ops;
};

// ---- memory and elementwise ----

TEST_F(CpuOpsTest, AllocateIsAlignedAndZeroed) {
  DeviceBuffer buffer(ops, 1000);
  ASSERT_NE(buffer.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.data()) % 64, 0u);
  const auto* bytes = static_cast<const unsigned char*>(buffer.data());
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(bytes[i], 0) << i;
  EXPECT_EQ(ops.device(), Device::kCpu);
  EXPECT_EQ(ops.activation_dtype(), DType::kF32);
  EXPECT_NE(make_cpu_ops(), nullptr);
}

TEST_F(CpuOpsTest, CopyFillAddScaleReadScalar) {
  DeviceBuffer buffer(ops, 3 * 4 * sizeof(float));
  const Tensor a = buffer.view(DType::kF32, {4});
  const Tensor b(static_cast<float*>(buffer.data()) + 4, DType::kF32, {4});
  const Tensor out(static_cast<float*>(buffer.data()) + 8, DType::kF32, {4});
  const float a_host[4] = {1.5f, -2.0f, 3.25f, 7.0f};
  const float b_host[4] = {0.5f, 4.0f, -1.25f, 2.0f};
  ops.copy_from_host(a, a_host);
  ops.copy_from_host(b, b_host);
  ops.add(out, a, b);
  ops.scale(out, -2.0f);
  float result[4];
  ops.copy_to_host(result, out);
  EXPECT_EQ(result[0], -4.0f);
  EXPECT_EQ(result[1], -4.0f);
  EXPECT_EQ(result[2], -4.0f);
  EXPECT_EQ(result[3], -18.0f);
  ops.add(a, a, b);  // aliasing output
  EXPECT_EQ(ops.read_scalar(a), 2.0f);
  ops.fill_zero(out);
  ops.copy_to_host(result, out);
  for (float value : result) EXPECT_EQ(value, 0.0f);
}

TEST_F(CpuOpsTest, CastRoundTripsThroughBf16AndF16) {
  // Exactly representable in bf16 (8 significant bits) and f16 survive unchanged.
  const std::vector<float> exact = {1.0f, -2.5f, 0.15625f, 384.0f, -0.0078125f};
  HostTensor source = make_tensor({5}, exact);
  HostTensor half(DType::kBF16, {5});
  HostTensor back(DType::kF32, {5});
  ops.cast(half.tensor, source.tensor);
  ops.cast(back.tensor, half.tensor);
  EXPECT_EQ(to_vector(back.tensor), exact);
  EXPECT_EQ(half.tensor.u16()[0], 0x3f80);  // bf16 bits of 1.0

  // Values that are not representable round to nearest even.
  const std::vector<float> inexact = {1.00390625f /* 1 + 2^-8: tie, to even -> 1 */,
                                      1.01171875f /* 1 + 3*2^-8: tie -> 1 + 2^-6 */, 3.14159265f};
  HostTensor source2 = make_tensor({3}, inexact);
  HostTensor half2(DType::kBF16, {3});
  HostTensor back2(DType::kF32, {3});
  ops.cast(half2.tensor, source2.tensor);
  ops.cast(back2.tensor, half2.tensor);
  EXPECT_EQ(back2.tensor.f32()[0], 1.0f);
  EXPECT_EQ(back2.tensor.f32()[1], 1.015625f);
  EXPECT_EQ(back2.tensor.f32()[2], 3.140625f);

  HostTensor f16(DType::kF16, {5});
  ops.cast(f16.tensor, source.tensor);
  ops.cast(back.tensor, f16.tensor);
  EXPECT_EQ(to_vector(back.tensor), exact);
  EXPECT_EQ(f16.tensor.u16()[0], 0x3c00);  // f16 bits of 1.0
}

// ---- embedding ----

TEST_F(CpuOpsTest, EmbeddingForwardAndBackwardWithRepeatedIds) {
  const int64_t vocab = 6, channels = 4;
  const std::vector<int32_t> ids = {3, 1, 3, 5, 3};
  HostTensor table = make_tensor({vocab, channels}, random_values(vocab * channels, 1));
  HostTensor ids_tensor = make_ids({5}, ids);
  HostTensor out(DType::kF32, {5, channels});
  ops.embedding_forward(ids_tensor.tensor, table.tensor, out.tensor);
  for (int64_t n = 0; n < 5; ++n) {
    for (int64_t c = 0; c < channels; ++c) {
      EXPECT_EQ(out.tensor.f32()[n * channels + c], table.tensor.f32()[ids[n] * channels + c]);
    }
  }

  const std::vector<float> weights = random_values(5 * channels, 2);
  HostTensor dout = make_tensor({5, channels}, weights);
  HostTensor dtable = make_tensor({vocab, channels}, std::vector<float>(vocab * channels, 0.5f));
  ops.embedding_backward(ids_tensor.tensor, dout.tensor, dtable.tensor);
  // Row 3 collects three tokens on top of the 0.5 already there; unused rows keep 0.5.
  EXPECT_FLOAT_EQ(
      dtable.tensor.f32()[3 * channels + 1],
      0.5f + weights[0 * channels + 1] + weights[2 * channels + 1] + weights[4 * channels + 1]);
  EXPECT_EQ(dtable.tensor.f32()[0 * channels + 2], 0.5f);

  std::vector<float> analytic = to_vector(dtable.tensor);
  for (float& value : analytic) value -= 0.5f;
  expect_matches_finite_differences(
      table.tensor.f32(), analytic,
      [&] {
        ops.embedding_forward(ids_tensor.tensor, table.tensor, out.tensor);
        return weighted_sum(out.tensor, weights);
      },
      1e-2f, "dtable");
}

// ---- RMSNorm ----

TEST_F(CpuOpsTest, RmsnormForwardMatchesFormula) {
  const int64_t rows = 3, channels = 16;
  const float eps = 1e-5f;
  const std::vector<float> x = random_values(rows * channels, 3, 2.0f);
  const std::vector<float> weight = random_values(channels, 4);
  HostTensor x_tensor = make_tensor({rows, channels}, x);
  HostTensor weight_tensor = make_tensor({channels}, weight);
  HostTensor out(DType::kF32, {rows, channels});
  HostTensor rstd(DType::kF32, {rows});
  ops.rmsnorm_forward(x_tensor.tensor, weight_tensor.tensor, eps, out.tensor, rstd.tensor);
  std::vector<double> expected_out(rows * channels), expected_rstd(rows);
  for (int64_t n = 0; n < rows; ++n) {
    double mean_square = 0;
    for (int64_t c = 0; c < channels; ++c)
      mean_square += double{x[n * channels + c]} * x[n * channels + c];
    expected_rstd[n] = 1.0 / std::sqrt(mean_square / channels + eps);
    for (int64_t c = 0; c < channels; ++c) {
      expected_out[n * channels + c] = weight[c] * x[n * channels + c] * expected_rstd[n];
    }
  }
  expect_close(to_vector(out.tensor), expected_out, 1e-6, "out");
  expect_close(to_vector(rstd.tensor), expected_rstd, 1e-6, "rstd");
}

TEST_F(CpuOpsTest, RmsnormBackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, channels = 8;
  const float eps = 1e-5f;
  HostTensor x = make_tensor({rows, channels}, random_values(rows * channels, 5));
  HostTensor weight = make_tensor({channels}, random_values(channels, 6));
  const std::vector<float> weights = random_values(rows * channels, 7);
  HostTensor out(DType::kF32, {rows, channels});
  HostTensor rstd(DType::kF32, {rows});
  const auto loss = [&] {
    ops.rmsnorm_forward(x.tensor, weight.tensor, eps, out.tensor, rstd.tensor);
    return weighted_sum(out.tensor, weights);
  };
  loss();
  HostTensor dout = make_tensor({rows, channels}, weights);
  HostTensor dx(DType::kF32, {rows, channels});
  HostTensor dweight(DType::kF32, {channels});
  ops.rmsnorm_backward(dout.tensor, x.tensor, weight.tensor, rstd.tensor, dx.tensor, dweight.tensor,
                       /*accumulate_dx=*/false, true);
  const std::vector<float> dx_once = to_vector(dx.tensor);
  expect_matches_finite_differences(x.tensor.f32(), dx_once, loss, 1e-2f, "dx");
  expect_matches_finite_differences(weight.tensor.f32(), to_vector(dweight.tensor), loss, 1e-2f,
                                    "dweight");

  // accumulate_dx adds onto dx; overwrite mode ignores what is there; dweight always adds.
  const std::vector<float> dweight_once = to_vector(dweight.tensor);
  ops.rmsnorm_backward(dout.tensor, x.tensor, weight.tensor, rstd.tensor, dx.tensor, dweight.tensor,
                       /*accumulate_dx=*/true, true);
  for (int64_t i = 0; i < rows * channels; ++i) {
    EXPECT_FLOAT_EQ(dx.tensor.f32()[i], 2 * dx_once[i]);
  }
  for (int64_t c = 0; c < channels; ++c) {
    EXPECT_FLOAT_EQ(dweight.tensor.f32()[c], 2 * dweight_once[c]);
  }
  ops.rmsnorm_backward(dout.tensor, x.tensor, weight.tensor, rstd.tensor, dx.tensor, dweight.tensor,
                       /*accumulate_dx=*/false, true);
  EXPECT_EQ(to_vector(dx.tensor), dx_once);
  // accumulate_dweight = false: dweight is overwritten, whatever it held (here 3x the grad).
  ops.rmsnorm_backward(dout.tensor, x.tensor, weight.tensor, rstd.tensor, dx.tensor, dweight.tensor,
                       /*accumulate_dx=*/false, /*accumulate_dweight=*/false);
  EXPECT_EQ(to_vector(dweight.tensor), dweight_once);
}

// ---- linear ----

void check_linear(Ops& ops, bool with_bias) {
  const int64_t rows = 5, in_features = 6, out_features = 4;
  HostTensor x = make_tensor({rows, in_features}, random_values(rows * in_features, 8));
  HostTensor weight =
      make_tensor({out_features, in_features}, random_values(out_features * in_features, 9));
  HostTensor bias = make_tensor({out_features}, random_values(out_features, 10));
  const Tensor bias_view = with_bias ? bias.tensor : Tensor();
  HostTensor out(DType::kF32, {rows, out_features});
  ops.linear_forward(x.tensor, weight.tensor, bias_view, out.tensor);
  std::vector<double> expected(rows * out_features);
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t o = 0; o < out_features; ++o) {
      double sum = with_bias ? bias.tensor.f32()[o] : 0.0;
      for (int64_t i = 0; i < in_features; ++i) {
        sum +=
            double{x.tensor.f32()[n * in_features + i]} * weight.tensor.f32()[o * in_features + i];
      }
      expected[n * out_features + o] = sum;
    }
  }
  expect_close(to_vector(out.tensor), expected, 1e-6, "forward");

  const std::vector<float> weights = random_values(rows * out_features, 11);
  const auto loss = [&] {
    ops.linear_forward(x.tensor, weight.tensor, bias_view, out.tensor);
    return weighted_sum(out.tensor, weights);
  };
  HostTensor dout = make_tensor({rows, out_features}, weights);
  HostTensor dx = make_tensor({rows, in_features}, random_values(rows * in_features, 12));
  HostTensor dweight(DType::kF32, {out_features, in_features});
  HostTensor dbias(DType::kF32, {out_features});
  const Tensor dbias_view = with_bias ? dbias.tensor : Tensor();
  ops.linear_backward(dout.tensor, x.tensor, weight.tensor, dx.tensor, dweight.tensor, dbias_view,
                      /*accumulate_dx=*/false, true);
  const std::vector<float> dx_once = to_vector(dx.tensor);
  const std::vector<float> dweight_once = to_vector(dweight.tensor);
  const std::vector<float> dbias_once = to_vector(dbias.tensor);
  expect_matches_finite_differences(x.tensor.f32(), dx_once, loss, 1e-2f, "dx");
  expect_matches_finite_differences(weight.tensor.f32(), dweight_once, loss, 1e-2f, "dweight");
  if (with_bias) {
    expect_matches_finite_differences(bias.tensor.f32(), to_vector(dbias.tensor), loss, 1e-2f,
                                      "dbias");
  }

  // Second call: parameter grads and (with accumulate_dx) dx double; no dx when undefined.
  ops.linear_backward(dout.tensor, x.tensor, weight.tensor, dx.tensor, dweight.tensor, dbias_view,
                      /*accumulate_dx=*/true, true);
  for (size_t i = 0; i < dweight_once.size(); ++i) {
    EXPECT_FLOAT_EQ(dweight.tensor.f32()[i], 2 * dweight_once[i]);
  }
  for (size_t i = 0; i < dx_once.size(); ++i) EXPECT_FLOAT_EQ(dx.tensor.f32()[i], 2 * dx_once[i]);
  for (size_t o = 0; o < dbias_once.size(); ++o) {
    EXPECT_FLOAT_EQ(dbias.tensor.f32()[o], with_bias ? 2 * dbias_once[o] : 0.0f);
  }
  const std::vector<float> dx_twice = to_vector(dx.tensor);
  ops.linear_backward(dout.tensor, x.tensor, weight.tensor, Tensor(), dweight.tensor, dbias_view,
                      /*accumulate_dx=*/false, true);
  EXPECT_EQ(to_vector(dx.tensor), dx_twice);
  for (size_t i = 0; i < dweight_once.size(); ++i) {
    EXPECT_FLOAT_EQ(dweight.tensor.f32()[i], 3 * dweight_once[i]);
  }
  // accumulate_dweight = false: dweight and dbias are overwritten (they held 3x and 2x).
  ops.linear_backward(dout.tensor, x.tensor, weight.tensor, Tensor(), dweight.tensor, dbias_view,
                      /*accumulate_dx=*/false, /*accumulate_dweight=*/false);
  EXPECT_EQ(to_vector(dweight.tensor), dweight_once);
  if (with_bias) EXPECT_EQ(to_vector(dbias.tensor), dbias_once);
}

TEST_F(CpuOpsTest, LinearWithoutBias) { check_linear(ops, false); }
TEST_F(CpuOpsTest, LinearWithBias) { check_linear(ops, true); }

// out = x W^T + residual, into a separate buffer and in place over the residual.
TEST_F(CpuOpsTest, LinearForwardResidualAddsTheResidual) {
  const int64_t rows = 5, in = 7, out = 3;
  const HostTensor x = make_tensor({rows, in}, random_values(rows * in, 31));
  const HostTensor weight = make_tensor({out, in}, random_values(out * in, 32));
  const std::vector<float> residual_values = random_values(rows * out, 33);
  HostTensor product{DType::kF32, {rows, out}};
  ops.linear_forward(x.tensor, weight.tensor, Tensor(), product.tensor);
  std::vector<double> expected(rows * out);
  for (int64_t i = 0; i < rows * out; ++i) {
    expected[i] = double{product.tensor.f32()[i]} + residual_values[i];
  }
  const HostTensor residual = make_tensor({rows, out}, residual_values);
  HostTensor separate{DType::kF32, {rows, out}};
  ops.linear_forward_residual(x.tensor, weight.tensor, residual.tensor, separate.tensor);
  expect_close(to_vector(separate.tensor), expected, 1e-6, "separate output");
  EXPECT_EQ(to_vector(residual.tensor), residual_values) << "the residual is only read";
  HostTensor in_place = make_tensor({rows, out}, residual_values);
  ops.linear_forward_residual(x.tensor, weight.tensor, in_place.tensor, in_place.tensor);
  EXPECT_EQ(to_vector(in_place.tensor), to_vector(separate.tensor));
}

// ---- RoPE ----

struct RopeFixture {
  static constexpr int64_t kTokens = 4, kHeads = 3, kHeadDim = 8, kHalf = 4, kPositions = 10;
  HostTensor positions = make_ids({kTokens}, {0, 7, 2, 9});
  HostTensor cos_table{DType::kF32, {kPositions, kHalf}};
  HostTensor sin_table{DType::kF32, {kPositions, kHalf}};
  RopeFixture() {
    for (int64_t p = 0; p < kPositions; ++p) {
      for (int64_t i = 0; i < kHalf; ++i) {
        const double angle = p * std::pow(10000.0, -2.0 * i / kHeadDim);
        cos_table.tensor.f32()[p * kHalf + i] = static_cast<float>(std::cos(angle));
        sin_table.tensor.f32()[p * kHalf + i] = static_cast<float>(std::sin(angle));
      }
    }
  }
};

// split_qkv_rope is "copy q, k, v out of each packed row, then rope_forward q and k";
// pack_qkv_rope_backward is "rope_backward dq and dk, then copy the three into the packed row".
TEST_F(CpuOpsTest, PackedQkvEqualsCopiesAndRope) {
  RopeFixture rope;
  const int64_t N = RopeFixture::kTokens, D = RopeFixture::kHeadDim, H = 3, K = 1;
  const int64_t row = (H + 2 * K) * D;
  const std::vector<float> packed = random_values(N * row, 17);
  std::vector<float> q(N * H * D), k(N * K * D), v(N * K * D);
  for (int64_t n = 0; n < N; ++n) {
    const float* r = packed.data() + n * row;
    std::copy(r, r + H * D, q.begin() + n * H * D);
    std::copy(r + H * D, r + (H + K) * D, k.begin() + n * K * D);
    std::copy(r + (H + K) * D, r + row, v.begin() + n * K * D);
  }
  HostTensor q_want = make_tensor({N, H, D}, q), k_want = make_tensor({N, K, D}, k);
  ops.rope_forward(q_want.tensor, rope.positions.tensor, rope.cos_table.tensor,
                   rope.sin_table.tensor);
  ops.rope_forward(k_want.tensor, rope.positions.tensor, rope.cos_table.tensor,
                   rope.sin_table.tensor);
  const HostTensor qkv = make_tensor({N, row}, packed);
  HostTensor q_got{DType::kF32, {N, H, D}}, k_got{DType::kF32, {N, K, D}},
      v_got{DType::kF32, {N, K, D}};
  ops.split_qkv_rope(qkv.tensor, rope.positions.tensor, rope.cos_table.tensor,
                     rope.sin_table.tensor, q_got.tensor, k_got.tensor, v_got.tensor);
  EXPECT_EQ(to_vector(q_got.tensor), to_vector(q_want.tensor));
  EXPECT_EQ(to_vector(k_got.tensor), to_vector(k_want.tensor));
  EXPECT_EQ(to_vector(v_got.tensor), v);

  // Backward: the transpose rotation of dq and dk, dv copied, packed per row.
  HostTensor dq = make_tensor({N, H, D}, random_values(N * H * D, 18));
  HostTensor dk = make_tensor({N, K, D}, random_values(N * K * D, 19));
  const HostTensor dv = make_tensor({N, K, D}, random_values(N * K * D, 20));
  const std::vector<float> dq_before = to_vector(dq.tensor), dk_before = to_vector(dk.tensor);
  HostTensor dqkv{DType::kF32, {N, row}};
  ops.pack_qkv_rope_backward(dq.tensor, dk.tensor, dv.tensor, rope.positions.tensor,
                             rope.cos_table.tensor, rope.sin_table.tensor, dqkv.tensor);
  EXPECT_EQ(to_vector(dq.tensor), dq_before) << "inputs are left unchanged";
  EXPECT_EQ(to_vector(dk.tensor), dk_before);
  ops.rope_backward(dq.tensor, rope.positions.tensor, rope.cos_table.tensor, rope.sin_table.tensor);
  ops.rope_backward(dk.tensor, rope.positions.tensor, rope.cos_table.tensor, rope.sin_table.tensor);
  const std::vector<float> got = to_vector(dqkv.tensor);
  const std::vector<float> dq_rot = to_vector(dq.tensor), dk_rot = to_vector(dk.tensor),
                           dv_values = to_vector(dv.tensor);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < row; ++j) {
      const float want = j < H * D         ? dq_rot[n * H * D + j]
                         : j < (H + K) * D ? dk_rot[n * K * D + j - H * D]
                                           : dv_values[n * K * D + j - (H + K) * D];
      ASSERT_EQ(got[n * row + j], want) << "token " << n << " column " << j;
    }
  }
}

TEST_F(CpuOpsTest, RopeForwardMatchesRotateHalfFormula) {
  RopeFixture rope;
  const int64_t count = RopeFixture::kTokens * RopeFixture::kHeads * RopeFixture::kHeadDim;
  const std::vector<float> x = random_values(count, 13);
  HostTensor x_tensor =
      make_tensor({RopeFixture::kTokens, RopeFixture::kHeads, RopeFixture::kHeadDim}, x);
  ops.rope_forward(x_tensor.tensor, rope.positions.tensor, rope.cos_table.tensor,
                   rope.sin_table.tensor);
  std::vector<double> expected(count);
  const int64_t half = RopeFixture::kHalf;
  for (int64_t n = 0; n < RopeFixture::kTokens; ++n) {
    const int32_t p = rope.positions.tensor.i32()[n];
    for (int64_t h = 0; h < RopeFixture::kHeads; ++h) {
      const int64_t base = (n * RopeFixture::kHeads + h) * RopeFixture::kHeadDim;
      for (int64_t i = 0; i < half; ++i) {
        const double angle = p * std::pow(10000.0, -2.0 * i / RopeFixture::kHeadDim);
        const double first = x[base + i], second = x[base + i + half];
        expected[base + i] = first * std::cos(angle) - second * std::sin(angle);
        expected[base + i + half] = second * std::cos(angle) + first * std::sin(angle);
      }
    }
  }
  expect_close(to_vector(x_tensor.tensor), expected, 1e-6, "rope");
  // Position 0 is the identity.
  for (int64_t d = 0; d < RopeFixture::kHeadDim; ++d) EXPECT_EQ(x_tensor.tensor.f32()[d], x[d]);
}

TEST_F(CpuOpsTest, RopeBackwardMatchesFiniteDifferences) {
  RopeFixture rope;
  const Shape shape = {RopeFixture::kTokens, RopeFixture::kHeads, RopeFixture::kHeadDim};
  const int64_t count = shape.numel();
  HostTensor x = make_tensor(shape, random_values(count, 14));
  HostTensor rotated(DType::kF32, shape);
  const std::vector<float> weights = random_values(count, 15);
  const auto loss = [&] {
    std::copy(x.tensor.f32(), x.tensor.f32() + count, rotated.tensor.f32());
    ops.rope_forward(rotated.tensor, rope.positions.tensor, rope.cos_table.tensor,
                     rope.sin_table.tensor);
    return weighted_sum(rotated.tensor, weights);
  };
  HostTensor grad = make_tensor(shape, weights);
  ops.rope_backward(grad.tensor, rope.positions.tensor, rope.cos_table.tensor,
                    rope.sin_table.tensor);
  expect_matches_finite_differences(x.tensor.f32(), to_vector(grad.tensor), loss, 1e-2f, "dx");
}

// ---- attention ----

struct AttentionFixture {
  static constexpr int64_t B = 2, T = 5, H = 4, K = 2, D = 8;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  HostTensor q = make_tensor({B, T, H, D}, random_values(B* T* H* D, 16, 1.5f));
  HostTensor k = make_tensor({B, T, K, D}, random_values(B* T* K* D, 17, 1.5f));
  HostTensor v = make_tensor({B, T, K, D}, random_values(B* T* K* D, 18));
  HostTensor out{DType::kF32, {B, T, H, D}};
  HostTensor lse{DType::kF32, {B, H, T}};
};

TEST_F(CpuOpsTest, AttentionForwardMatchesNaiveCausalGqa) {
  AttentionFixture f;
  using F = AttentionFixture;
  ops.attention_forward(f.q.tensor, f.k.tensor, f.v.tensor, f.scale, f.out.tensor, f.lse.tensor);
  const float* q = f.q.tensor.f32();
  const float* k = f.k.tensor.f32();
  const float* v = f.v.tensor.f32();
  std::vector<double> expected_out(F::B * F::T * F::H * F::D), expected_lse(F::B * F::H * F::T);
  for (int64_t b = 0; b < F::B; ++b) {
    for (int64_t h = 0; h < F::H; ++h) {
      const int64_t kv = h / (F::H / F::K);
      for (int64_t i = 0; i < F::T; ++i) {
        std::vector<double> scores(i + 1);
        double max_score = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < F::D; ++d) {
            dot += double{q[((b * F::T + i) * F::H + h) * F::D + d]} *
                   k[((b * F::T + j) * F::K + kv) * F::D + d];
          }
          scores[j] = dot * f.scale;
          max_score = std::max(max_score, scores[j]);
        }
        double total = 0;
        for (double score : scores) total += std::exp(score - max_score);
        expected_lse[(b * F::H + h) * F::T + i] = max_score + std::log(total);
        for (int64_t d = 0; d < F::D; ++d) {
          double value = 0;
          for (int64_t j = 0; j <= i; ++j) {
            value += std::exp(scores[j] - max_score) / total *
                     v[((b * F::T + j) * F::K + kv) * F::D + d];
          }
          expected_out[((b * F::T + i) * F::H + h) * F::D + d] = value;
        }
      }
    }
  }
  expect_close(to_vector(f.out.tensor), expected_out, 1e-6, "out");
  expect_close(to_vector(f.lse.tensor), expected_lse, 1e-6, "lse");
  // The first token of each sequence attends only to itself: out = v of its kv head.
  EXPECT_FLOAT_EQ(f.out.tensor.f32()[3 * F::D + 2], v[1 * F::D + 2]);  // h=3 -> kv 1
}

TEST_F(CpuOpsTest, AttentionBackwardMatchesFiniteDifferences) {
  AttentionFixture f;
  using F = AttentionFixture;
  const std::vector<float> weights = random_values(F::B * F::T * F::H * F::D, 19);
  const auto loss = [&] {
    ops.attention_forward(f.q.tensor, f.k.tensor, f.v.tensor, f.scale, f.out.tensor, f.lse.tensor);
    return weighted_sum(f.out.tensor, weights);
  };
  loss();
  HostTensor dout = make_tensor({F::B, F::T, F::H, F::D}, weights);
  // Pre-filled with garbage: the backward must overwrite, not accumulate.
  HostTensor dq =
      make_tensor({F::B, F::T, F::H, F::D}, random_values(F::B * F::T * F::H * F::D, 20));
  HostTensor dk =
      make_tensor({F::B, F::T, F::K, F::D}, random_values(F::B * F::T * F::K * F::D, 21));
  HostTensor dv =
      make_tensor({F::B, F::T, F::K, F::D}, random_values(F::B * F::T * F::K * F::D, 22));
  ops.attention_backward(dout.tensor, f.q.tensor, f.k.tensor, f.v.tensor, f.out.tensor,
                         f.lse.tensor, f.scale, dq.tensor, dk.tensor, dv.tensor);
  expect_matches_finite_differences(f.q.tensor.f32(), to_vector(dq.tensor), loss, 1e-2f, "dq");
  expect_matches_finite_differences(f.k.tensor.f32(), to_vector(dk.tensor), loss, 1e-2f, "dk");
  expect_matches_finite_differences(f.v.tensor.f32(), to_vector(dv.tensor), loss, 1e-2f, "dv");
  // The first query attends only to the first key; its softmax is constant, so dq is exactly 0.
  for (int64_t d = 0; d < F::D; ++d) EXPECT_EQ(dq.tensor.f32()[d], 0.0f);
}

// ---- SwiGLU ----

TEST_F(CpuOpsTest, SwigluForwardAndBackward) {
  const int64_t count = 24;
  HostTensor gate = make_tensor({4, 6}, random_values(count, 23, 3.0f));
  HostTensor up = make_tensor({4, 6}, random_values(count, 24));
  HostTensor out(DType::kF32, {4, 6});
  ops.swiglu_forward(gate.tensor, up.tensor, out.tensor);
  std::vector<double> expected(count);
  for (int64_t i = 0; i < count; ++i) {
    const double g = gate.tensor.f32()[i];
    expected[i] = g / (1.0 + std::exp(-g)) * up.tensor.f32()[i];
  }
  expect_close(to_vector(out.tensor), expected, 1e-6, "forward");

  const std::vector<float> weights = random_values(count, 25);
  const auto loss = [&] {
    ops.swiglu_forward(gate.tensor, up.tensor, out.tensor);
    return weighted_sum(out.tensor, weights);
  };
  HostTensor dout = make_tensor({4, 6}, weights);
  HostTensor dgate = make_tensor({4, 6}, random_values(count, 26));
  HostTensor dup = make_tensor({4, 6}, random_values(count, 27));
  ops.swiglu_backward(dout.tensor, gate.tensor, up.tensor, dgate.tensor, dup.tensor);
  expect_matches_finite_differences(gate.tensor.f32(), to_vector(dgate.tensor), loss, 1e-2f,
                                    "dgate");
  expect_matches_finite_differences(up.tensor.f32(), to_vector(dup.tensor), loss, 1e-2f, "dup");
}

// ---- cross-entropy ----

TEST_F(CpuOpsTest, CrossEntropyLossGradientAndIgnoredRows) {
  const int64_t rows = 4, vocab = 7;
  const float grad_scale = 0.25f;
  const std::vector<float> logits = random_values(rows * vocab, 28, 4.0f);
  const std::vector<int32_t> targets = {2, -100, 6, 0};
  HostTensor targets_tensor = make_ids({rows}, targets);
  HostTensor logits_tensor = make_tensor({rows, vocab}, logits);
  HostTensor loss_sum = make_tensor({1}, {1.5f});  // accumulates onto 1.5

  double expected_loss = 0;
  for (int64_t n = 0; n < rows; ++n) {
    if (targets[n] == -100) continue;
    double total = 0;
    for (int64_t j = 0; j < vocab; ++j) total += std::exp(double{logits[n * vocab + j]});
    expected_loss += std::log(total) - logits[n * vocab + targets[n]];
  }
  ops.cross_entropy(logits_tensor.tensor, targets_tensor.tensor, grad_scale, loss_sum.tensor,
                    /*compute_grad=*/false);
  EXPECT_NEAR(ops.read_scalar(loss_sum.tensor), 1.5 + expected_loss, 1e-6 * expected_loss);
  EXPECT_EQ(to_vector(logits_tensor.tensor), logits);  // untouched without compute_grad

  ops.cross_entropy(logits_tensor.tensor, targets_tensor.tensor, grad_scale, loss_sum.tensor,
                    /*compute_grad=*/true);
  EXPECT_NEAR(ops.read_scalar(loss_sum.tensor), 1.5 + 2 * expected_loss, 2e-6 * expected_loss);
  const std::vector<float> dlogits = to_vector(logits_tensor.tensor);
  for (int64_t j = 0; j < vocab; ++j) EXPECT_EQ(dlogits[1 * vocab + j], 0.0f);  // ignored row
  for (int64_t n : {0, 2, 3}) {  // each kept row sums to zero: softmax sums to one
    double row_sum = 0;
    for (int64_t j = 0; j < vocab; ++j) row_sum += dlogits[n * vocab + j];
    EXPECT_NEAR(row_sum, 0.0, 1e-6);
  }

  // FD of grad_scale * loss with respect to the original logits.
  HostTensor probe = make_tensor({rows, vocab}, logits);
  HostTensor scratch(DType::kF32, {rows, vocab});
  HostTensor probe_loss(DType::kF32, {1});
  expect_matches_finite_differences(
      probe.tensor.f32(), dlogits,
      [&] {
        std::copy(probe.tensor.f32(), probe.tensor.f32() + rows * vocab, scratch.tensor.f32());
        probe_loss.tensor.f32()[0] = 0;
        ops.cross_entropy(scratch.tensor, targets_tensor.tensor, grad_scale, probe_loss.tensor,
                          false);
        return double{grad_scale} * ops.read_scalar(probe_loss.tensor);
      },
      1e-2f, "dlogits");
}

TEST_F(CpuOpsTest, CrossEntropyRejectsOutOfRangeTarget) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  HostTensor logits = make_tensor({1, 3}, {0.5f, 1.0f, -1.0f});
  HostTensor targets = make_ids({1}, {3});
  HostTensor loss(DType::kF32, {1});
  EXPECT_DEATH(ops.cross_entropy(logits.tensor, targets.tensor, 1.0f, loss.tensor, true),
               "target 3 outside");
}

// ---- optimizer and norms ----

TEST_F(CpuOpsTest, AdamwMatchesPytorchFormulaOverThreeSteps) {
  const int64_t count = 5;
  AdamWStep step;
  step.lr = 0.01f;
  step.beta1 = 0.9f;
  step.beta2 = 0.95f;
  step.eps = 1e-8f;
  step.weight_decay = 0.1f;
  step.grad_scale = 0.5f;
  HostTensor param = make_tensor({count}, random_values(count, 29));
  HostTensor m(DType::kF32, {count});
  HostTensor v(DType::kF32, {count});
  std::vector<double> p(param.tensor.f32(), param.tensor.f32() + count), m_ref(count, 0),
      v_ref(count, 0);
  for (int64_t t = 1; t <= 3; ++t) {
    const std::vector<float> grad_values = random_values(count, 30 + t);
    HostTensor grad = make_tensor({count}, grad_values);
    step.step = t;
    ops.adamw(param.tensor, grad.tensor, m.tensor, v.tensor, step);
    const double lr = step.lr, b1 = step.beta1, b2 = step.beta2;
    for (int64_t i = 0; i < count; ++i) {
      const double g = double{grad_values[i]} * step.grad_scale;
      p[i] *= 1 - lr * step.weight_decay;
      m_ref[i] = b1 * m_ref[i] + (1 - b1) * g;
      v_ref[i] = b2 * v_ref[i] + (1 - b2) * g * g;
      const double bc1 = 1 - std::pow(b1, t), bc2 = 1 - std::pow(b2, t);
      p[i] -= lr / bc1 * m_ref[i] / (std::sqrt(v_ref[i]) / std::sqrt(bc2) + step.eps);
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    EXPECT_NEAR(param.tensor.f32()[i], p[i], 1e-6) << i;
    // fp32 moment updates against double: a few ulps of cancellation per step.
    EXPECT_NEAR(m.tensor.f32()[i], m_ref[i], 1e-5 * std::abs(m_ref[i])) << i;
    EXPECT_NEAR(v.tensor.f32()[i], v_ref[i], 1e-5 * std::abs(v_ref[i])) << i;
  }
}

// adamw_multi is defined as, per segment: adamw with the segment's weight decay, cast into the
// compute copy, zero the grad. Segments at odd offsets and lengths (one of length 1) inside
// shared flat buffers, with gaps that must stay untouched.
TEST_F(CpuOpsTest, AdamwMultiEqualsPerRangeAdamwCastAndZeroBitForBit) {
  struct Range {
    int64_t offset, numel;
    float weight_decay;
    bool compute, zero_grad;
  };
  const std::vector<Range> ranges = {{1, 13, 0.1f, true, true},
                                     {14, 1, 0.0f, true, false},
                                     {17, 30, 0.5f, false, true},
                                     {50, 7, 0.1f, true, false}};
  const int64_t total = 61;
  const auto buffers = [&] {
    std::vector<HostTensor> b;
    b.push_back(make_tensor({total}, random_values(total, 41)));        // param
    b.push_back(make_tensor({total}, random_values(total, 42)));        // grad
    b.push_back(make_tensor({total}, random_values(total, 43, 0.1f)));  // exp_avg
    std::vector<float> squares = random_values(total, 44, 0.1f);
    for (float& value : squares) value *= value;
    b.push_back(make_tensor({total}, squares));  // exp_avg_sq
    b.emplace_back(DType::kBF16, Shape{total});  // compute copy
    return b;
  };
  std::vector<HostTensor> fused = buffers(), reference = buffers();
  AdamWStep step;
  step.lr = 0.01f;
  step.beta2 = 0.95f;
  step.step = 3;
  step.grad_scale = 0.5f;
  step.weight_decay = 123.0f;  // ignored by adamw_multi: each segment has its own

  std::vector<AdamWSegment> segments;
  for (const Range& r : ranges) {
    const auto part = [&](int k) { return fused[k].tensor.rows(r.offset, r.offset + r.numel); };
    AdamWSegment segment{part(0), part(1), part(2), part(3), r.weight_decay};
    if (r.compute) segment.compute_param = part(4);
    segment.zero_grad = r.zero_grad;
    segments.push_back(segment);
  }
  ops.adamw_multi(segments, step);
  for (const Range& r : ranges) {
    const auto part = [&](int k) { return reference[k].tensor.rows(r.offset, r.offset + r.numel); };
    AdamWStep range_step = step;
    range_step.weight_decay = r.weight_decay;
    ops.adamw(part(0), part(1), part(2), part(3), range_step);
    if (r.compute) ops.cast(part(4), part(0));
    if (r.zero_grad) ops.fill_zero(part(1));
  }

  for (int k = 0; k < 5; ++k) {
    const Tensor& got = fused[k].tensor;
    ASSERT_EQ(std::memcmp(got.data(), reference[k].tensor.data(), got.bytes()), 0)
        << "buffer " << k;
  }
  // The reference itself did what the ranges say.
  const std::vector<HostTensor> before = buffers();
  const float* grad = fused[1].tensor.f32();
  const float* param = fused[0].tensor.f32();
  EXPECT_EQ(grad[0], before[1].tensor.f32()[0]);     // outside every range
  EXPECT_EQ(grad[1], 0.0f);                          // zeroed
  EXPECT_EQ(grad[14], before[1].tensor.f32()[14]);   // range without zero_grad
  EXPECT_EQ(param[15], before[0].tensor.f32()[15]);  // gap
  EXPECT_NE(param[14], before[0].tensor.f32()[14]);  // the length-1 range was updated
  EXPECT_EQ(bf16_to_f32(static_cast<const uint16_t*>(fused[4].tensor.data())[14]),
            bf16_to_f32(f32_to_bf16(param[14])));
  EXPECT_EQ(static_cast<const uint16_t*>(fused[4].tensor.data())[20], 0);  // no compute copy
}

TEST_F(CpuOpsTest, SumSquaresAccumulates) {
  HostTensor x = make_tensor({4}, {1.0f, -2.0f, 3.0f, 0.5f});
  HostTensor out = make_tensor({1}, {10.0f});
  ops.sum_squares(x.tensor, out.tensor);
  EXPECT_EQ(ops.read_scalar(out.tensor), 10.0f + 1 + 4 + 9 + 0.25f);
}

}  // namespace
}  // namespace shardtrain
