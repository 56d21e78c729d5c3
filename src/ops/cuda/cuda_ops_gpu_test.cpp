// CudaOps against the CpuOps fp32 reference, op by op, on fresh random data
// (ops/cuda/testing/cuda_ops_fixture.h says how they are compared): elementwise ops, AdamW,
// embedding, RMSNorm, linear, rope, SwiGLU, cross-entropy and the fused multi-range AdamW.
// Attention: cuda_attention_gpu_test.cpp; timings: cuda_ops_throughput_gpu_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/testing/test_support.h"
#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain {
namespace {

using namespace cuda_testing;

TEST_F(CudaOpsTest, AddScaleAndCast) {
  // 37 x 53: scalar kernels; 32 x 64: the 16-byte vector kernels (bf16).
  for (const Shape& shape : {Shape{37, 53}, Shape{32, 64}})
    for (DType dtype : {DType::kBF16, DType::kF32}) {
      Pair a = random_input(shape, dtype), b = random_input(shape, dtype);
      Pair out = output(shape, dtype);
      cpu_->add(out.cpu, a.cpu, b.cpu);
      gpu_->add(out.gpu, a.gpu, b.gpu);
      EXPECT_LE(error(out), dtype == DType::kF32 ? kF32Tolerance : kBf16Tolerance);
      cpu_->add(a.cpu, a.cpu, b.cpu);  // aliasing
      gpu_->add(a.gpu, a.gpu, b.gpu);
      cpu_ref().scale(a.cpu, -0.37f);
      gpu_ref().scale(a.gpu, -0.37f);
      EXPECT_LE(error(a), dtype == DType::kF32 ? kF32Tolerance : kBf16Tolerance);
    }
  // f32 -> bf16 rounds to nearest even exactly like the host conversion; bf16 -> f32 is exact.
  // 1001 elements: scalar kernel; 1024: vector kernel.
  for (const int64_t count : {1001, 1024}) {
    const std::vector<float> values = [count] {
      std::mt19937 rng(4242);
      std::normal_distribution<float> dist(0, 3);
      std::vector<float> v(count);
      for (float& x : v) x = dist(rng);
      return v;
    }();
    const Shape shape{count};
    Tensor source = gpu_tensor(values, DType::kF32, shape);
    buffers_.emplace_back(*gpu_, count * 2);
    Tensor narrow = buffers_.back().view(DType::kBF16, shape);
    poison(narrow);
    gpu_->cast(narrow, source);
    Tensor wide = gpu_tensor(values, DType::kF32, shape);
    poison(wide);
    gpu_->cast(wide, narrow);
    const std::vector<float> round_trip = download(wide);
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(round_trip[i], bf16_to_f32(f32_to_bf16(values[i]))) << "element " << i;
    }
    buffers_.emplace_back(*gpu_, count * 2);
    Tensor half = buffers_.back().view(DType::kF16, shape);
    gpu_->cast(half, source);
    gpu_->cast(wide, half);
    const std::vector<float> half_trip = download(wide);
    for (size_t i = 0; i < values.size(); ++i) {
      ASSERT_EQ(half_trip[i], f16_to_f32(f32_to_f16(values[i]))) << "element " << i;
    }
    gpu_->fill_zero(wide);
    for (float v : download(wide)) ASSERT_EQ(v, 0.0f);
  }
}

