// The CPU reference's ops for Gemma 3 where the transformers fixture (tests/golden/gemma3_text)
// does not reach: attention with soft-capped scores (attn_logit_softcapping; the published
// Gemma 3 configs leave it null) forward against a naive capped softmax and backward against
// finite differences, with and without a window; and the elementwise ops' backward (GeGLU,
// soft-capping, RMSNorm with 1 + weight) against finite differences of their forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <tuple>
#include <vector>

#include "core/host_buffer.h"
#include "ops/attention_mask.h"
#include "ops/cpu/cpu_ops.h"

namespace shardtrain {
namespace {

constexpr int64_t B = 2, T = 7, H = 4, K = 2, D = 8;
constexpr float kCap = 1.5f;  // small, so the cap bends the scores a lot

HostTensor filled(Shape shape, uint32_t seed, float low = -1.5f, float high = 1.5f) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> value(low, high);
  HostTensor t(DType::kF32, shape);
  for (int64_t i = 0; i < t.tensor.numel(); ++i) t.tensor.f32()[i] = value(generator);
  return t;
}

// max |numeric - analytic| / max |numeric| over every element of `input`, where numeric is the
// central difference of loss() and analytic is `grad` (computed before the call).
double finite_difference_error(HostTensor& input, const HostTensor& grad,
                               const std::function<double()>& loss, float step = 1e-2f) {
  float* x = input.tensor.f32();
  double worst = 0, largest = 0;
  for (int64_t i = 0; i < input.tensor.numel(); ++i) {
    const float saved = x[i];
    x[i] = saved + step;
    const double plus = loss();
    x[i] = saved - step;
    const double minus = loss();
    x[i] = saved;
    const double numeric = (plus - minus) / (double{saved + step} - double{saved - step});
    worst = std::max(worst, std::abs(numeric - grad.tensor.f32()[i]));
    largest = std::max(largest, std::abs(numeric));
  }
  EXPECT_GT(largest, 0.05);
  return worst / largest;
}

struct AttentionInputs {
  const float scale = 1.0f;  // large scores: the cap matters
  HostTensor q = filled({B, T, H, D}, 1), k = filled({B, T, K, D}, 2), v = filled({B, T, K, D}, 3);
  HostTensor out{DType::kF32, {B, T, H, D}}, lse{DType::kF32, {B, H, T}};
};

AttentionMask capped(int64_t window) {
  AttentionMask mask = AttentionMask::sliding_window(window, T);
  mask.logit_softcap = kCap;
  return mask;
}

TEST(CpuSoftcapAttentionTest, ForwardIsTheSoftmaxOfCappedScores) {
  for (const int64_t window : {int64_t{0}, int64_t{3}}) {
    SCOPED_TRACE(window);
    CpuOps ops;
    AttentionInputs in;
    const AttentionMask mask = capped(window);
    ops.attention_forward(in.q.tensor, in.k.tensor, in.v.tensor, in.scale, in.out.tensor,
                          in.lse.tensor, mask);
    const float *q = in.q.tensor.f32(), *k = in.k.tensor.f32(), *v = in.v.tensor.f32();
    double worst = 0;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kv = h / (H / K);
        for (int64_t i = 0; i < T; ++i) {
          const int64_t first = mask.first_key(i);
          std::vector<double> score(T, 0.0);
          double total = 0;
          for (int64_t j = first; j <= i; ++j) {
            for (int64_t d = 0; d < D; ++d) {
              score[j] +=
                  double{q[((b * T + i) * H + h) * D + d]} * k[((b * T + j) * K + kv) * D + d];
            }
            score[j] = kCap * std::tanh(score[j] * in.scale / kCap);
            total += std::exp(score[j]);
          }
          const double lse = std::log(total);
          worst = std::max(worst, std::abs(lse - in.lse.tensor.f32()[(b * H + h) * T + i]));
          for (int64_t d = 0; d < D; ++d) {
            double want = 0;
            for (int64_t j = first; j <= i; ++j) {
              want += std::exp(score[j] - lse) * v[((b * T + j) * K + kv) * D + d];
            }
            worst = std::max(worst,
                             std::abs(want - in.out.tensor.f32()[((b * T + i) * H + h) * D + d]));
          }
        }
      }
    }
    EXPECT_LT(worst, 1e-5);
  }
}

TEST(CpuSoftcapAttentionTest, BackwardMatchesFiniteDifferences) {
  for (const int64_t window : {int64_t{0}, int64_t{3}}) {
    SCOPED_TRACE(window);
    CpuOps ops;
    AttentionInputs in;
    const AttentionMask mask = capped(window);
    const HostTensor weights = filled({B, T, H, D}, 4);
    const auto loss = [&] {
      ops.attention_forward(in.q.tensor, in.k.tensor, in.v.tensor, in.scale, in.out.tensor,
                            in.lse.tensor, mask);
      double total = 0;
      for (int64_t i = 0; i < in.out.tensor.numel(); ++i)
        total += double{in.out.tensor.f32()[i]} * weights.tensor.f32()[i];
      return total;
    };
    loss();
    HostTensor dq{DType::kF32, {B, T, H, D}}, dk{DType::kF32, {B, T, K, D}},
        dv{DType::kF32, {B, T, K, D}};
    ops.attention_backward(weights.tensor, in.q.tensor, in.k.tensor, in.v.tensor, in.out.tensor,
                           in.lse.tensor, in.scale, dq.tensor, dk.tensor, dv.tensor, mask);
    for (auto [input, grad, name] : {std::tuple{&in.q, &dq, "dq"}, std::tuple{&in.k, &dk, "dk"},
                                     std::tuple{&in.v, &dv, "dv"}}) {
      SCOPED_TRACE(name);
      EXPECT_LT(finite_difference_error(*input, *grad, loss), 2e-2);
    }
  }
}

