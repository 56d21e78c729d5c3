// The per-head q/k norms fused with the packed split and rope (cuda_qk_norm_rope.cu), CUDA
// against the fp32 CPU reference (ops/cpu/cpu_qk_norm_rope.cpp): the split (copies exact, q and
// k within bf16 tolerance), the backward's remake of q and k (bit for bit the split's), and the
// backward (the packed gradient and both weight gradients, overwritten and accumulated), for
// the 16-byte kernel (head dims 64, 128, 256) and the scalar one (96; f32 activations), with
// the weight (Qwen3) and 1 + weight (Gemma 3), bf16 and f32 weights. DISABLED_Throughput times
// the three ops at Qwen3-1.7B's shape (ops/cuda/NOTES.md). Skips without a GPU (the fixture).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain {
namespace {

using namespace cuda_testing;

struct QkNormCase {
  int64_t tokens, heads, kv_heads, head_dim;
  bool one_plus;
  DType act, weight;
};

void PrintTo(const QkNormCase& c, std::ostream* os) {
  *os << "N=" << c.tokens << " H=" << c.heads << " K=" << c.kv_heads << " D=" << c.head_dim
      << (c.one_plus ? " 1+w" : " w") << " act " << dtype_name(c.act) << " weight "
      << dtype_name(c.weight);
}

class CudaQkNormRopeTest : public CudaOpsTest, public ::testing::WithParamInterface<QkNormCase> {
 protected:
  // Rope tables of `positions` rows for head dim D (theta 1e6, as Qwen3), positions per token.
  void make_rope(int64_t tokens, int64_t head_dim, int64_t positions) {
    const int64_t half = head_dim / 2;
    std::vector<float> cos_values(positions * half), sin_values(positions * half);
    for (int64_t p = 0; p < positions; ++p) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = p * std::pow(1e6, -2.0 * i / head_dim);
        cos_values[p * half + i] = static_cast<float>(std::cos(angle));
        sin_values[p * half + i] = static_cast<float>(std::sin(angle));
      }
    }
    cos_table = input(cos_values, {positions, half}, DType::kF32);
    sin_table = input(sin_values, {positions, half}, DType::kF32);
    std::vector<int32_t> position_values(tokens);
    for (int64_t n = 0; n < tokens; ++n) {
      position_values[n] = static_cast<int32_t>((n * 13) % positions);
    }
    pos = ints(position_values, {tokens});
  }
  QkNorm cpu_norm() const { return {q_weight.cpu, k_weight.cpu, 1e-6f, GetParam().one_plus}; }
  QkNorm gpu_norm() const { return {q_weight.gpu, k_weight.gpu, 1e-6f, GetParam().one_plus}; }

  Pair cos_table, sin_table, pos, q_weight, k_weight;
};