// host_wait_seconds counts the time the synchronising calls block the host, which the trainer
// reports per step (StepReport::host_wait_s); the CPU backend measures none.
TEST_F(CudaOpsTest, HostWaitIsTheTimeSynchronisingCallsBlock) {
  EXPECT_FALSE(cpu_->host_wait_seconds().has_value());
  const Pair x = random_input({4096, 4096}), w = random_input({4096, 4096});
  const Pair out = output({4096, 4096});
  gpu_->synchronize();
  const double before = gpu_->host_wait_seconds().value();
  for (int i = 0; i < 40; ++i) gpu_->linear_forward(x.gpu, w.gpu, Tensor(), out.gpu);  // ~7 ms
  const auto start = std::chrono::steady_clock::now();
  gpu_->synchronize();
  const double blocked =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double counted = gpu_->host_wait_seconds().value() - before;
  EXPECT_GT(blocked, 1e-3) << "the queued GEMMs should still have been running";
  EXPECT_GE(counted, 0.9 * blocked);
  EXPECT_LE(counted, blocked);

  // A read into pageable memory blocks in the copy itself, before any synchronisation: the
  // step's loss read, where the trainer waits for its GPU.
  const Pair sum = output({1}, DType::kF32);
  for (int i = 0; i < 40; ++i) gpu_->linear_forward(x.gpu, w.gpu, Tensor(), out.gpu);
  const double before_read = gpu_->host_wait_seconds().value();
  const auto read_start = std::chrono::steady_clock::now();
  (void)gpu_->read_scalar(sum.gpu);
  const double read_blocked =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - read_start).count();
  EXPECT_GT(read_blocked, 1e-3) << "the queued GEMMs should still have been running";
  EXPECT_GE(gpu_->host_wait_seconds().value() - before_read, 0.9 * read_blocked);
}

TEST_F(CudaOpsTest, AdamWMatchesReference) {
  for (const int64_t count : {100003, 100000}) {  // scalar and float4 kernels
    const Shape shape{count};
    Pair param = random_input(shape, DType::kF32),
         m = random_input(shape, DType::kF32, -0.1f, 0.1f);
    Pair v = random_input(shape, DType::kF32, 0.0f, 0.01f);
    for (int64_t step = 1; step <= 3; ++step) {
      Pair grad = random_input(shape, DType::kF32);
      AdamWStep s;
      s.lr = 1e-3f;
      s.weight_decay = 0.1f;
      s.step = step;
      s.grad_scale = 0.5f;
      cpu_ref().adamw(param.cpu, grad.cpu, m.cpu, v.cpu, s);
      gpu_ref().adamw(param.gpu, grad.gpu, m.gpu, v.gpu, s);
    }
    EXPECT_F32_CLOSE(param);
    EXPECT_F32_CLOSE(m);
    EXPECT_F32_CLOSE(v);
  }
}

TEST_F(CudaOpsTest, SumSquaresAccumulates) {
  // 300007: float4 loads and a 3-element tail; 6000001: also the 4-loads-per-thread loop; 3: the
  // tail alone; from element 1: a base that is not 16-byte aligned (the scalar kernel).
  for (const int64_t n : {300007, 6000001, 3}) {
    for (const int64_t first : {0, 1}) {
      Pair x = random_input({n + first}, DType::kF32);
      Pair sum = input({2.5f}, {1}, DType::kF32);
      cpu_->sum_squares(x.cpu.rows(first, n + first), sum.cpu);
      gpu_->sum_squares(x.gpu.rows(first, n + first), sum.gpu);
      const float want = cpu_->read_scalar(sum.cpu);
      const float got = gpu_->read_scalar(sum.gpu);
      EXPECT_NEAR(got, want, 1e-5 * want) << n << " from " << first;
      if (n > 1000) EXPECT_GT(want, 2.5f + 0.3f * n / 3) << n;
    }
  }
}

// sum_squares_aside, in order (the default) and on the second stream (SHARDTRAIN_OPS_ASIDE=1):
// ordered after the ops before it (x is written just before), joined before the ops after it (a
// scale of the sum) and by read_scalar; several terms into one sum, one of them off 16-byte
// alignment (the in-order kernel).
TEST_F(CudaOpsTest, SumSquaresAsideOrdersAndJoins) {
  const std::vector<float> a_values = random(6000001), b_values = random(300008);
  const auto run = [&](Ops& ops, Tensor a, Tensor b, Tensor sum) {
    ops.scale(a, 0.5f);  // enqueued before: the aside sum must see it
    ops.sum_squares_aside(a, sum);
    ops.sum_squares_aside(b.rows(1, b.numel()), sum);
    ops.join_aside();
    ops.scale(sum, 2.0f);                         // after the join: the sum is complete
    ops.sum_squares_aside(a.rows(0, 1000), sum);  // joined by read_scalar
    return ops.read_scalar(sum);
  };
  const float start = 2.5f;
  const float want =
      run(*cpu_, cpu_tensor(a_values.data(), DType::kF32, {6000001}),
          cpu_tensor(b_values.data(), DType::kF32, {300008}), cpu_tensor(&start, DType::kF32, {1}));
  EXPECT_GT(want, 2.0f * (2.5f + 0.25f * 0.3f * 6000001 / 3));
  for (const char* aside : {"0", "1"}) {
    testing::ScopedEnv env("SHARDTRAIN_OPS_ASIDE", aside);
    CudaOps ops;  // reads the switch
    const Tensor a = gpu_tensor(a_values, DType::kF32, {6000001});
    const Tensor b = gpu_tensor(b_values, DType::kF32, {300008});
    const Tensor sum = gpu_tensor({start}, DType::kF32, {1});
    gpu_->synchronize();  // uploaded on the fixture's stream, read on ops' streams
    const float got = run(ops, a, b, sum);
    EXPECT_NEAR(got, want, 1e-5 * want) << "SHARDTRAIN_OPS_ASIDE=" << aside;
  }
}

