// Test support for the CpuOps tests (ops/cpu/*_test.cpp): random inputs, host tensors, and the
// two checks every test uses. Every backward is checked against central finite differences of
// L = sum(out * R) for a fixed random R (L evaluated in double from the fp32 outputs); forwards
// are checked against direct double-precision evaluations of the defining formulas.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "core/host_buffer.h"
#include "ops/cpu/cpu_ops.h"

namespace shardtrain::cpu_testing {

// Random values in ±[0.2, 1.0] * magnitude: never zero, both signs.
inline std::vector<float> random_values(size_t count, uint32_t seed, float magnitude = 1.0f) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> size(0.2f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<float> values(count);
  for (float& value : values)
    value = (negative(generator) ? -1.0f : 1.0f) * size(generator) * magnitude;
  return values;
}

// A host tensor filled from `values`.
inline HostTensor make_tensor(Shape shape, const std::vector<float>& values) {
  HostTensor tensor(DType::kF32, shape);
  EXPECT_EQ(static_cast<size_t>(tensor.tensor.numel()), values.size());
  std::copy(values.begin(), values.end(), tensor.tensor.f32());
  return tensor;
}

inline HostTensor make_ids(Shape shape, const std::vector<int32_t>& values) {
  HostTensor tensor(DType::kI32, shape);
  std::copy(values.begin(), values.end(), tensor.tensor.i32());
  return tensor;
}

inline std::vector<float> to_vector(const Tensor& tensor) {
  return std::vector<float>(tensor.f32(), tensor.f32() + tensor.numel());
}

// sum(out * weights) in double.
inline double weighted_sum(const Tensor& out, const std::vector<float>& weights) {
  double total = 0;
  for (int64_t i = 0; i < out.numel(); ++i) total += static_cast<double>(out.f32()[i]) * weights[i];
  return total;
}

// Compares `analytic` with central differences of `loss` with respect to the `count` floats at
// `input`: ||analytic - numeric|| <= 1e-2 ||numeric|| and every element within 2e-2 max|numeric|.
inline void expect_matches_finite_differences(float* input, const std::vector<float>& analytic,
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

inline void expect_close(const std::vector<float>& actual, const std::vector<double>& expected,
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

}  // namespace shardtrain::cpu_testing