TEST_P(CudaQkNormRopeTest, MatchesCpuReference) {
  const QkNormCase c = GetParam();
  const int64_t N = c.tokens, H = c.heads, K = c.kv_heads, D = c.head_dim;
  make_rope(N, D, 97);
  // Weights near 1 (Qwen3's) or offsets near 0 (Gemma's), both signs of a spread.
  q_weight = c.one_plus ? random_input({D}, c.weight, -0.5f, 0.5f)
                        : random_input({D}, c.weight, 0.5f, 1.5f);
  k_weight = c.one_plus ? random_input({D}, c.weight, -0.5f, 0.5f)
                        : random_input({D}, c.weight, 0.5f, 1.5f);
  const int64_t row = (H + 2 * K) * D;
  Pair qkv = random_input({N, row}, c.act, -3, 3);
  Pair q_raw = output({N, H, D}, c.act), k_raw = output({N, K, D}, c.act);
  Pair v = output({N, K, D}, c.act);
  Pair q = output({N, H, D}, c.act), k = output({N, K, D}, c.act);
  cpu_->split_qkv_norm_rope(qkv.cpu, cpu_norm(), pos.cpu, cos_table.cpu, sin_table.cpu, q_raw.cpu,
                            k_raw.cpu, v.cpu, q.cpu, k.cpu);
  gpu_->split_qkv_norm_rope(qkv.gpu, gpu_norm(), pos.gpu, cos_table.gpu, sin_table.gpu, q_raw.gpu,
                            k_raw.gpu, v.gpu, q.gpu, k.gpu);
  EXPECT_EQ(error(q_raw), 0) << "the copies are exact";
  EXPECT_EQ(error(k_raw), 0);
  EXPECT_EQ(error(v), 0);
  const double tolerance = c.act == DType::kF32 ? kF32Tolerance : kBf16Tolerance;
  EXPECT_LE(error(q), tolerance) << "q";
  EXPECT_LE(error(k), tolerance) << "k";

  // The backward's remake from the raw projections equals the split's output bit for bit.
  Pair q_again = output({N, H, D}, c.act), k_again = output({N, K, D}, c.act);
  gpu_->qk_norm_rope(q_raw.gpu, k_raw.gpu, gpu_norm(), pos.gpu, cos_table.gpu, sin_table.gpu,
                     q_again.gpu, k_again.gpu);
  EXPECT_EQ(download(q_again.gpu), download(q.gpu));
  EXPECT_EQ(download(k_again.gpu), download(k.gpu));
  cpu_->qk_norm_rope(q_raw.cpu, k_raw.cpu, cpu_norm(), pos.cpu, cos_table.cpu, sin_table.cpu,
                     q_again.cpu, k_again.cpu);
  EXPECT_LE(error(q_again), tolerance);

  for (const bool accumulate : {false, true}) {
    Pair dq = random_input({N, H, D}, c.act), dk = random_input({N, K, D}, c.act);
    Pair dv = random_input({N, K, D}, c.act);
    Pair dqkv = output({N, row}, c.act);
    Pair dq_weight = random_input({D}, DType::kF32), dk_weight = random_input({D}, DType::kF32);
    cpu_->pack_qkv_norm_rope_backward(dq.cpu, dk.cpu, dv.cpu, q_raw.cpu, k_raw.cpu, cpu_norm(),
                                      pos.cpu, cos_table.cpu, sin_table.cpu, dq_weight.cpu,
                                      dk_weight.cpu, accumulate, dqkv.cpu);
    gpu_->pack_qkv_norm_rope_backward(dq.gpu, dk.gpu, dv.gpu, q_raw.gpu, k_raw.gpu, gpu_norm(),
                                      pos.gpu, cos_table.gpu, sin_table.gpu, dq_weight.gpu,
                                      dk_weight.gpu, accumulate, dqkv.gpu);
    EXPECT_LE(error(dqkv), tolerance) << "accumulate " << accumulate;
    EXPECT_LE(error(dq_weight), 1e-4) << "accumulate " << accumulate;
    EXPECT_LE(error(dk_weight), 1e-4) << "accumulate " << accumulate;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaQkNormRopeTest,
    ::testing::Values(
        // Qwen3's head dim: the 16-byte kernel, bf16 weights as the model gathers them.
        QkNormCase{300, 4, 2, 128, false, DType::kBF16, DType::kBF16},
        QkNormCase{300, 4, 2, 128, true, DType::kBF16, DType::kF32},
        // Gemma 3 1B's head dim 256 with 1 + weight; 64; a single kv head.
        QkNormCase{77, 4, 1, 256, true, DType::kBF16, DType::kBF16},
        QkNormCase{129, 8, 8, 64, false, DType::kBF16, DType::kBF16},
        // The scalar kernel: a head dim the vector kernel does not take, and f32 activations.
        QkNormCase{65, 3, 1, 96, false, DType::kBF16, DType::kBF16},
        QkNormCase{65, 2, 2, 128, true, DType::kF32, DType::kF32}));

// Qwen3-1.7B at seq 4096, micro-batch 2 (N = 8192, 16 q heads and 8 kv heads of 128): the three
// ops and the bytes they move (ops/cuda/NOTES.md).
TEST_F(CudaOpsTest, DISABLED_QkNormRopeThroughput) {
  const int64_t N = 8192, H = 16, K = 8, D = 128, row = (H + 2 * K) * D, positions = 4096;
  std::vector<float> table(positions * D / 2, 0.5f);
  Pair cos_table = input(table, {positions, D / 2}, DType::kF32);
  Pair sin_table = input(table, {positions, D / 2}, DType::kF32);
  std::vector<int32_t> position_values(N);
  for (int64_t n = 0; n < N; ++n) position_values[n] = static_cast<int32_t>(n % positions);
  Pair pos = ints(position_values, {N});
  Pair q_weight = random_input({D}), k_weight = random_input({D});
  const QkNorm norm{q_weight.gpu, k_weight.gpu, 1e-6f, false};
  Pair qkv = random_input({N, row}), q_raw = output({N, H, D}), k_raw = output({N, K, D});
  Pair v = output({N, K, D}), q = output({N, H, D}), k = output({N, K, D});
  Pair dq_weight = output({D}, DType::kF32), dk_weight = output({D}, DType::kF32);
  const double split_ms = time_ms(
      [&] {
        gpu_->split_qkv_norm_rope(qkv.gpu, norm, pos.gpu, cos_table.gpu, sin_table.gpu, q_raw.gpu,
                                  k_raw.gpu, v.gpu, q.gpu, k.gpu);
      },
      20);
  const double remake_ms = time_ms(
      [&] {
        gpu_->qk_norm_rope(q_raw.gpu, k_raw.gpu, norm, pos.gpu, cos_table.gpu, sin_table.gpu, q.gpu,
                           k.gpu);
      },
      20);
  const double backward_ms = time_ms(
      [&] {
        gpu_->pack_qkv_norm_rope_backward(q.gpu, k.gpu, v.gpu, q_raw.gpu, k_raw.gpu, norm, pos.gpu,
                                          cos_table.gpu, sin_table.gpu, dq_weight.gpu,
                                          dk_weight.gpu, true, qkv.gpu);
      },
      20);
  // Bytes: split reads X and writes X + (H + K) D; remake reads and writes (H + K) D; backward
  // reads (H + K) D twice and K D once, writes X (bf16, per token).
  const double qk = double(N) * (H + K) * D * 2, packed = double(N) * row * 2;
  std::printf("q/k norm + rope at N=%lld H=%lld K=%lld D=%lld: split %.3f ms (%.0f GB/s), remake "
              "%.3f ms (%.0f GB/s), backward %.3f ms (%.0f GB/s)\n",
              static_cast<long long>(N), static_cast<long long>(H), static_cast<long long>(K),
              static_cast<long long>(D), split_ms, (2 * packed + qk) / split_ms / 1e6, remake_ms,
              2 * qk / remake_ms / 1e6, backward_ms, (2 * packed + qk) / backward_ms / 1e6);
}

}  // namespace
}  // namespace shardtrain
