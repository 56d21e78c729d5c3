// Tests for CpuOps' per-head q/k norms fused with the packed split and rope (ops/ops.h
// split_qkv_norm_rope, qk_norm_rope, pack_qkv_norm_rope_backward): the forward against the
// defining formula in double (RMSNorm of each head row, then the rotate-half rotation), with
// the weight and with Gemma's 1 + weight; the backward against finite differences of the
// forward, for the packed input and both norm weights, overwriting and accumulating.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/host_buffer.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/testing/cpu_ops_checks.h"

namespace shardtrain {
namespace {

using namespace cpu_testing;

constexpr int64_t kTokens = 4, kHeads = 3, kKvHeads = 1, kHeadDim = 8, kHalf = 4, kPositions = 10;
constexpr int64_t kRow = (kHeads + 2 * kKvHeads) * kHeadDim;
constexpr float kEps = 1e-6f;

double angle(int32_t position, int64_t i) {
  return position * std::pow(10000.0, -2.0 * i / kHeadDim);
}

class CpuQkNormRopeTest : public CpuOpsTest, public ::testing::WithParamInterface<bool> {
 protected:
  CpuQkNormRopeTest() {
    for (int64_t p = 0; p < kPositions; ++p) {
      for (int64_t i = 0; i < kHalf; ++i) {
        cos_table.tensor.f32()[p * kHalf + i] = static_cast<float>(std::cos(angle(p, i)));
        sin_table.tensor.f32()[p * kHalf + i] = static_cast<float>(std::sin(angle(p, i)));
      }
    }
  }
  QkNorm norm() { return QkNorm{q_weight.tensor, k_weight.tensor, kEps, GetParam()}; }
  void split(const Tensor& qkv) {
    ops.split_qkv_norm_rope(qkv, norm(), positions.tensor, cos_table.tensor, sin_table.tensor,
                            q_raw.tensor, k_raw.tensor, v.tensor, q.tensor, k.tensor);
  }

