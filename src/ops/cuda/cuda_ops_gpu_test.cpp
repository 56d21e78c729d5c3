// CudaOps against the CpuOps fp32 reference, op by op, on fresh random data.
//
// Both backends get the same bf16-rounded inputs (the CPU as f32, the GPU as bf16 unless a test
// says otherwise). GPU outputs are poisoned with NaN bytes before each run so an unwritten
// element fails the comparison; accumulating outputs start from the same random values on both.
// Errors are ||gpu - cpu|| / ||cpu||: bf16 outputs within 1e-2 (typically ~3e-3), fp32 ops
// within 1e-5. Without a GPU every test is skipped with a visible message.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/cuda/cuda_dispatch.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/device_buffer.h"
#include "ops/test_device_limits.h"

namespace shardtrain {
namespace {

constexpr double kBf16Tolerance = 1e-2;
constexpr double kF32Tolerance = 1e-5;

// One logical tensor on both backends.
struct Pair {
  Tensor cpu, gpu;
};

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: CUDA kernel tests skipped";
    gpu_ = make_cuda_ops();
    cpu_ = make_cpu_ops();
  }

  // Mean wall time of `body` over `repeats` runs after one warm-up (plans, module load), with
  // the device synchronised around them. For the DISABLED_ timing tests.
  double time_ms(const std::function<void()>& body, int repeats) {
    body();
    gpu_->synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < repeats; ++i) body();
    gpu_->synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
               .count() /
           repeats;
  }

  // bf16-rounded uniform values in [low, high); a fresh seed per call.
  std::vector<float> random(int64_t n, float low = -1, float high = 1) {
    std::mt19937 rng(next_seed_++ * 7919u + 17u);
    std::uniform_real_distribution<float> dist(low, high);
    std::vector<float> values(static_cast<size_t>(n));
    for (float& v : values) v = bf16_to_f32(f32_to_bf16(dist(rng)));
    return values;
  }

  Tensor cpu_tensor(const void* data, DType dtype, Shape shape) {
    buffers_.emplace_back(*cpu_, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
    Tensor t = buffers_.back().view(dtype, shape);
    if (data != nullptr) cpu_->copy_from_host(t, data);
    return t;
  }
  Tensor gpu_tensor(const std::vector<float>& values, DType dtype, Shape shape) {
    buffers_.emplace_back(*gpu_, static_cast<size_t>(shape.numel()) * dtype_size(dtype));
    Tensor t = buffers_.back().view(dtype, shape);
    upload(t, values);
    return t;
  }
  void upload(Tensor gpu, const std::vector<float>& values) {
    if (gpu.dtype() == DType::kF32) {
      gpu_->copy_from_host(gpu, values.data());
    } else {
      std::vector<uint16_t> bits(values.size());
      convert_from_f32(values.data(), gpu.dtype(), bits.data(), values.size());
      gpu_->copy_from_host(gpu, bits.data());
    }
  }
  void poison(Tensor gpu) {
    std::vector<unsigned char> bytes(gpu.bytes(), 0xFF);  // NaN in f32, bf16 and f16
    gpu_->copy_from_host(gpu, bytes.data());
  }

  // Same values on both backends; the GPU copy in `gpu_dtype`.
  Pair input(const std::vector<float>& values, Shape shape, DType gpu_dtype = DType::kBF16) {
    return {cpu_tensor(values.data(), DType::kF32, shape), gpu_tensor(values, gpu_dtype, shape)};
  }
  Pair random_input(Shape shape, DType gpu_dtype = DType::kBF16, float low = -1, float high = 1) {
    return input(random(shape.numel(), low, high), shape, gpu_dtype);
  }
  // Output written (not accumulated): CPU zeros, GPU poisoned.
  Pair output(Shape shape, DType gpu_dtype = DType::kBF16) {
    Pair p{cpu_tensor(nullptr, DType::kF32, shape),
           gpu_tensor(std::vector<float>(static_cast<size_t>(shape.numel())), gpu_dtype, shape)};
    poison(p.gpu);
    return p;
  }
  Pair ints(const std::vector<int32_t>& values, Shape shape) {
    Pair p{cpu_tensor(values.data(), DType::kI32, shape), Tensor()};
    buffers_.emplace_back(*gpu_, values.size() * sizeof(int32_t));
    p.gpu = buffers_.back().view(DType::kI32, shape);
    gpu_->copy_from_host(p.gpu, values.data());
    return p;
  }

  std::vector<float> download(Tensor gpu) {
    std::vector<float> values(static_cast<size_t>(gpu.numel()));
    if (gpu.dtype() == DType::kF32) {
      gpu_->copy_to_host(values.data(), gpu);
    } else {
      std::vector<uint16_t> bits(values.size());
      gpu_->copy_to_host(bits.data(), gpu);
      convert_to_f32(bits.data(), gpu.dtype(), values.data(), values.size());
    }
    return values;
  }
  static std::vector<float> host_values(Tensor cpu) {
    return std::vector<float>(cpu.f32(), cpu.f32() + cpu.numel());
  }

  // ||gpu - cpu|| / ||cpu||; infinity if any GPU element is not finite (e.g. unwritten).
  double error(const Pair& p) {
    const std::vector<float> got = download(p.gpu);
    const std::vector<float> want = host_values(p.cpu);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (!std::isfinite(got[i])) return INFINITY;
      diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
      norm += double{want[i]} * want[i];
    }
    return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
  }

  std::unique_ptr<Ops> gpu_, cpu_;
  // For the reference pieces outside the Ops interface (scale, rope_*, one-range adamw).
  CudaOps& gpu_ref() { return static_cast<CudaOps&>(*gpu_); }
  CpuOps& cpu_ref() { return static_cast<CpuOps&>(*cpu_); }
  std::deque<DeviceBuffer> buffers_;
  unsigned next_seed_ = 1;
};