TEST_F(CudaOpsTest, Embedding) {
  const int64_t vocab = 50, channels = 72, tokens = 97;
  std::vector<int32_t> id_values(tokens);
  for (int64_t n = 0; n < tokens; ++n) id_values[n] = static_cast<int32_t>((n * 37 + 11) % vocab);
  Pair ids = ints(id_values, {tokens});
  Pair table = random_input({vocab, channels});
  Pair out = output({tokens, channels});
  cpu_->embedding_forward(ids.cpu, table.cpu, out.cpu);
  gpu_->embedding_forward(ids.gpu, table.gpu, out.gpu);
  EXPECT_EQ(error(out), 0.0);
  // Repeated ids accumulate into an fp32 grad table that already holds values.
  Pair dout = random_input({tokens, channels});
  Pair dtable = random_input({vocab, channels}, DType::kF32);
  cpu_->embedding_backward(ids.cpu, dout.cpu, dtable.cpu);
  gpu_->embedding_backward(ids.gpu, dout.gpu, dtable.gpu);
  EXPECT_F32_CLOSE(dtable);
}

TEST_F(CudaOpsTest, RmsNorm) {
  // Forward up to 2048 channels a warp per row: 96 / 1000 (2 chunks of 8 per lane), 520 (4,
  // ragged), 1536 (6), 2048 (8); 5000 rows give every backward block several rows. Backward
  // (and forward from 4096): a block per row, 1 chunk per thread up to 2048 channels, 2 at
  // 4096, 4 at 6000; 77: the generic kernels.
  struct Case {
    int64_t rows, channels;
  };
  for (const auto [rows, channels] :
       {Case{67, 96}, Case{67, 1000}, Case{67, 520}, Case{67, 1536}, Case{67, 2048},
        Case{5000, 1536}, Case{67, 4096}, Case{67, 6000}, Case{67, 77}}) {
    Pair x = random_input({rows, channels}, DType::kBF16, -2, 2);
    Pair weight = random_input({channels}, DType::kBF16, 0.5f, 1.5f);
    Pair out = output({rows, channels});
    Pair rstd = output({rows}, DType::kF32);
    cpu_->rmsnorm_forward(x.cpu, weight.cpu, 1e-5f, out.cpu, rstd.cpu);
    gpu_->rmsnorm_forward(x.gpu, weight.gpu, 1e-5f, out.gpu, rstd.gpu);
    EXPECT_BF16_CLOSE(out);
    EXPECT_F32_CLOSE(rstd);
    for (const bool accumulate : {false, true}) {
      Pair dout = random_input({rows, channels});
      Pair dx = accumulate ? random_input({rows, channels}) : output({rows, channels});
      Pair dweight = random_input({channels}, DType::kF32);
      // dweight holds values: accumulate adds to them, else they are overwritten.
      cpu_->rmsnorm_backward(dout.cpu, x.cpu, weight.cpu, rstd.cpu, dx.cpu, dweight.cpu, accumulate,
                             accumulate);
      gpu_->rmsnorm_backward(dout.gpu, x.gpu, weight.gpu, rstd.gpu, dx.gpu, dweight.gpu, accumulate,
                             accumulate);
      EXPECT_BF16_CLOSE(dx) << " channels " << channels << " accumulate " << accumulate;
      EXPECT_LE(error(dweight), 1e-4) << "channels " << channels << " rows " << rows;
    }
    // dx may alias dout; a bf16 dweight accumulates too.
    Pair dout = random_input({rows, channels});
    Pair dweight = random_input({channels}, DType::kBF16);
    cpu_->rmsnorm_backward(dout.cpu, x.cpu, weight.cpu, rstd.cpu, dout.cpu, dweight.cpu, false,
                           true);
    gpu_->rmsnorm_backward(dout.gpu, x.gpu, weight.gpu, rstd.gpu, dout.gpu, dweight.gpu, false,
                           true);
    EXPECT_BF16_CLOSE(dout);
    EXPECT_BF16_CLOSE(dweight);
  }
}

