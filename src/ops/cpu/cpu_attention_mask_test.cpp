// The CPU reference's attention under an AttentionMask with a sliding window (forward against a
// naive windowed softmax, backward against finite differences), the window that masks nothing
// being the causal mask bit for bit, and a frozen linear (undefined dweight) computing dx only.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/host_buffer.h"
#include "ops/attention_mask.h"
#include "ops/cpu/cpu_ops.h"

namespace shardtrain {
namespace {

constexpr int64_t B = 2, T = 7, H = 4, K = 2, D = 8;

std::vector<float> random_values(size_t count, uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> value(-1.5f, 1.5f);
  std::vector<float> values(count);
  for (float& v : values) v = value(generator);
  return values;
}

HostTensor filled(Shape shape, uint32_t seed) {
  HostTensor t(DType::kF32, shape);
  const std::vector<float> values = random_values(shape.numel(), seed);
  std::copy(values.begin(), values.end(), t.tensor.f32());
  return t;
}

struct Inputs {
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  HostTensor q = filled({B, T, H, D}, 1), k = filled({B, T, K, D}, 2), v = filled({B, T, K, D}, 3);
  HostTensor out{DType::kF32, {B, T, H, D}}, lse{DType::kF32, {B, H, T}};
};

TEST(AttentionMaskTest, WindowCoveringTheSequenceIsCausal) {
  EXPECT_TRUE(AttentionMask::sliding_window(0, 16).is_causal_only());
  EXPECT_TRUE(AttentionMask::sliding_window(16, 16).is_causal_only());
  EXPECT_TRUE(AttentionMask::sliding_window(4096, 16).is_causal_only());
  const AttentionMask window = AttentionMask::sliding_window(6, 16);
  EXPECT_EQ(window.window, 6);
  EXPECT_EQ(window.first_key(0), 0);
  EXPECT_EQ(window.first_key(5), 0);  // keys 0..5: six of them
  EXPECT_EQ(window.first_key(6), 1);  // keys 1..6
  EXPECT_EQ(window.first_key(15), 10);
  EXPECT_EQ(AttentionMask::causal().first_key(15), 0);
}

TEST(CpuAttentionMaskTest, WindowedForwardMatchesNaiveSoftmaxOverTheWindow) {
  CpuOps ops;
  Inputs in;
  const int64_t window = 3;
  ops.attention_forward(in.q.tensor, in.k.tensor, in.v.tensor, in.scale, in.out.tensor,
                        in.lse.tensor, AttentionMask::sliding_window(window, T));
  const float *q = in.q.tensor.f32(), *k = in.k.tensor.f32(), *v = in.v.tensor.f32();
  double worst = 0;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t kv = h / (H / K);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t first = std::max<int64_t>(0, i - window + 1);
        std::vector<double> score(T, 0.0);
        double max_score = -1e300, total = 0;
        for (int64_t j = first; j <= i; ++j) {
          for (int64_t d = 0; d < D; ++d) {
            score[j] +=
                double{q[((b * T + i) * H + h) * D + d]} * k[((b * T + j) * K + kv) * D + d];
          }
          score[j] *= in.scale;
          max_score = std::max(max_score, score[j]);
        }
        for (int64_t j = first; j <= i; ++j) total += std::exp(score[j] - max_score);
        const double lse = max_score + std::log(total);
        worst = std::max(worst, std::abs(lse - in.lse.tensor.f32()[(b * H + h) * T + i]));
        for (int64_t d = 0; d < D; ++d) {
          double want = 0;
          for (int64_t j = first; j <= i; ++j) {
            want += std::exp(score[j] - lse) * v[((b * T + j) * K + kv) * D + d];
          }
          const float got = in.out.tensor.f32()[((b * T + i) * H + h) * D + d];
          worst = std::max(worst, std::abs(want - got));
        }
      }
    }
  }
  EXPECT_LT(worst, 1e-5);
  // A different answer from plain causal attention once a query's window drops keys.
  Inputs causal;
  ops.attention_forward(causal.q.tensor, causal.k.tensor, causal.v.tensor, causal.scale,
                        causal.out.tensor, causal.lse.tensor);
  const int64_t last = ((0 * T + (T - 1)) * H + 0) * D;
  EXPECT_GT(std::abs(causal.out.tensor.f32()[last] - in.out.tensor.f32()[last]), 1e-4);
  const int64_t within = ((0 * T + (window - 1)) * H + 0) * D;  // sees all its keys either way
  EXPECT_EQ(causal.out.tensor.f32()[within], in.out.tensor.f32()[within]);
}