// sum(out * weights) for an op out = f(inputs); its gradients come from the op's backward.
double weighted_sum(const HostTensor& out, const HostTensor& weights) {
  double total = 0;
  for (int64_t i = 0; i < out.tensor.numel(); ++i)
    total += double{out.tensor.f32()[i]} * weights.tensor.f32()[i];
  return total;
}

TEST(CpuGemmaOpsTest, GegluBackwardMatchesFiniteDifferences) {
  CpuOps ops;
  const Shape shape{5, 12};
  HostTensor gate = filled(shape, 1, -4, 4), up = filled(shape, 2), out(DType::kF32, shape);
  const HostTensor dout = filled(shape, 3);
  const auto loss = [&] {
    ops.geglu_forward(gate.tensor, up.tensor, out.tensor);
    return weighted_sum(out, dout);
  };
  // gelu_tanh(1) = 0.8411920; times up.
  HostTensor one(DType::kF32, {1}), x1(DType::kF32, {1}), y1(DType::kF32, {1});
  one.tensor.f32()[0] = 1.0f;
  x1.tensor.f32()[0] = 1.0f;
  ops.geglu_forward(x1.tensor, one.tensor, y1.tensor);
  EXPECT_NEAR(y1.tensor.f32()[0], 0.8411920, 1e-6);
  HostTensor dgate(DType::kF32, shape), dup(DType::kF32, shape);
  ops.geglu_backward(dout.tensor, gate.tensor, up.tensor, dgate.tensor, dup.tensor);
  EXPECT_LT(finite_difference_error(gate, dgate, loss, 1e-3f), 1e-3);
  EXPECT_LT(finite_difference_error(up, dup, loss, 1e-3f), 1e-3);
}

TEST(CpuGemmaOpsTest, SoftcapForwardAndBackward) {
  CpuOps ops;
  const Shape shape{3, 40};
  HostTensor x = filled(shape, 1, -90, 90), out(DType::kF32, shape);
  const HostTensor dout = filled(shape, 2);
  ops.softcap_forward(x.tensor, 30.0f, out.tensor);
  for (int64_t i = 0; i < x.tensor.numel(); ++i) {
    EXPECT_LT(std::abs(out.tensor.f32()[i]), 30.0f);
    EXPECT_NEAR(out.tensor.f32()[i], 30.0 * std::tanh(x.tensor.f32()[i] / 30.0), 1e-4);
  }
  HostTensor dx(DType::kF32, shape);
  ops.softcap_backward(dout.tensor, x.tensor, 30.0f, dx.tensor);
  const auto loss = [&] {
    ops.softcap_forward(x.tensor, 30.0f, out.tensor);
    return weighted_sum(out, dout);
  };
  EXPECT_LT(finite_difference_error(x, dx, loss), 1e-3);
}

TEST(CpuGemmaOpsTest, RmsNorm1pIsRmsNormWithOnePlusWeight) {
  CpuOps ops;
  const int64_t rows = 6, C = 16;
  HostTensor x = filled({rows, C}, 1), w = filled({C}, 2, -0.5f, 0.5f);
  HostTensor w_plus_one(DType::kF32, {C});
  for (int64_t c = 0; c < C; ++c) w_plus_one.tensor.f32()[c] = 1.0f + w.tensor.f32()[c];
  HostTensor out(DType::kF32, {rows, C}), rstd(DType::kF32, {rows});
  HostTensor want(DType::kF32, {rows, C}), want_rstd(DType::kF32, {rows});
  ops.rmsnorm1p_forward(x.tensor, w.tensor, 1e-6f, out.tensor, rstd.tensor);
  ops.rmsnorm_forward(x.tensor, w_plus_one.tensor, 1e-6f, want.tensor, want_rstd.tensor);
  for (int64_t i = 0; i < rows * C; ++i) EXPECT_FLOAT_EQ(out.tensor.f32()[i], want.tensor.f32()[i]);
  // Backward: dx against finite differences; dweight is d/dw of (1 + w), as for the plain norm.
  const HostTensor dout = filled({rows, C}, 3);
  HostTensor dx(DType::kF32, {rows, C}), dw(DType::kF32, {C});
  ops.rmsnorm1p_backward(dout.tensor, x.tensor, w.tensor, rstd.tensor, dx.tensor, dw.tensor, false,
                         false);
  const auto loss = [&] {
    ops.rmsnorm1p_forward(x.tensor, w.tensor, 1e-6f, out.tensor, rstd.tensor);
    return weighted_sum(out, dout);
  };
  EXPECT_LT(finite_difference_error(x, dx, loss, 1e-3f), 1e-3);
  EXPECT_LT(finite_difference_error(w, dw, loss, 1e-3f), 1e-3);
}

}  // namespace
}  // namespace shardtrain
