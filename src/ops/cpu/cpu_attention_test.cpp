// Tests for CpuOps' RoPE, packed q/k/v and causal GQA attention (checks:
// ops/cpu/testing/cpu_ops_checks.h): forwards against the defining formulas in double,
// backwards against finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "core/host_buffer.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cpu/testing/cpu_ops_checks.h"
#include "ops/device_buffer.h"

namespace shardtrain {
namespace {

using namespace cpu_testing;

class CpuOpsTest : public ::testing::Test {
 protected:
  CpuOps ops;
};

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

// The packed row's q and k heads rotated by the rotate-half formula (in double), v copied; position
// 0 is the identity.
TEST_F(CpuOpsTest, SplitQkvRopeMatchesRotateHalfFormula) {
  RopeFixture rope;
  const int64_t N = RopeFixture::kTokens, D = RopeFixture::kHeadDim, H = RopeFixture::kHeads, K = 1;
  const int64_t half = RopeFixture::kHalf, row = (H + 2 * K) * D;
  const std::vector<float> packed = random_values(N * row, 17);
  std::vector<double> q_want(N * H * D), k_want(N * K * D);
  std::vector<float> v_want(N * K * D);
  for (int64_t n = 0; n < N; ++n) {
    const int32_t p = rope.positions.tensor.i32()[n];
    for (int64_t head = 0; head < H + K; ++head) {
      const float* x = packed.data() + n * row + head * D;
      double* out = head < H ? &q_want[(n * H + head) * D] : &k_want[(n * K + head - H) * D];
      for (int64_t i = 0; i < half; ++i) {
        const double angle = p * std::pow(10000.0, -2.0 * i / D);
        out[i] = x[i] * std::cos(angle) - x[i + half] * std::sin(angle);
        out[i + half] = x[i + half] * std::cos(angle) + x[i] * std::sin(angle);
      }
    }
    std::copy(packed.begin() + n * row + (H + K) * D, packed.begin() + (n + 1) * row,
              v_want.begin() + n * K * D);
  }
  const HostTensor qkv = make_tensor({N, row}, packed);
  HostTensor q{DType::kF32, {N, H, D}}, k{DType::kF32, {N, K, D}}, v{DType::kF32, {N, K, D}};
  ops.split_qkv_rope(qkv.tensor, rope.positions.tensor, rope.cos_table.tensor,
                     rope.sin_table.tensor, q.tensor, k.tensor, v.tensor);
  expect_close(to_vector(q.tensor), q_want, 1e-6, "q");
  expect_close(to_vector(k.tensor), k_want, 1e-6, "k");
  EXPECT_EQ(to_vector(v.tensor), v_want);
  for (int64_t d = 0; d < H * D; ++d) EXPECT_EQ(q.tensor.f32()[d], packed[d]) << "position 0";
}

// pack_qkv_rope_backward is split_qkv_rope's gradient: finite differences of
// L = sum(q Rq) + sum(k Rk) + sum(v Rv) over the packed input; dq, dk, dv are left unchanged.
TEST_F(CpuOpsTest, PackQkvRopeBackwardMatchesFiniteDifferences) {
  RopeFixture rope;
  const int64_t N = RopeFixture::kTokens, D = RopeFixture::kHeadDim, H = RopeFixture::kHeads, K = 1;
  const int64_t row = (H + 2 * K) * D;
  HostTensor qkv = make_tensor({N, row}, random_values(N * row, 21));
  HostTensor dq = make_tensor({N, H, D}, random_values(N * H * D, 18));
  HostTensor dk = make_tensor({N, K, D}, random_values(N * K * D, 19));
  HostTensor dv = make_tensor({N, K, D}, random_values(N * K * D, 20));
  const std::vector<float> dq_before = to_vector(dq.tensor), dk_before = to_vector(dk.tensor);
  HostTensor dqkv{DType::kF32, {N, row}};
  ops.pack_qkv_rope_backward(dq.tensor, dk.tensor, dv.tensor, rope.positions.tensor,
                             rope.cos_table.tensor, rope.sin_table.tensor, dqkv.tensor);
  EXPECT_EQ(to_vector(dq.tensor), dq_before) << "inputs are left unchanged";
  EXPECT_EQ(to_vector(dk.tensor), dk_before);
  HostTensor q{DType::kF32, {N, H, D}}, k{DType::kF32, {N, K, D}}, v{DType::kF32, {N, K, D}};
  const auto loss = [&] {
    ops.split_qkv_rope(qkv.tensor, rope.positions.tensor, rope.cos_table.tensor,
                       rope.sin_table.tensor, q.tensor, k.tensor, v.tensor);
    return weighted_sum(q.tensor, dq_before) + weighted_sum(k.tensor, dk_before) +
           weighted_sum(v.tensor, to_vector(dv.tensor));
  };
  expect_matches_finite_differences(qkv.tensor.f32(), to_vector(dqkv.tensor), loss, 1e-2f, "dqkv");
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

}  // namespace
}  // namespace shardtrain