TEST_F(CudaOpsTest, LinearOddShapesWithBias) {
  struct Case {
    int64_t rows, in, out;
    bool bias;
  };
  for (const Case c : {Case{100, 64, 96, true}, Case{37, 72, 40, false}, Case{256, 128, 384, true},
                       Case{5, 24, 8, false}}) {
    SCOPED_TRACE(::testing::Message() << "rows " << c.rows << " in " << c.in << " out " << c.out);
    Pair x = random_input({c.rows, c.in});
    Pair weight = random_input({c.out, c.in}, DType::kBF16, -0.2f, 0.2f);
    Pair bias = c.bias ? random_input({c.out}) : Pair{};
    Pair out = output({c.rows, c.out});
    cpu_->linear_forward(x.cpu, weight.cpu, bias.cpu, out.cpu);
    gpu_->linear_forward(x.gpu, weight.gpu, bias.gpu, out.gpu);
    EXPECT_BF16_CLOSE(out);
    // The residual added in the epilogue: to another buffer, then in place over the residual.
    Pair residual = random_input({c.rows, c.out});
    Pair summed = output({c.rows, c.out});
    cpu_->linear_forward_residual(x.cpu, weight.cpu, residual.cpu, summed.cpu);
    gpu_->linear_forward_residual(x.gpu, weight.gpu, residual.gpu, summed.gpu);
    EXPECT_BF16_CLOSE(summed);
    cpu_->linear_forward_residual(x.cpu, weight.cpu, residual.cpu, residual.cpu);
    gpu_->linear_forward_residual(x.gpu, weight.gpu, residual.gpu, residual.gpu);
    EXPECT_BF16_CLOSE(residual);

    // accumulate: dx, dweight and dbias add to what they hold; else all three are overwritten
    // (dweight and dbias hold values either way, so an overwrite that added would show).
    for (const bool accumulate : {false, true}) {
      Pair dout = random_input({c.rows, c.out});
      Pair dx = accumulate ? random_input({c.rows, c.in}) : output({c.rows, c.in});
      Pair dweight = random_input({c.out, c.in}, DType::kF32);  // LocalUnits keeps fp32 grads
      Pair dbias = c.bias ? random_input({c.out}, DType::kF32) : Pair{};
      cpu_->linear_backward(dout.cpu, x.cpu, weight.cpu, dx.cpu, dweight.cpu, dbias.cpu, accumulate,
                            accumulate);
      gpu_->linear_backward(dout.gpu, x.gpu, weight.gpu, dx.gpu, dweight.gpu, dbias.gpu, accumulate,
                            accumulate);
      EXPECT_BF16_CLOSE(dx);
      EXPECT_LE(error(dweight), 1e-4);  // fp32 output of a bf16-input GEMM: only the sum order
      if (c.bias) {
        EXPECT_LE(error(dbias), 1e-4);
      }
    }
    // bf16 grads, no dx.
    Pair dout = random_input({c.rows, c.out});
    Pair dweight = random_input({c.out, c.in}, DType::kBF16);
    cpu_->linear_backward(dout.cpu, x.cpu, weight.cpu, Tensor(), dweight.cpu, Tensor(), false,
                          true);
    gpu_->linear_backward(dout.gpu, x.gpu, weight.gpu, Tensor(), dweight.gpu, Tensor(), false,
                          true);
    EXPECT_BF16_CLOSE(dweight);
  }
}

