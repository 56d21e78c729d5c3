// Tests for CpuOps (checks: ops/cpu/testing/cpu_ops_checks.h): memory and elementwise ops,
// embedding, RMSNorm, linear, SwiGLU, cross-entropy, AdamW and norms. RoPE and attention:
// cpu_attention_test.cpp.
#include "ops/cpu/cpu_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "core/host_buffer.h"
#include "ops/cpu/testing/cpu_ops_checks.h"
#include "ops/device_buffer.h"

namespace shardtrain {
namespace {

using namespace cpu_testing;

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
