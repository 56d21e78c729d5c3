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

}  // namespace
}  // namespace shardtrain