// Packed q/k/v (one GEMM output per token: q of 4 heads, k and v of 2), split with rope, and the
// gradient packed back. Head dims 128, 64, 16: the fused 16-byte kernel (half a multiple of 8);
// 12: rope_rows' bf16 kernel rotating two pairs a thread, and a copy; 6 (3 pairs): its scalar
// kernel.
class CudaRopeTest : public CudaOpsTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CudaRopeTest, SplitAndPackWithRope) {
  const int64_t tokens = 48, heads = 4, head_dim = GetParam(), positions = 64, half = head_dim / 2;
  std::vector<float> cos_values(positions * half), sin_values(positions * half);
  for (int64_t p = 0; p < positions; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = p * std::pow(10000.0, -2.0 * i / head_dim);
      cos_values[p * half + i] = static_cast<float>(std::cos(angle));
      sin_values[p * half + i] = static_cast<float>(std::sin(angle));
    }
  }
  Pair cos_table = input(cos_values, {positions, half}, DType::kF32);
  Pair sin_table = input(sin_values, {positions, half}, DType::kF32);
  std::vector<int32_t> position_values(tokens);
  for (int64_t n = 0; n < tokens; ++n)
    position_values[n] = static_cast<int32_t>((n * 13) % positions);
  Pair pos = ints(position_values, {tokens});
  const int64_t kv_heads = 2, row = (heads + 2 * kv_heads) * head_dim;
  Pair qkv = random_input({tokens, row});
  Pair q = output({tokens, heads, head_dim}), k = output({tokens, kv_heads, head_dim});
  Pair v = output({tokens, kv_heads, head_dim});
  cpu_->split_qkv_rope(qkv.cpu, pos.cpu, cos_table.cpu, sin_table.cpu, q.cpu, k.cpu, v.cpu);
  gpu_->split_qkv_rope(qkv.gpu, pos.gpu, cos_table.gpu, sin_table.gpu, q.gpu, k.gpu, v.gpu);
  EXPECT_BF16_CLOSE(q);
  EXPECT_BF16_CLOSE(k);
  EXPECT_BF16_CLOSE(v);
  Pair dqkv = output({tokens, row});
  cpu_->pack_qkv_rope_backward(q.cpu, k.cpu, v.cpu, pos.cpu, cos_table.cpu, sin_table.cpu,
                               dqkv.cpu);
  gpu_->pack_qkv_rope_backward(q.gpu, k.gpu, v.gpu, pos.gpu, cos_table.gpu, sin_table.gpu,
                               dqkv.gpu);
  EXPECT_BF16_CLOSE(dqkv);
}

INSTANTIATE_TEST_SUITE_P(HeadDims, CudaRopeTest, ::testing::Values(128, 64, 16, 12, 6));

TEST_F(CudaOpsTest, SwiGlu) {
  for (const Shape& shape : {Shape{33, 250}, Shape{32, 256}}) {  // scalar, then vector kernels
    Pair gate = random_input(shape, DType::kBF16, -4, 4), up = random_input(shape);
    Pair out = output(shape);
    cpu_->swiglu_forward(gate.cpu, up.cpu, out.cpu);
    gpu_->swiglu_forward(gate.gpu, up.gpu, out.gpu);
    EXPECT_BF16_CLOSE(out);
    Pair dout = random_input(shape);
    Pair dgate = output(shape), dup = output(shape);
    cpu_->swiglu_backward(dout.cpu, gate.cpu, up.cpu, dgate.cpu, dup.cpu);
    gpu_->swiglu_backward(dout.gpu, gate.gpu, up.gpu, dgate.gpu, dup.gpu);
    EXPECT_BF16_CLOSE(dgate);
    EXPECT_BF16_CLOSE(dup);
    // In place, as the model may do: dgate over gate, dup over up.
    cpu_->swiglu_backward(dout.cpu, gate.cpu, up.cpu, gate.cpu, up.cpu);
    gpu_->swiglu_backward(dout.gpu, gate.gpu, up.gpu, gate.gpu, up.gpu);
    EXPECT_BF16_CLOSE(gate);
    EXPECT_BF16_CLOSE(up);
  }
}

