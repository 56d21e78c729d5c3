// The CPU reference's attention with packed documents (AttentionMask::document_start_BT): every
// document of a packed sequence gets, forward and backward, what it gets as a sequence of its
// own (alone, with and without a sliding window), so nothing flows across a boundary.
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

constexpr int64_t B = 2, T = 9, H = 4, K = 2, D = 8;
// Row 0: documents [0, 4) and [4, 9); row 1: [0, 2), [2, 5) and [5, 9).
const std::vector<std::vector<int64_t>> kStarts = {{0, 4}, {0, 2, 5}};

HostTensor random_tensor(Shape shape, uint32_t seed) {
  HostTensor t(DType::kF32, shape);
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> value(-1.5f, 1.5f);
  for (int64_t i = 0; i < t.tensor.numel(); ++i) t.tensor.f32()[i] = value(generator);
  return t;
}

// Rows [begin, begin + length) of sequence b of a [B, T, heads, D] tensor, as [1, length, ...].
HostTensor slice(const HostTensor& x, int64_t b, int64_t begin, int64_t length) {
  const int64_t heads = x.tensor.dim(2);
  HostTensor out(DType::kF32, {1, length, heads, D});
  std::copy_n(x.tensor.f32() + (b * T + begin) * heads * D, length * heads * D, out.tensor.f32());
  return out;
}

// max |a - b| over `count` values of two arrays, relative to max |b|.
double relative_error(const float* a, const float* b, int64_t count) {
  double diff = 0, scale = 0;
  for (int64_t i = 0; i < count; ++i) {
    diff = std::max(diff, std::abs(double{a[i]} - b[i]));
    scale = std::max(scale, std::abs(double{b[i]}));
  }
  return diff / scale;
}

void expect_documents_match_alone(int64_t window) {
  CpuOps ops;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const HostTensor q = random_tensor({B, T, H, D}, 1), k = random_tensor({B, T, K, D}, 2),
                   v = random_tensor({B, T, K, D}, 3), dout = random_tensor({B, T, H, D}, 4);
  HostTensor starts(DType::kI32, {B, T});
  for (int64_t b = 0; b < B; ++b) {
    for (size_t d = 0; d < kStarts[b].size(); ++d) {
      const int64_t end = d + 1 < kStarts[b].size() ? kStarts[b][d + 1] : T;
      std::fill(starts.tensor.i32() + b * T + kStarts[b][d], starts.tensor.i32() + b * T + end,
                static_cast<int32_t>(kStarts[b][d]));
    }
  }
  AttentionMask mask;
  mask.window = window;
  mask.document_start_BT = starts.tensor;
  ASSERT_FALSE(mask.is_causal_only());
  HostTensor out(DType::kF32, {B, T, H, D}), lse(DType::kF32, {B, H, T});
  HostTensor dq(DType::kF32, {B, T, H, D}), dk(DType::kF32, {B, T, K, D}),
      dv(DType::kF32, {B, T, K, D});
  ops.attention_forward(q.tensor, k.tensor, v.tensor, scale, out.tensor, lse.tensor, mask);
  ops.attention_backward(dout.tensor, q.tensor, k.tensor, v.tensor, out.tensor, lse.tensor, scale,
                         dq.tensor, dk.tensor, dv.tensor, mask);

  for (int64_t b = 0; b < B; ++b) {
    for (size_t d = 0; d < kStarts[b].size(); ++d) {
      const int64_t begin = kStarts[b][d];
      const int64_t length = (d + 1 < kStarts[b].size() ? kStarts[b][d + 1] : T) - begin;
      SCOPED_TRACE(::testing::Message() << "sequence " << b << " document at " << begin);
      const HostTensor q1 = slice(q, b, begin, length), k1 = slice(k, b, begin, length),
                       v1 = slice(v, b, begin, length), dout1 = slice(dout, b, begin, length);
      HostTensor out1(DType::kF32, {1, length, H, D}), lse1(DType::kF32, {1, H, length});
      HostTensor dq1(DType::kF32, {1, length, H, D}), dk1(DType::kF32, {1, length, K, D}),
          dv1(DType::kF32, {1, length, K, D});
      const AttentionMask alone = AttentionMask::sliding_window(window, length);
      ops.attention_forward(q1.tensor, k1.tensor, v1.tensor, scale, out1.tensor, lse1.tensor,
                            alone);
      ops.attention_backward(dout1.tensor, q1.tensor, k1.tensor, v1.tensor, out1.tensor,
                             lse1.tensor, scale, dq1.tensor, dk1.tensor, dv1.tensor, alone);
      const int64_t q_offset = (b * T + begin) * H * D, kv_offset = (b * T + begin) * K * D;
      EXPECT_LT(relative_error(out.tensor.f32() + q_offset, out1.tensor.f32(), length * H * D),
                1e-6);
      EXPECT_LT(relative_error(dq.tensor.f32() + q_offset, dq1.tensor.f32(), length * H * D), 1e-5);
      EXPECT_LT(relative_error(dk.tensor.f32() + kv_offset, dk1.tensor.f32(), length * K * D),
                1e-5);
      EXPECT_LT(relative_error(dv.tensor.f32() + kv_offset, dv1.tensor.f32(), length * K * D),
                1e-5);
      for (int64_t h = 0; h < H; ++h) {
        for (int64_t t = 0; t < length; ++t) {
          EXPECT_NEAR(lse.tensor.f32()[(b * H + h) * T + begin + t],
                      lse1.tensor.f32()[h * length + t], 1e-5);
        }
      }
    }
  }
}

TEST(CpuAttentionDocumentsTest, EachDocumentGetsWhatItGetsAlone) {
  expect_documents_match_alone(/*window=*/0);
}

TEST(CpuAttentionDocumentsTest, WithASlidingWindowToo) {
  expect_documents_match_alone(/*window=*/3);
}

TEST(CpuAttentionDocumentsTest, MaskBoundsCombineWindowAndDocument) {
  AttentionMask mask;
  mask.window = 3;
  EXPECT_EQ(mask.first_key(7, 2), 5) << "the window is the tighter bound";
  EXPECT_EQ(mask.first_key(7, 6), 6) << "the document is";
  EXPECT_EQ(AttentionMask::causal().first_key(7, 4), 4);
  EXPECT_TRUE(AttentionMask::causal().is_causal_only());
  EXPECT_FALSE(AttentionMask::causal().has_documents());
}

}  // namespace
}  // namespace shardtrain