  HostTensor positions = make_ids({kTokens}, {0, 7, 2, 9});
  HostTensor cos_table{DType::kF32, {kPositions, kHalf}};
  HostTensor sin_table{DType::kF32, {kPositions, kHalf}};
  HostTensor q_weight = make_tensor({kHeadDim}, random_values(kHeadDim, 31));
  HostTensor k_weight = make_tensor({kHeadDim}, random_values(kHeadDim, 32));
  HostTensor qkv = make_tensor({kTokens, kRow}, random_values(kTokens* kRow, 33, 2.0f));
  HostTensor q_raw{DType::kF32, {kTokens, kHeads, kHeadDim}};
  HostTensor k_raw{DType::kF32, {kTokens, kKvHeads, kHeadDim}};
  HostTensor v{DType::kF32, {kTokens, kKvHeads, kHeadDim}};
  HostTensor q{DType::kF32, {kTokens, kHeads, kHeadDim}};
  HostTensor k{DType::kF32, {kTokens, kKvHeads, kHeadDim}};
};

TEST_P(CpuQkNormRopeTest, ForwardMatchesNormThenRotateHalf) {
  const bool one_plus = GetParam();
  split(qkv.tensor);
  const std::vector<float> packed = to_vector(qkv.tensor);
  std::vector<double> q_want(kTokens * kHeads * kHeadDim), k_want(kTokens * kKvHeads * kHeadDim);
  std::vector<float> q_raw_want, k_raw_want, v_want;
  for (int64_t n = 0; n < kTokens; ++n) {
    const int32_t p = positions.tensor.i32()[n];
    for (int64_t head = 0; head < kHeads + 2 * kKvHeads; ++head) {
      const float* x = packed.data() + n * kRow + head * kHeadDim;
      std::vector<float>& raw = head < kHeads              ? q_raw_want
                                : head < kHeads + kKvHeads ? k_raw_want
                                                           : v_want;
      raw.insert(raw.end(), x, x + kHeadDim);
      if (head >= kHeads + kKvHeads) continue;
      const float* weight = head < kHeads ? q_weight.tensor.f32() : k_weight.tensor.f32();
      double sum_squares = 0;
      for (int64_t c = 0; c < kHeadDim; ++c) sum_squares += double{x[c]} * x[c];
      const double r = 1.0 / std::sqrt(sum_squares / kHeadDim + kEps);
      double y[kHeadDim];
      for (int64_t c = 0; c < kHeadDim; ++c) y[c] = x[c] * r * (weight[c] + (one_plus ? 1 : 0));
      double* out = head < kHeads ? &q_want[(n * kHeads + head) * kHeadDim]
                                  : &k_want[(n * kKvHeads + head - kHeads) * kHeadDim];
      for (int64_t i = 0; i < kHalf; ++i) {
        const double c = std::cos(angle(p, i)), s = std::sin(angle(p, i));
        out[i] = y[i] * c - y[i + kHalf] * s;
        out[i + kHalf] = y[i + kHalf] * c + y[i] * s;
      }
    }
  }
  expect_close(to_vector(q.tensor), q_want, 1e-6, "q");
  expect_close(to_vector(k.tensor), k_want, 1e-6, "k");
  EXPECT_EQ(to_vector(q_raw.tensor), q_raw_want);
  EXPECT_EQ(to_vector(k_raw.tensor), k_raw_want);
  EXPECT_EQ(to_vector(v.tensor), v_want);

  // The backward's remake from q_raw and k_raw is the forward's, bit for bit.
  HostTensor q_again{DType::kF32, {kTokens, kHeads, kHeadDim}};
  HostTensor k_again{DType::kF32, {kTokens, kKvHeads, kHeadDim}};
  ops.qk_norm_rope(q_raw.tensor, k_raw.tensor, norm(), positions.tensor, cos_table.tensor,
                   sin_table.tensor, q_again.tensor, k_again.tensor);
  EXPECT_EQ(to_vector(q_again.tensor), to_vector(q.tensor));
  EXPECT_EQ(to_vector(k_again.tensor), to_vector(k.tensor));
}

TEST_P(CpuQkNormRopeTest, BackwardMatchesFiniteDifferences) {
  split(qkv.tensor);
  const std::vector<float> rq = random_values(kTokens * kHeads * kHeadDim, 34);
  const std::vector<float> rk = random_values(kTokens * kKvHeads * kHeadDim, 35);
  const std::vector<float> rv = random_values(kTokens * kKvHeads * kHeadDim, 36);
  HostTensor dq = make_tensor({kTokens, kHeads, kHeadDim}, rq);
  HostTensor dk = make_tensor({kTokens, kKvHeads, kHeadDim}, rk);
  HostTensor dv = make_tensor({kTokens, kKvHeads, kHeadDim}, rv);
  HostTensor dqkv{DType::kF32, {kTokens, kRow}};
  const std::vector<float> dq_weight_before = random_values(kHeadDim, 37);
  const std::vector<float> dk_weight_before = random_values(kHeadDim, 38);
  HostTensor dq_weight = make_tensor({kHeadDim}, dq_weight_before);
  HostTensor dk_weight = make_tensor({kHeadDim}, dk_weight_before);
  const auto backward = [&](bool accumulate) {
    ops.pack_qkv_norm_rope_backward(dq.tensor, dk.tensor, dv.tensor, q_raw.tensor, k_raw.tensor,
                                    norm(), positions.tensor, cos_table.tensor, sin_table.tensor,
                                    dq_weight.tensor, dk_weight.tensor, accumulate, dqkv.tensor);
  };
  backward(false);
  EXPECT_EQ(to_vector(dq.tensor), rq) << "inputs are left unchanged";
  EXPECT_EQ(to_vector(dk.tensor), rk);
  HostTensor scratch_qkv = make_tensor({kTokens, kRow}, to_vector(qkv.tensor));
  const auto loss = [&] {
    split(scratch_qkv.tensor);
    return weighted_sum(q.tensor, rq) + weighted_sum(k.tensor, rk) + weighted_sum(v.tensor, rv);
  };
  expect_matches_finite_differences(scratch_qkv.tensor.f32(), to_vector(dqkv.tensor), loss, 1e-2f,
                                    "dqkv");
  expect_matches_finite_differences(q_weight.tensor.f32(), to_vector(dq_weight.tensor), loss, 1e-2f,
                                    "dq_weight");
  expect_matches_finite_differences(k_weight.tensor.f32(), to_vector(dk_weight.tensor), loss, 1e-2f,
                                    "dk_weight");

  // Accumulating adds the same gradients to what the weights' gradients held.
  const std::vector<float> dq_weight_once = to_vector(dq_weight.tensor);
  const std::vector<float> dk_weight_once = to_vector(dk_weight.tensor);
  std::copy(dq_weight_before.begin(), dq_weight_before.end(), dq_weight.tensor.f32());
  std::copy(dk_weight_before.begin(), dk_weight_before.end(), dk_weight.tensor.f32());
  backward(true);
  for (int64_t c = 0; c < kHeadDim; ++c) {
    EXPECT_FLOAT_EQ(dq_weight.tensor.f32()[c], dq_weight_before[c] + dq_weight_once[c]);
    EXPECT_FLOAT_EQ(dk_weight.tensor.f32()[c], dk_weight_before[c] + dk_weight_once[c]);
  }
}

// false: scaled by the weight (Qwen3); true: by 1 + weight (Gemma 3).
INSTANTIATE_TEST_SUITE_P(Weights, CpuQkNormRopeTest, ::testing::Bool());

}  // namespace
}  // namespace shardtrain