TEST_F(CudaOpsTest, CrossEntropy) {
  // 1000 and 151936 (Qwen2) take the 8-logit vector kernel, 32003 the scalar one.
  for (const int64_t vocab : {1000, 32003, 151936}) {
    const int64_t rows = 37;
    std::vector<int32_t> target_values(rows);
    for (int64_t n = 0; n < rows; ++n) {
      target_values[n] = n % 7 == 3 ? -100 : static_cast<int32_t>((n * 7919) % vocab);
    }
    Pair targets = ints(target_values, {rows});
    const std::vector<float> logit_values = random(rows * vocab, -8, 8);
    // Loss only: logits untouched.
    Pair logits = input(logit_values, {rows, vocab});
    Pair loss = input({1.25f}, {1}, DType::kF32);
    cpu_->cross_entropy(logits.cpu, targets.cpu, 0.5f, loss.cpu, false);
    gpu_->cross_entropy(logits.gpu, targets.gpu, 0.5f, loss.gpu, false);
    EXPECT_LE(error(loss), 1e-5);
    EXPECT_EQ(error(logits), 0.0);
    // Loss and gradient in place.
    cpu_->cross_entropy(logits.cpu, targets.cpu, 0.5f, loss.cpu, true);
    gpu_->cross_entropy(logits.gpu, targets.gpu, 0.5f, loss.gpu, true);
    EXPECT_LE(error(loss), 1e-5) << "vocab " << vocab;
    EXPECT_BF16_CLOSE(logits) << " vocab " << vocab;
    const std::vector<float> dlogits = download(logits.gpu);
    for (int64_t j = 0; j < vocab; ++j) ASSERT_EQ(dlogits[3 * vocab + j], 0.0f);  // ignored row
  }
}

// ---- adamw_multi ----

// One range of an adamw_multi test: offsets into flat buffers (m and v at param_offset).
struct AdamWTestRange {
  int64_t param_offset, grad_offset, numel;
  float weight_decay;
  DType compute;  // kBF16 or kF16: the compute copy's buffer; kF32: no compute copy
  bool zero_grad;
};

// Flat buffers the ranges point into, on one backend.
struct AdamWTestBuffers {
  Tensor param, grad, exp_avg, exp_avg_sq, compute_bf16, compute_f16;
};

std::vector<AdamWSegment> adamw_test_segments(const AdamWTestBuffers& b,
                                              const std::vector<AdamWTestRange>& ranges) {
  std::vector<AdamWSegment> segments;
  for (const AdamWTestRange& r : ranges) {
    const int64_t p = r.param_offset, g = r.grad_offset, n = r.numel;
    AdamWSegment segment{b.param.rows(p, p + n), b.grad.rows(g, g + n), b.exp_avg.rows(p, p + n),
                         b.exp_avg_sq.rows(p, p + n), r.weight_decay};
    if (r.compute == DType::kBF16) segment.compute_param = b.compute_bf16.rows(p, p + n);
    if (r.compute == DType::kF16) segment.compute_param = b.compute_f16.rows(p, p + n);
    segment.zero_grad = r.zero_grad;
    segments.push_back(segment);
  }
  return segments;
}