TEST(CpuAttentionMaskTest, WindowedBackwardMatchesFiniteDifferences) {
  CpuOps ops;
  Inputs in;
  const AttentionMask mask = AttentionMask::sliding_window(3, T);
  const std::vector<float> weights = random_values(B * T * H * D, 4);
  const auto loss = [&] {
    ops.attention_forward(in.q.tensor, in.k.tensor, in.v.tensor, in.scale, in.out.tensor,
                          in.lse.tensor, mask);
    double total = 0;
    for (int64_t i = 0; i < in.out.tensor.numel(); ++i)
      total += in.out.tensor.f32()[i] * weights[i];
    return total;
  };
  loss();
  HostTensor dout(DType::kF32, {B, T, H, D});
  std::copy(weights.begin(), weights.end(), dout.tensor.f32());
  HostTensor dq = filled({B, T, H, D}, 5), dk = filled({B, T, K, D}, 6),
             dv = filled({B, T, K, D}, 7);
  ops.attention_backward(dout.tensor, in.q.tensor, in.k.tensor, in.v.tensor, in.out.tensor,
                         in.lse.tensor, in.scale, dq.tensor, dk.tensor, dv.tensor, mask);
  for (auto [input, grad, name] :
       {std::tuple{&in.q, &dq, "dq"}, std::tuple{&in.k, &dk, "dk"}, std::tuple{&in.v, &dv, "dv"}}) {
    SCOPED_TRACE(name);
    float* x = input->tensor.f32();
    double worst = 0, largest = 0;
    for (int64_t i = 0; i < input->tensor.numel(); ++i) {
      const float saved = x[i];
      x[i] = saved + 1e-2f;
      const double plus = loss();
      x[i] = saved - 1e-2f;
      const double minus = loss();
      x[i] = saved;
      const double numeric = (plus - minus) / (double{saved + 1e-2f} - double{saved - 1e-2f});
      worst = std::max(worst, std::abs(numeric - grad->tensor.f32()[i]));
      largest = std::max(largest, std::abs(numeric));
    }
    EXPECT_GT(largest, 0.1);
    EXPECT_LT(worst, 2e-2 * largest);
  }
  // Key 0 is outside the window of queries 3..6 of every head: only queries 0..2 reach it, so
  // with dout zero on those rows its gradients vanish exactly.
  std::fill(dout.tensor.f32(), dout.tensor.f32() + dout.tensor.numel(), 0.0f);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 3; i < T; ++i) {
      std::fill_n(dout.tensor.f32() + (b * T + i) * H * D, H * D, 1.0f);
    }
  }
  ops.attention_backward(dout.tensor, in.q.tensor, in.k.tensor, in.v.tensor, in.out.tensor,
                         in.lse.tensor, in.scale, dq.tensor, dk.tensor, dv.tensor, mask);
  for (int64_t d = 0; d < K * D; ++d) {
    EXPECT_EQ(dk.tensor.f32()[d], 0.0f);
    EXPECT_EQ(dv.tensor.f32()[d], 0.0f);
  }
}

TEST(CpuAttentionMaskTest, FrozenLinearComputesDxOnly) {
  CpuOps ops;
  const int64_t N = 3, I = 4, O = 5;
  HostTensor x = filled({N, I}, 8), w = filled({O, I}, 9), dout = filled({N, O}, 10);
  HostTensor dx_frozen(DType::kF32, {N, I}), dx(DType::kF32, {N, I});
  HostTensor dw(DType::kF32, {O, I});
  ops.linear_backward(dout.tensor, x.tensor, w.tensor, dx_frozen.tensor, Tensor(), Tensor(), false,
                      false);
  ops.linear_backward(dout.tensor, x.tensor, w.tensor, dx.tensor, dw.tensor, Tensor(), false,
                      false);
  for (int64_t i = 0; i < N * I; ++i) EXPECT_EQ(dx_frozen.tensor.f32()[i], dx.tensor.f32()[i]);
  double dx00 = 0;
  for (int64_t o = 0; o < O; ++o) dx00 += double{dout.tensor.f32()[o]} * w.tensor.f32()[o * I];
  EXPECT_NEAR(dx_frozen.tensor.f32()[0], dx00, 1e-5);
}

}  // namespace
}  // namespace shardtrain