#define EXPECT_BF16_CLOSE(pair) EXPECT_LE(error(pair), kBf16Tolerance) << #pair
#define EXPECT_F32_CLOSE(pair) EXPECT_LE(error(pair), kF32Tolerance) << #pair

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
    SCOPED_TRACE(testing::Message() << "rows " << c.rows << " in " << c.in << " out " << c.out);
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

// Head dim 64: the bf16 kernel rotating two pairs per thread; 6 (3 pairs): the scalar kernel.
class CudaRopeTest : public CudaOpsTest, public ::testing::WithParamInterface<int64_t> {};

TEST_P(CudaRopeTest, RopeForwardAndBackward) {
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
  Pair x = random_input({tokens, heads, head_dim});
  cpu_ref().rope_forward(x.cpu, pos.cpu, cos_table.cpu, sin_table.cpu);
  gpu_ref().rope_forward(x.gpu, pos.gpu, cos_table.gpu, sin_table.gpu);
  EXPECT_BF16_CLOSE(x);
  Pair dx = random_input({tokens, heads, head_dim});
  cpu_ref().rope_backward(dx.cpu, pos.cpu, cos_table.cpu, sin_table.cpu);
  gpu_ref().rope_backward(dx.gpu, pos.gpu, cos_table.gpu, sin_table.gpu);
  EXPECT_BF16_CLOSE(dx);

  // Packed q/k/v (one GEMM output per token: q of 4 heads, k and v of 2), split with rope, and
  // the gradient packed back.
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

// 128, 64, 16: the fused 16-byte packed q/k/v kernel (half a multiple of 8); 6: the generic one.
INSTANTIATE_TEST_SUITE_P(HeadDims, CudaRopeTest, ::testing::Values(128, 64, 16, 6));

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

struct AttentionCase {
  int64_t batch, seq, heads, kv_heads, head_dim;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
  *os << "B=" << c.batch << " T=" << c.seq << " H=" << c.heads << " K=" << c.kv_heads
      << " D=" << c.head_dim;
}

// Attention inputs with the CPU reference output and gradients, for checking the GPU kernels
// under several kernel shapes (the SHARDTRAIN_TEST_ATTENTION_* hooks).
class CudaAttentionKernelTest : public CudaOpsTest {
 protected:
  struct Inputs {
    Pair q, k, v, dout, out, lse, dq, dk, dv;
    float scale = 1;
  };
  // Random inputs of case `c`; forward on both backends, backward on the CPU.
  Inputs prepare(const AttentionCase& c) {
    const Shape q_shape{c.batch, c.seq, c.heads, c.head_dim};
    const Shape kv_shape{c.batch, c.seq, c.kv_heads, c.head_dim};
    Inputs in;
    in.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
    in.q = random_input(q_shape, DType::kBF16, -2, 2);
    in.k = random_input(kv_shape, DType::kBF16, -2, 2);
    in.v = random_input(kv_shape);
    in.dout = random_input(q_shape);
    in.out = output(q_shape);
    in.lse = output({c.batch, c.heads, c.seq}, DType::kF32);
    cpu_->attention_forward(in.q.cpu, in.k.cpu, in.v.cpu, in.scale, in.out.cpu, in.lse.cpu);
    gpu_->attention_forward(in.q.gpu, in.k.gpu, in.v.gpu, in.scale, in.out.gpu, in.lse.gpu);
    in.dq = output(q_shape);
    in.dk = output(kv_shape);
    in.dv = output(kv_shape);
    cpu_->attention_backward(in.dout.cpu, in.q.cpu, in.k.cpu, in.v.cpu, in.out.cpu, in.lse.cpu,
                             in.scale, in.dq.cpu, in.dk.cpu, in.dv.cpu);
    return in;
  }
  // The warp-specialised kernels exist here (a Hopper GPU and a 90a build) and the shape takes
  // them (bf16, head dim 64 or 128): by default they must then really launch (a silent fallback
  // to the cp.async wgmma kernel would test the wrong kernel).
  static bool warp_specialised_applies(const Inputs& in) {
    const int64_t d = in.q.gpu.dim(3);
    return cuda_kernels::device_limits().compute_capability() == 90 &&
           cuda_kernels::wgmma_kernels_compiled() && in.q.gpu.dtype() == DType::kBF16 &&
           (d == 64 || d == 128);
  }
  // False when the dispatch table has no backward kernel for these inputs on this device's
  // limits (attention_backward_config throws the user's Error).
  static bool backward_fits(const Inputs& in) {
    const cuda_kernels::AttentionShape s{
        static_cast<int>(in.q.gpu.dim(0)), static_cast<int>(in.q.gpu.dim(1)),
        static_cast<int>(in.q.gpu.dim(2)), static_cast<int>(in.k.gpu.dim(2)),
        static_cast<int>(in.q.gpu.dim(3))};
    try {
      cuda_kernels::attention_backward_config(in.q.gpu.dtype(), s);
      return true;
    } catch (const Error&) {
      return false;
    }
  }
  // The GPU backward of kernel `warps` ("default": the warp-specialised wgmma kernel on an H200;
  // "wgmma": the cp.async wgmma kernel (SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma), the default
  // where it does not apply; "8" or "4": the mma.sync kernel with that many warps a block) and
  // `heads_per_block` (empty: the launcher's choice) into poisoned outputs, against the CPU
  // gradients. The SIMT kernels ignore the hooks.
  void expect_backward(Inputs& in, const std::string& warps,
                       const std::string& heads_per_block = "") {
    if (warps == "wgmma") {
      ::setenv("SHARDTRAIN_TEST_ATTENTION_KERNEL", "wgmma", 1);
    } else if (warps != "default") {
      ::setenv("SHARDTRAIN_TEST_ATTENTION_KERNEL", "mma", 1);
      ::setenv("SHARDTRAIN_TEST_ATTENTION_BACKWARD_WARPS", warps.c_str(), 1);
    }
    if (!heads_per_block.empty()) {
      ::setenv("SHARDTRAIN_TEST_ATTENTION_HEADS_PER_BLOCK", heads_per_block.c_str(), 1);
    }
    poison(in.dq.gpu);
    poison(in.dk.gpu);
    poison(in.dv.gpu);
    const int64_t ws_before = cuda_kernels::warp_specialised_launches().backward;
    if (!backward_fits(in)) {  // e.g. the SIMT backward at D = 96 under an L4's 99 KB
      EXPECT_THROW(gpu_->attention_backward(in.dout.gpu, in.q.gpu, in.k.gpu, in.v.gpu, in.out.gpu,
                                            in.lse.gpu, in.scale, in.dq.gpu, in.dk.gpu, in.dv.gpu),
                   Error);
      std::printf("attention backward D=%ld does not fit %s: Error, as the table says\n",
                  static_cast<long>(in.q.gpu.dim(3)), cuda_kernels::device_limits().name.c_str());
    } else {
      gpu_->attention_backward(in.dout.gpu, in.q.gpu, in.k.gpu, in.v.gpu, in.out.gpu, in.lse.gpu,
                               in.scale, in.dq.gpu, in.dk.gpu, in.dv.gpu);
    }
    ::unsetenv("SHARDTRAIN_TEST_ATTENTION_HEADS_PER_BLOCK");
    ::unsetenv("SHARDTRAIN_TEST_ATTENTION_BACKWARD_WARPS");
    ::unsetenv("SHARDTRAIN_TEST_ATTENTION_KERNEL");
    if (!backward_fits(in)) return;
    if (warps == "default" && warp_specialised_applies(in)) {
      EXPECT_EQ(cuda_kernels::warp_specialised_launches().backward, ws_before + 1)
          << "the warp-specialised backward did not run";
    }
    Pair &dq = in.dq, &dk = in.dk, &dv = in.dv;
    EXPECT_BF16_CLOSE(dq) << "warps " << warps << ", heads per block " << heads_per_block;
    EXPECT_BF16_CLOSE(dk) << "warps " << warps << ", heads per block " << heads_per_block;
    EXPECT_BF16_CLOSE(dv) << "warps " << warps << ", heads per block " << heads_per_block;
  }
};

class CudaAttentionTest : public CudaAttentionKernelTest,
                          public ::testing::WithParamInterface<AttentionCase> {};

TEST_P(CudaAttentionTest, ForwardAndBackward) {
  Inputs in = prepare(GetParam());
  Pair &out = in.out, &lse = in.lse;
  EXPECT_BF16_CLOSE(out);
  EXPECT_LE(error(lse), 1e-5);
  // The flash backward kernels (wgmma on an H200, the default; mma.sync with 8 warps and 128-key
  // tiles or 4 warps and 64-key tiles); the SIMT kernels ignore the hooks and simply run thrice.
  for (const char* warps : {"default", "wgmma", "8", "4"}) expect_backward(in, warps);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionTest,
    // D=64 and D=128 in bf16 take the tensor-core flash kernels (cuda_attention_tc_*.cu): tile
    // multiples, ragged last tiles (T=300, 100, 65, 1) and GQA ratios 1, 2, 4 and 6. The rest take
    // the SIMT kernels (cuda_attention.cu).
    ::testing::Values(AttentionCase{2, 256, 8, 2, 64}, AttentionCase{1, 128, 4, 4, 128},
                      AttentionCase{2, 16, 4, 2, 16}, AttentionCase{2, 100, 4, 2, 64},
                      AttentionCase{1, 100, 6, 2, 48}, AttentionCase{1, 77, 2, 1, 96},
                      AttentionCase{1, 512, 4, 2, 128}, AttentionCase{2, 300, 8, 2, 64},
                      AttentionCase{1, 256, 12, 2, 128}, AttentionCase{2, 65, 12, 2, 64},
                      AttentionCase{1, 1, 2, 1, 128}, AttentionCase{1, 200, 6, 1, 128}),
    [](const testing::TestParamInfo<AttentionCase>& info) {
      const AttentionCase& c = info.param;
      return "B" + std::to_string(c.batch) + "T" + std::to_string(c.seq) + "H" +
             std::to_string(c.heads) + "K" + std::to_string(c.kv_heads) + "D" +
             std::to_string(c.head_dim);
    });

// The flash backward splits a GQA group over several blocks on small grids (dK, dV then add up
// in fp32); every slice size must give the reference gradients, with every kernel (wgmma,
// mma.sync with 8 and 4 warps) and both head dims. T = 200, 300: ragged last key tiles of
// either size.
TEST_F(CudaAttentionKernelTest, BackwardForEveryGroupSlicing) {
  for (const AttentionCase c :
       {AttentionCase{1, 200, 12, 2, 128}, AttentionCase{1, 300, 12, 2, 64}}) {
    SCOPED_TRACE(testing::PrintToString(c));
    Inputs in = prepare(c);
    for (const char* warps : {"default", "wgmma", "8", "4"}) {
      for (const char* heads_per_block : {"6", "3", "2", "1"}) {
        expect_backward(in, warps, heads_per_block);
      }
    }
  }
}

// The flash backward kernels: wgmma (the default on an H200; 128-key tiles of two warpgroups),
// mma.sync with 128-key tiles of 8 warps and with 64-key tiles of 4 warps
// (SHARDTRAIN_TEST_ATTENTION_KERNEL=mma, _BACKWARD_WARPS=8 or 4), each with the whole GQA group
// in a block (dK, dV stored once) and with one head a block (fp32 atomics): all must give the
// reference gradients. T = 77, 100: a single 128-key tile over two query tiles, keys past T; 129: a
// last key tile with one real key; 192: a last key tile whose upper warps hold only padding keys;
// 200, 300, 1000: ragged last tiles of every size; GQA groups 1 to 4.
TEST_F(CudaAttentionKernelTest, BackwardForEveryKernel) {
  for (const AttentionCase c : {AttentionCase{1, 1, 2, 1, 64}, AttentionCase{2, 77, 4, 2, 64},
                                AttentionCase{1, 77, 2, 1, 128}, AttentionCase{1, 100, 4, 1, 64},
                                AttentionCase{2, 100, 4, 2, 128}, AttentionCase{1, 129, 2, 1, 64},
                                AttentionCase{1, 129, 4, 1, 128}, AttentionCase{2, 192, 4, 2, 64},
                                AttentionCase{1, 192, 2, 2, 128}, AttentionCase{1, 200, 6, 2, 64},
                                AttentionCase{1, 200, 6, 2, 128}, AttentionCase{1, 300, 4, 2, 64},
                                AttentionCase{1, 300, 8, 2, 128}, AttentionCase{1, 1000, 4, 2, 64},
                                AttentionCase{1, 1000, 4, 2, 128}}) {
    SCOPED_TRACE(testing::PrintToString(c));
    Inputs in = prepare(c);
    const std::string whole_group = std::to_string(c.heads / c.kv_heads);
    for (const char* warps : {"default", "wgmma", "8", "4"}) {
      for (const std::string& heads_per_block : {whole_group, std::string("1")}) {
        expect_backward(in, warps, heads_per_block);
      }
    }
  }
}

// The forward kernels: on an H200 the warp-specialised TMA kernel (cuda_attention_ws_forward.cu)
// by default (the launch is counted: it must have run), the cp.async wgmma kernel
// (cuda_attention_wgmma_forward.cu) under SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma; the mma.sync
// kernel under
// SHARDTRAIN_TEST_ATTENTION_KERNEL=mma with 128-row query
// tiles of 8 warps, or 64-row tiles of 4 warps under SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS=4.
// All must give the reference output and lse. T = 1, 77, 100, 300, 1000: ragged last tiles of
// every size; 129 and 192: a last 128-row tile whose upper warps (warpgroup) hold only padding
// rows and skip or mask K/V tiles past the sequence; 256, 1000: several 128-key tiles.
TEST_F(CudaAttentionKernelTest, ForwardForEveryKernel) {
  struct Kernel {
    const char* name;
    const char* kernel_hook;  // SHARDTRAIN_TEST_ATTENTION_KERNEL, or null: the default
    const char* warps;        // SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS
  };
  for (const AttentionCase c :
       {AttentionCase{1, 1, 2, 1, 64}, AttentionCase{2, 77, 4, 2, 64},
        AttentionCase{1, 100, 4, 1, 128}, AttentionCase{1, 129, 2, 1, 128},
        AttentionCase{2, 192, 4, 2, 64}, AttentionCase{1, 200, 6, 2, 128},
        AttentionCase{2, 256, 4, 2, 128}, AttentionCase{1, 300, 4, 2, 64},
        AttentionCase{1, 1000, 4, 2, 128}, AttentionCase{1, 1000, 8, 2, 64}}) {
    SCOPED_TRACE(testing::PrintToString(c));
    Inputs in = prepare(c);
    Pair &out = in.out, &lse = in.lse;
    for (const Kernel kernel :
         {Kernel{"default", nullptr, "8"}, Kernel{"wgmma", "wgmma", "8"},
          Kernel{"mma 8 warps", "mma", "8"}, Kernel{"mma 4 warps", "mma", "4"}}) {
      if (kernel.kernel_hook != nullptr) {
        ::setenv("SHARDTRAIN_TEST_ATTENTION_KERNEL", kernel.kernel_hook, 1);
      }
      ::setenv("SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS", kernel.warps, 1);
      poison(out.gpu);
      poison(lse.gpu);
      const int64_t ws_before = cuda_kernels::warp_specialised_launches().forward;
      gpu_->attention_forward(in.q.gpu, in.k.gpu, in.v.gpu, in.scale, out.gpu, lse.gpu);
      ::unsetenv("SHARDTRAIN_TEST_ATTENTION_KERNEL");
      ::unsetenv("SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS");
      if (std::string(kernel.name) == "default" && warp_specialised_applies(in)) {
        EXPECT_EQ(cuda_kernels::warp_specialised_launches().forward, ws_before + 1)
            << "the warp-specialised forward did not run";
      }
      EXPECT_BF16_CLOSE(out) << "forward kernel " << kernel.name;
      EXPECT_LE(error(lse), 1e-5) << "forward kernel " << kernel.name;
    }
  }
}

// A Hopper GPU with a 90a build runs the warp-specialised kernels by default (so the forward and
// backward kernel tests above checked them, at both head dims) and the cp.async wgmma kernels
// under SHARDTRAIN_TEST_ATTENTION_KERNEL=wgmma; no launch fell back (the TMA descriptors were
// made).
TEST_F(CudaAttentionKernelTest, WarpSpecialisedKernelsAreTheHopperDefault) {
  if (cuda_kernels::device_limits().compute_capability() != 90 ||
      !cuda_kernels::wgmma_kernels_compiled()) {
    GTEST_SKIP() << "not a Hopper GPU with a 90a build: no warp-specialised kernel here";
  }
  for (const int d : {64, 128}) {
    const cuda_kernels::AttentionShape s{1, 1000, 4, 2, d};
    EXPECT_EQ(cuda_kernels::attention_forward_config(DType::kBF16, s).kernel,
              cuda_kernels::AttentionKernel::kWgmmaWs);
    EXPECT_EQ(cuda_kernels::attention_backward_config(DType::kBF16, s).kernel,
              cuda_kernels::AttentionKernel::kWgmmaWs);
    ::setenv("SHARDTRAIN_TEST_ATTENTION_KERNEL", "wgmma", 1);
    const cuda_kernels::AttentionKernel forward =
        cuda_kernels::attention_forward_config(DType::kBF16, s).kernel;
    const cuda_kernels::AttentionKernel backward =
        cuda_kernels::attention_backward_config(DType::kBF16, s).kernel;
    ::unsetenv("SHARDTRAIN_TEST_ATTENTION_KERNEL");
    EXPECT_EQ(forward, cuda_kernels::AttentionKernel::kWgmma);
    EXPECT_EQ(backward, cuda_kernels::AttentionKernel::kWgmma);
  }
  EXPECT_EQ(cuda_kernels::warp_specialised_launches().fallbacks, 0);
}

// The kernel configurations of every GPU kind of the reference deployments, run here under
// that kind's limits (cuda_dispatch.h set_device_limits_override; the launchers raise each
// kernel's shared memory only after checking it against those limits): A100 (163 KB, the 8-warp
// mma.sync kernels), L4 and A10G (99 KB: 4-warp forward and single-stage 4-warp backward at
// D = 128), H100 (wgmma where this build has it). Forward and backward against the CPU.
TEST_F(CudaAttentionKernelTest, EveryGpuKindsConfigurationMatchesTheCpu) {
  const cuda_kernels::DeviceLimits before = cuda_kernels::device_limits();  // maybe an override
  const size_t present = before.shared_per_block_optin;
  for (const char* kind : {"a100", "a10g", "l4", "h100"}) {
    const std::optional<cuda_kernels::DeviceLimits> limits =
        cuda_kernels::device_limits_preset(kind);
    ASSERT_TRUE(limits.has_value());
    if (limits->shared_per_block_optin > present) {
      std::printf("%s: skipped, more shared memory than this GPU has\n", kind);
      continue;
    }
    cuda_kernels::set_device_limits_override(limits);
    for (const AttentionCase c : {AttentionCase{1, 300, 4, 2, 128}, AttentionCase{2, 200, 6, 2, 64},
                                  AttentionCase{1, 129, 2, 1, 128}}) {
      SCOPED_TRACE(std::string(kind) + " " + testing::PrintToString(c));
      const cuda_kernels::AttentionShape s{c.batch, c.seq, c.heads, c.kv_heads, c.head_dim};
      const cuda_kernels::AttentionConfig forward =
          cuda_kernels::attention_forward_config(DType::kBF16, s);
      const cuda_kernels::AttentionConfig backward =
          cuda_kernels::attention_backward_config(DType::kBF16, s);
      EXPECT_LE(forward.shared_bytes, limits->shared_per_block_optin);
      EXPECT_LE(backward.shared_bytes, limits->shared_per_block_optin);
      std::printf("%s D=%d: forward %s %d warps (%zu B), backward %s %d warps %d stages (%zu B)\n",
                  kind, c.head_dim, cuda_kernels::attention_kernel_name(forward.kernel),
                  forward.warps, forward.shared_bytes,
                  cuda_kernels::attention_kernel_name(backward.kernel), backward.warps,
                  backward.stages, backward.shared_bytes);
      Inputs in = prepare(c);  // the forward ran under the override
      Pair &out = in.out, &lse = in.lse;
      EXPECT_BF16_CLOSE(out);
      EXPECT_LE(error(lse), 1e-5);
      expect_backward(in, "default");
      expect_backward(in, "default", "1");  // one head a block: dK / dV through fp32 atomics
    }
  }
  cuda_kernels::set_device_limits_override(before);
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

// Timing of attention at the benchmark shape (Qwen2.5-1.5B, T=4096, micro-batch 2) and at
// Llama-3.2-1B's (32 heads, 8 kv heads, head dim 64), run with the gpu tests because attention
// dominates the step; also appended to $OUT/attention-timing.txt when OUT is set (the device
// session's output folder). Forward and backward are timed with the default kernel
// (warp-specialised wgmma on an H200), the cp.async wgmma kernel and both mma.sync block shapes
// (8 and 4 warps). Checks only that outputs are finite.
TEST_F(CudaOpsTest, DISABLED_AttentionThroughputBenchShape) {
  for (const AttentionCase c :
       {AttentionCase{2, 4096, 12, 2, 128}, AttentionCase{2, 4096, 32, 8, 64}}) {
    const int64_t B = c.batch, T = c.seq, H = c.heads, K = c.kv_heads, D = c.head_dim;
    const Shape q_shape{B, T, H, D}, kv_shape{B, T, K, D};
    auto device = [&](Shape shape, DType dtype) {
      return gpu_tensor(random(shape.numel()), dtype, shape);
    };
    Tensor q = device(q_shape, DType::kBF16), k = device(kv_shape, DType::kBF16);
    Tensor v = device(kv_shape, DType::kBF16), out = device(q_shape, DType::kBF16);
    Tensor lse = device({B, H, T}, DType::kF32), dout = device(q_shape, DType::kBF16);
    Tensor dq = device(q_shape, DType::kBF16), dk = device(kv_shape, DType::kBF16);
    Tensor dv = device(kv_shape, DType::kBF16);
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const double flops = 4.0 * B * H * T * T * D / 2;  // causal
    // warps "default": the default kernel (warp-specialised wgmma on an H200); "wgmma": the
    // cp.async wgmma kernel; "8", "4": the mma.sync kernel.
    const auto time_forward = [&](const std::string& warps) {
      const bool mma = warps != "wgmma" && warps != "default";
      if (mma) ::setenv("SHARDTRAIN_TEST_ATTENTION_KERNEL", "mma", 1);
      if (warps == "wgmma") ::setenv("SHARDTRAIN_TEST_ATTENTION_KERNEL", "wgmma", 1);
      ::setenv("SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS", mma ? warps.c_str() : "8", 1);
      const double ms = time_ms([&] { gpu_->attention_forward(q, k, v, scale, out, lse); }, 10);
      ::unsetenv("SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS");
      ::unsetenv("SHARDTRAIN_TEST_ATTENTION_KERNEL");
      return ms;
    };
    const auto time_backward = [&](const std::string& warps) {
      const bool mma = warps != "wgmma" && warps != "default";
      if (mma) ::setenv("SHARDTRAIN_TEST_ATTENTION_KERNEL", "mma", 1);
      if (warps == "wgmma") ::setenv("SHARDTRAIN_TEST_ATTENTION_KERNEL", "wgmma", 1);
      ::setenv("SHARDTRAIN_TEST_ATTENTION_BACKWARD_WARPS", mma ? warps.c_str() : "8", 1);
      const double ms = time_ms(
          [&] { gpu_->attention_backward(dout, q, k, v, out, lse, scale, dq, dk, dv); }, 10);
      ::unsetenv("SHARDTRAIN_TEST_ATTENTION_BACKWARD_WARPS");
      ::unsetenv("SHARDTRAIN_TEST_ATTENTION_KERNEL");
      return ms;
    };
    // The defaults last: out and lse of the default forward feed the backward.
    const double forward4_ms = time_forward("4");
    const double forward8_ms = time_forward("8");
    const double forward_cp_ms = time_forward("wgmma");
    const double forward_ms = time_forward("default");
    const double backward4_ms = time_backward("4");
    const double backward8_ms = time_backward("8");
    const double backward_cp_ms = time_backward("wgmma");
    const double backward_ms = time_backward("default");
    char line[768];
    std::snprintf(
        line, sizeof(line),
        "attention B=%ld T=%ld H=%ld K=%ld D=%ld bf16: forward %.3f ms (%.1f TFLOP/s) "
        "default, cp.async wgmma %.3f ms (%.1f TFLOP/s), mma.sync %.3f ms (%.1f TFLOP/s) 8 "
        "warps, %.3f ms (%.1f TFLOP/s) 4 warps; backward (TFLOP/s at 2.5x forward flops) "
        "%.3f ms (%.1f TFLOP/s) "
        "default, cp.async wgmma %.3f ms (%.1f TFLOP/s), mma.sync %.3f ms (%.1f TFLOP/s) 8 "
        "warps, %.3f ms (%.1f TFLOP/s) 4 warps\n",
        static_cast<long>(B), static_cast<long>(T), static_cast<long>(H), static_cast<long>(K),
        static_cast<long>(D), forward_ms, flops / forward_ms * 1e-9, forward_cp_ms,
        flops / forward_cp_ms * 1e-9, forward8_ms, flops / forward8_ms * 1e-9, forward4_ms,
        flops / forward4_ms * 1e-9, backward_ms, 2.5 * flops / backward_ms * 1e-9, backward_cp_ms,
        2.5 * flops / backward_cp_ms * 1e-9, backward8_ms, 2.5 * flops / backward8_ms * 1e-9,
        backward4_ms, 2.5 * flops / backward4_ms * 1e-9);
    std::printf("%s", line);
    if (const char* out_dir = std::getenv("OUT")) {
      if (FILE* file = std::fopen((std::string(out_dir) + "/attention-timing.txt").c_str(), "a")) {
        std::fputs(line, file);
        std::fclose(file);
      }
    }
    for (const Tensor* t : {&out, &dq, &dk, &dv}) {
      const std::vector<float> values = download(*t);
      for (size_t i = 0; i < values.size(); i += 4099) ASSERT_TRUE(std::isfinite(values[i])) << i;
    }
  }
}

// Timing, not a check: run with --gtest_also_run_disabled_tests on the GPU machine. Shapes of
// the benchmark model Qwen2.5-1.5B (MLP, norms, lm-head loss; sequence 4096, micro-batch 2).
// Attention at this shape: DISABLED_AttentionThroughputBenchShape above.
TEST_F(CudaOpsTest, DISABLED_Throughput) {
  const auto time_ms = [&](const std::function<void()>& body) { return this->time_ms(body, 5); };
  const int64_t B = 2, T = 4096, C = 1536, F = 8960;
  auto device = [&](Shape shape, DType dtype) {
    return gpu_tensor(random(shape.numel()), dtype, shape);
  };
  const int64_t N = B * T;
  Tensor x = device({N, C}, DType::kBF16), dx = device({N, C}, DType::kBF16);
  // The MLP's gate (or up) projection, and both as one GEMM (weights back to back).
  for (const int64_t O : {F, 2 * F}) {
    Tensor w = device({O, C}, DType::kBF16), dw = device({O, C}, DType::kF32);
    Tensor y = device({N, O}, DType::kBF16), dy = device({N, O}, DType::kBF16);
    const double gemm_flops = 2.0 * N * C * O;
    const double fwd_ms = time_ms([&] { gpu_->linear_forward(x, w, Tensor(), y); });
    const double bwd_ms =
        time_ms([&] { gpu_->linear_backward(dy, x, w, dx, dw, Tensor(), false, true); });
    std::printf(
        "linear N=%ld I=%ld O=%ld: forward %.3f ms (%.0f TFLOP/s), backward (dx bf16 + "
        "dW f32) %.3f ms (%.0f TFLOP/s)\n",
        N, C, O, fwd_ms, gemm_flops / fwd_ms * 1e-9, bwd_ms, 2 * gemm_flops / bwd_ms * 1e-9);
  }
  // RMSNorm at the Qwen (1536) and Llama-3.2-1B (2048) widths.
  for (const int64_t channels : {C, int64_t{2048}}) {
    Tensor norm_x = device({N, channels}, DType::kBF16), weight = device({channels}, DType::kBF16);
    Tensor rstd = device({N}, DType::kF32), normed = device({N, channels}, DType::kBF16);
    Tensor norm_dx = device({N, channels}, DType::kBF16);
    Tensor dweight = device({channels}, DType::kF32);
    const double norm_ms =
        time_ms([&] { gpu_->rmsnorm_forward(norm_x, weight, 1e-6f, normed, rstd); });
    const double backward_ms = time_ms([&] {
      gpu_->rmsnorm_backward(normed, norm_x, weight, rstd, norm_dx, dweight, true, true);
    });
    std::printf("rmsnorm N=%ld C=%ld: forward %.3f ms (%.0f GB/s), backward %.3f ms (%.0f GB/s)\n",
                N, channels, norm_ms, 4.0 * N * channels / norm_ms * 1e-6, backward_ms,
                8.0 * N * channels / backward_ms * 1e-6);
  }
  const int64_t V = 151936, rows = 1024;
  Tensor logits = device({rows, V}, DType::kBF16);
  std::vector<int32_t> target_values(rows, 5);
  Pair targets = ints(target_values, {rows});
  Tensor loss = device({1}, DType::kF32);
  const double ce_ms =
      time_ms([&] { gpu_->cross_entropy(logits, targets.gpu, 1.0f, loss, false); });
  std::printf("cross_entropy rows=%ld V=%ld (loss only): %.3f ms (%.0f GB/s)\n", rows, V, ce_ms,
              2.0 * rows * V / ce_ms * 1e-6);
  // The lm-head chunk of the Qwen2.5-1.5B benchmark (8192 tokens in 5 chunks), with dlogits.
  const int64_t chunk_rows = 1664;
  Tensor chunk = device({chunk_rows, V}, DType::kBF16);
  Pair chunk_targets = ints(std::vector<int32_t>(chunk_rows, 5), {chunk_rows});
  const double ce_grad_ms =
      time_ms([&] { gpu_->cross_entropy(chunk, chunk_targets.gpu, 1.0f, loss, true); });
  std::printf("cross_entropy rows=%ld V=%ld (loss and dlogits): %.3f ms (%.0f GB/s)\n", chunk_rows,
              V, ce_grad_ms, 6.0 * chunk_rows * V / ce_grad_ms * 1e-6);
  // The lm head's GEMMs per chunk size: each chunk's dW GEMM reads and writes the fp32 head
  // gradient (V x C), so larger chunks pass over it fewer times per step.
  Tensor head = device({V, C}, DType::kBF16), dhead = device({V, C}, DType::kF32);
  for (const int64_t rows_per_chunk : {int64_t{1664}, int64_t{2816}, int64_t{4096}}) {
    Tensor chunk_logits = device({rows_per_chunk, V}, DType::kBF16);
    Tensor chunk_x = device({rows_per_chunk, C}, DType::kBF16);
    Tensor chunk_dx = device({rows_per_chunk, C}, DType::kBF16);
    const double head_ms = time_ms([&] {
      gpu_->linear_forward(chunk_x, head, Tensor(), chunk_logits);
      gpu_->linear_backward(chunk_logits, chunk_x, head, chunk_dx, dhead, Tensor(), false, true);
    });
    std::printf(
        "lm head chunk rows=%ld V=%ld: forward + backward %.3f ms (%.0f TFLOP/s, %.3f ms "
        "per 8192 tokens)\n",
        rows_per_chunk, V, head_ms, 6.0 * rows_per_chunk * V * C / head_ms * 1e-9,
        head_ms * 8192.0 / static_cast<double>(rows_per_chunk));
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