// The one-launch kernel against the single-range adamw + cast + fill_zero on the GPU (within a
// few fp32 ulps: the same element math, but nvcc contracts multiply-adds differently in the two
// kernels; the H200 run showed param and exp_avg_sq differing in the last bits) and against the
// CPU reference (fp32 tolerance). Ranges cover float4 bodies, unaligned starts (scalar prefixes),
// scalar tails, a range of length 1, one without a compute copy, and one whose grad sits in another
// 16-byte phase than its param (all scalar). Five steps: three with the same ranges (the cached
// device table), then fewer ranges (a new table), then the first ranges again (the first table,
// still cached: the per-unit updates in backward alternate between tables like this).
TEST_F(CudaOpsTest, AdamWMultiMatchesPerRangeAdamwAndCast) {
  const std::vector<AdamWTestRange> ranges = {
      {0, 0, 4096, 0.1f, DType::kBF16, true},          // float4 only
      {4096, 4096, 1, 0.0f, DType::kBF16, true},       // length 1
      {4099, 4099, 1001, 0.1f, DType::kF16, false},    // prefix of 1, odd length
      {5102, 5102, 70001, 0.3f, DType::kBF16, true},   // prefix of 2, tail of 3
      {75105, 75105, 6, 0.0f, DType::kF32, true},      // too short for a vector; no copy
      {75120, 75120, 77, 0.1f, DType::kBF16, false},   // tail of 1
      {80003, 80000, 5003, 0.1f, DType::kBF16, true},  // grad phase differs: scalar
  };
  const int64_t total = 86000;
  const std::vector<float> param0 = random(total), exp_avg0 = random(total, -0.1f, 0.1f),
                           exp_avg_sq0 = random(total, 0.0f, 0.01f), zeros(total, 0.0f);
  const auto gpu_buffers = [&] {
    return AdamWTestBuffers{
        gpu_tensor(param0, DType::kF32, {total}),   gpu_tensor(zeros, DType::kF32, {total}),
        gpu_tensor(exp_avg0, DType::kF32, {total}), gpu_tensor(exp_avg_sq0, DType::kF32, {total}),
        gpu_tensor(zeros, DType::kBF16, {total}),   gpu_tensor(zeros, DType::kF16, {total})};
  };
  const AdamWTestBuffers fused = gpu_buffers(), reference = gpu_buffers();
  const AdamWTestBuffers cpu{cpu_tensor(param0.data(), DType::kF32, {total}),
                             cpu_tensor(zeros.data(), DType::kF32, {total}),
                             cpu_tensor(exp_avg0.data(), DType::kF32, {total}),
                             cpu_tensor(exp_avg_sq0.data(), DType::kF32, {total}),
                             cpu_tensor(nullptr, DType::kBF16, {total}),
                             cpu_tensor(nullptr, DType::kF16, {total})};

  for (int64_t step = 1; step <= 5; ++step) {
    const std::vector<AdamWTestRange> step_ranges(ranges.begin(),
                                                  ranges.begin() + (step == 4 ? 3 : 7));
    const std::vector<float> grad_values = random(total);
    for (const AdamWTestBuffers* b : {&fused, &reference}) upload(b->grad, grad_values);
    cpu_->copy_from_host(cpu.grad, grad_values.data());
    AdamWStep s;
    s.lr = 1e-3f;
    s.beta2 = 0.95f;
    s.step = step;
    s.grad_scale = 0.5f;
    s.weight_decay = 7.0f;  // ignored: every range has its own
    gpu_->adamw_multi(adamw_test_segments(fused, step_ranges), s);
    cpu_->adamw_multi(adamw_test_segments(cpu, step_ranges), s);
    for (const AdamWSegment& segment : adamw_test_segments(reference, step_ranges)) {
      AdamWStep range_step = s;
      range_step.weight_decay = segment.weight_decay;
      gpu_ref().adamw(segment.param, segment.grad, segment.exp_avg, segment.exp_avg_sq, range_step);
      if (segment.compute_param.defined()) gpu_->cast(segment.compute_param, segment.param);
      if (segment.zero_grad) gpu_->fill_zero(segment.grad);
    }
  }

  // Largest |a - b| relative to the largest |b| of the tensor (per-element ratios blow up for
  // parameters that an update moves close to zero).
  const auto relative_difference = [&](Tensor a, Tensor b) {
    const std::vector<float> x = download(a), y = download(b);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      worst = std::max(worst, std::fabs(double{x[i]} - y[i]));
      scale = std::max(scale, std::fabs(double{y[i]}));
    }
    return scale > 0 ? worst / scale : worst;
  };
  const std::pair<const char*, Tensor AdamWTestBuffers::*> fields[] = {
      {"param", &AdamWTestBuffers::param},
      {"grad", &AdamWTestBuffers::grad},
      {"exp_avg", &AdamWTestBuffers::exp_avg},
      {"exp_avg_sq", &AdamWTestBuffers::exp_avg_sq},
      {"compute_bf16", &AdamWTestBuffers::compute_bf16},
      {"compute_f16", &AdamWTestBuffers::compute_f16}};
  for (const auto& [name, field] : fields) {
    // fp32: a few ulps (2^-23 each); bf16 / f16 copies: at most one rounding step apart.
    const double tolerance = (fused.*field).dtype() == DType::kF32 ? 8.0 / (1 << 23) : 1.0 / 128;
    EXPECT_LE(relative_difference(fused.*field, reference.*field), tolerance) << name;
  }
  for (const auto& [name, field] : fields) {
    if ((cpu.*field).dtype() == DType::kF32) {
      EXPECT_LE(error(Pair{cpu.*field, fused.*field}), kF32Tolerance) << name;
    }
  }
  // The last step zeroed the grads of the zero_grad ranges it covered; others kept theirs.
  const std::vector<float> grad = download(fused.grad);
  EXPECT_EQ(grad[0], 0.0f);
  EXPECT_EQ(grad[4096], 0.0f);
  EXPECT_NE(grad[4099], 0.0f);
  const std::vector<float> compute = download(fused.compute_bf16);
  EXPECT_EQ(compute[5102], bf16_to_f32(f32_to_bf16(download(fused.param)[5102])));
}

// Times the optimizer pass of a Qwen2.5-1.5B-sized model (1.54 B fp32 parameters, 28 blocks of
// its parameter shapes plus the embedding) on one GPU: per-range adamw + cast + fill_zero (the
// old three passes) against one adamw_multi launch. Needs ~28 GB of device memory.
TEST_F(CudaOpsTest, DISABLED_AdamWMultiThroughput) {
  std::vector<int64_t> sizes = {151936LL * 1536};
  const std::vector<int64_t> block = {1536, 1536 * 1536, 1536,        256 * 1536,
                                      256,  256 * 1536,  256,         1536 * 1536,
                                      1536, 8960 * 1536, 8960 * 1536, 1536 * 8960};
  for (int layer = 0; layer < 28; ++layer) sizes.insert(sizes.end(), block.begin(), block.end());
  sizes.push_back(1536);
  int64_t total = 0;
  std::vector<AdamWTestRange> ranges;
  for (const int64_t n : sizes) {
    ranges.push_back({total, total, n, n > 8960 ? 0.1f : 0.0f, DType::kBF16, true});
    total += (n + 31) / 32 * 32;  // 128-byte aligned parameters, as ParamLayout pads them
  }
  const auto device_buffer = [&](DType dtype) {
    buffers_.emplace_back(*gpu_, static_cast<size_t>(total) * dtype_size(dtype));
    return buffers_.back().view(dtype, {total});
  };
  const AdamWTestBuffers b{device_buffer(DType::kF32),  device_buffer(DType::kF32),
                           device_buffer(DType::kF32),  device_buffer(DType::kF32),
                           device_buffer(DType::kBF16), Tensor()};
  const std::vector<AdamWSegment> segments = adamw_test_segments(b, ranges);
  AdamWStep s;
  s.lr = 1e-5f;
  const double separate_ms = time_ms(
      [&] {
        for (const AdamWSegment& segment : segments) {
          AdamWStep range_step = s;
          range_step.weight_decay = segment.weight_decay;
          gpu_ref().adamw(segment.param, segment.grad, segment.exp_avg, segment.exp_avg_sq,
                          range_step);
        }
        gpu_->cast(b.compute_bf16, b.param);
        gpu_->fill_zero(b.grad);
      },
      5);
  const double multi_ms = time_ms([&] { gpu_->adamw_multi(segments, s); }, 5);
  // Bytes per parameter: adamw 28, cast 6, zero 4 before; 34 (16 read, 18 written) fused.
  std::printf(
      "optimizer over %.3f B params, %zu ranges: adamw + cast + zero %.2f ms (%.0f GB/s), "
      "adamw_multi %.2f ms (%.0f GB/s)\n",
      total * 1e-9, segments.size(), separate_ms, 38.0 * total / separate_ms * 1e-6, multi_ms,
      34.0 * total / multi_ms * 1e-6);
}

}  // namespace
}  // namespace shardtrain
