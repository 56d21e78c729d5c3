// The FP8 path of the CUDA backend: the amax and cast kernels bit for bit against the host's
// conversion (cuda_fp8.h's __nv_cvt_float_to_fp8, round-to-nearest-even, saturating), and the
// FP8 linears' three GEMMs (forward x W^T, dgrad dout W, wgrad dout^T x) against an fp64
// reference over the same quantised inputs (the host quantises exactly as the kernels do, which
// the first test proves). Also: delayed scaling (the one-pass cast against its amax history,
// and the linears' sites across calls), the MLP's fused SwiGLU forward and backward, the
// gradient GEMMs with and without fast accumulation, Fp8Gemm's algorithm choice by timing
// (results unchanged, accumulations added once), the bf16 fallback for shapes off the multiple
// of 16, the refusal below compute capability 8.9, and the gradient format measurement (e4m3 vs
// e5m2 on heavy-tailed gradients) behind kDefaultFp8GradFormat. Skipped without a GPU, and (but for
// the refusal test) on GPUs without FP8.
#include <cuda_fp8.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "core/testing/test_support.h"
#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_fp8.h"
#include "ops/cuda/cuda_fp8_support.h"
#include "ops/cuda/cuda_gemm_fp8.h"
#include "ops/cuda/cuda_linear_fp8.h"
#include "ops/cuda/testing/cuda_fp8_fixture.h"
#include "ops/fp8_workspace.h"

namespace shardtrain {
namespace {

using namespace cuda_testing;
using cuda_kernels::Fp8Format;

// Host mirror of the cast kernel's arithmetic (same float operations, same conversion).
float scale_for(float amax, Fp8Format format) {
  return amax > 0.0f ? cuda_kernels::fp8_max(format) / amax : 1.0f;
}
uint8_t quantize(float x, float scale, Fp8Format format) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(
      x * scale, __NV_SATFINITE, format == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2));
}
// The value an FP8 byte encodes (written out, independent of the conversion under test).
double decode(uint8_t byte, Fp8Format format) {
  const int mantissa_bits = format == Fp8Format::kE4M3 ? 3 : 2;
  const int bias = format == Fp8Format::kE4M3 ? 7 : 15;
  const int exponent = (byte & 0x7F) >> mantissa_bits;
  const int mantissa = byte & ((1 << mantissa_bits) - 1);
  const double sign = (byte & 0x80) != 0 ? -1.0 : 1.0;
  const double fraction = static_cast<double>(mantissa) / (1 << mantissa_bits);
  if (exponent == 0) return sign * fraction * std::ldexp(1.0, 1 - bias);
  return sign * (1.0 + fraction) * std::ldexp(1.0, exponent - bias);
}

float amax_of(const std::vector<float>& x) {
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  return amax;
}

// A tensor's values as the FP8 GEMM sees them: quantised with the scale of `amax` (default: its
// own, current scaling; delayed scaling passes the history's), dequantised.
std::vector<double> dequantized(const std::vector<float>& x, Fp8Format format, float amax = -1.0f) {
  if (amax < 0) amax = amax_of(x);
  const float scale = scale_for(amax, format);
  const double inv_scale = 1.0f / scale;
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = decode(quantize(x[i], scale, format), format) * inv_scale;
  return out;
}

// ||got - want|| / ||want||; infinity when anything is not finite (an unwritten output).
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(diff / norm);
}

// rows x cols row-major products in fp64: out[r][c] = sum_k a[r][k] b[c][k].
std::vector<double> matmul_nt(const std::vector<double>& a, const std::vector<double>& b,
                              int64_t rows, int64_t cols, int64_t inner) {
  std::vector<double> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double sum = 0;
      for (int64_t k = 0; k < inner; ++k) sum += a[r * inner + k] * b[c * inner + k];
      out[r * cols + c] = sum;
    }
  return out;
}
std::vector<double> transposed(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = x[r * cols + c];
  return out;
}

class Fp8Test : public CudaFp8Test {
 protected:
  // bf16-rounded normal values times a heavy tail exp(tail * normal): gradient-like when tail > 0.
  std::vector<float> normal(int64_t n, float sigma, float tail = 0) {
    std::mt19937 rng(next_seed_++ * 104729u + 3u);
    std::normal_distribution<float> dist(0, 1);
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) {
      const float magnitude = tail > 0 ? std::exp(tail * dist(rng)) : 1.0f;
      x = bf16_to_f32(f32_to_bf16(sigma * dist(rng) * magnitude));
    }
    return v;
  }
  std::vector<uint8_t> download_bytes(const void* device, size_t n) {
    std::vector<uint8_t> bytes(n);
    SHARDTRAIN_CUDA_CHECK(cudaMemcpy(bytes.data(), device, n, cudaMemcpyDeviceToHost));
    return bytes;
  }
  void* device_bytes(size_t n) {
    buffers_.emplace_back(*gpu_, n);
    void* p = buffers_.back().data();
    SHARDTRAIN_CUDA_CHECK(cudaMemset(p, 0xA5, n));  // poison: every byte must be written
    // The default stream does not order against the ops' non-blocking stream: finish here.
    SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
    return p;
  }
};

TEST_F(Fp8Test, AmaxAndCastMatchTheHostBitForBit) {
  const cudaStream_t stream = gpu_ref().stream();
  // 96 x 200: partial 64-wide tiles in both directions; bf16 and f32 inputs; a zero tensor
  // (scale 1) and one whose largest entry saturates both formats' rounding.
  struct Case {
    int64_t rows, cols;
    DType dtype;
    float sigma;
  };
  // The kernel's paths: 16-byte rows and transposed rows (64 x 64, 272 x 400 with 16-row and
  // 16-column partial tiles), 4-element rows (cols off the 16 grid: 200, 1028, 4), 4-element
  // transposed rows (rows off it: 132, 8, 1028), both; a 4 x 4 tensor; 1,028 x 2,320 (153 tiles,
  // 4 by 4 elements at each edge).
  for (const Case& c : {Case{96, 200, DType::kBF16, 3.0f}, Case{64, 64, DType::kF32, 1e-3f},
                        Case{8, 4, DType::kBF16, 0.0f}, Case{132, 1028, DType::kBF16, 40.0f},
                        Case{272, 400, DType::kBF16, 2.0f}, Case{4, 4, DType::kBF16, 1.0f},
                        Case{1028, 2320, DType::kBF16, 1.0f}, Case{132, 208, DType::kF32, 5.0f}})
    for (const Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
      const int64_t n = c.rows * c.cols;
      std::vector<float> x = normal(n, c.sigma);
      if (c.dtype == DType::kF32) {
        std::mt19937 rng(7);
        std::uniform_real_distribution<float> jitter(0.5f, 1.5f);
        for (float& v : x) v *= jitter(rng);  // f32 values off the bf16 grid
      }
      const Tensor input = gpu_tensor(x, c.dtype, Shape{c.rows, c.cols});
      float* scalars = static_cast<float*>(device_bytes(2 * sizeof(float)));
      auto* out = static_cast<uint8_t*>(device_bytes(n));
      auto* out_t = static_cast<uint8_t*>(device_bytes(n));
      cuda_kernels::fp8_amax(c.dtype, input.data(), n, scalars, stream);
      cuda_kernels::fp8_cast(c.dtype, input.data(), c.rows, c.cols, format, scalars, out, out_t,
                             scalars + 1, stream);
      SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
      float device_scalars[2];
      SHARDTRAIN_CUDA_CHECK(
          cudaMemcpy(device_scalars, scalars, sizeof(device_scalars), cudaMemcpyDeviceToHost));
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      ASSERT_EQ(device_scalars[0], amax) << c.rows << "x" << c.cols;
      const float scale = scale_for(amax, format);
      ASSERT_EQ(device_scalars[1], 1.0f / scale);
      const std::vector<uint8_t> got = download_bytes(out, n), got_t = download_bytes(out_t, n);
      for (int64_t r = 0; r < c.rows; ++r)
        for (int64_t col = 0; col < c.cols; ++col) {
          const uint8_t want = quantize(x[r * c.cols + col], scale, format);
          ASSERT_EQ(got[r * c.cols + col], want) << "row " << r << " col " << col;
          ASSERT_EQ(got_t[col * c.rows + r], want) << "transposed, row " << r << " col " << col;
        }
    }
}

TEST_F(Fp8Test, LinearGemmsMatchAnFp64ReferenceOfTheQuantizedInputs) {
  struct Case {
    int64_t rows, in, out;
  };
  // The second: tiles of 64 cut in every dimension; the third: a training-sized GEMM.
  for (const Case& c : {Case{64, 96, 48}, Case{208, 176, 336}, Case{1024, 512, 768}}) {
    SCOPED_TRACE(::testing::Message() << "N=" << c.rows << " I=" << c.in << " O=" << c.out);
    const std::vector<float> x = normal(c.rows * c.in, 1.0f);
    const std::vector<float> w = normal(c.out * c.in, 0.05f);
    const std::vector<float> bias = normal(c.out, 0.1f);
    const std::vector<float> residual = normal(c.rows * c.out, 1.0f);
    const std::vector<float> dout = normal(c.rows * c.out, 1e-3f, 1.0f);
    const std::vector<float> dx_before = normal(c.rows * c.in, 1e-3f);
    const std::vector<float> dw_before = normal(c.out * c.in, 1e-2f);
    const Tensor x_g = gpu_tensor(x, DType::kBF16, Shape{c.rows, c.in});
    const Tensor w_g = gpu_tensor(w, DType::kBF16, Shape{c.out, c.in});
    const Tensor bias_g = gpu_tensor(bias, DType::kBF16, Shape{c.out});
    const Tensor residual_g = gpu_tensor(residual, DType::kBF16, Shape{c.rows, c.out});
    const Tensor dout_g = gpu_tensor(dout, DType::kBF16, Shape{c.rows, c.out});
    const std::vector<double> xq = dequantized(x, Fp8Format::kE4M3);
    const std::vector<double> wq = dequantized(w, Fp8Format::kE4M3);
    const std::vector<double> dq = dequantized(dout, cuda_kernels::kDefaultFp8GradFormat);

    // forward, with bias: out = x W^T + b
    const std::vector<double> xw = matmul_nt(xq, wq, c.rows, c.out, c.in);
    std::vector<double> want = xw;
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t o = 0; o < c.out; ++o) want[r * c.out + o] += bias[o];
    Tensor out_g = gpu_tensor(residual, DType::kBF16, Shape{c.rows, c.out});
    poison(out_g);
    gpu_->linear_forward_fp8(x_g, w_g, bias_g, Tensor(), out_g, Fp8Site());
    EXPECT_LE(relative_error(download(out_g), want), 5e-3) << "forward";
    // forward with the residual in the epilogue, in place (out aliases the residual)
    for (size_t i = 0; i < want.size(); ++i) want[i] = xw[i] + residual[i];
    gpu_->linear_forward_fp8(x_g, w_g, Tensor(), residual_g, residual_g, Fp8Site());
    EXPECT_LE(relative_error(download(residual_g), want), 5e-3) << "forward + residual";

    // dgrad accumulated into bf16 dx, wgrad accumulated into f32 dW
    const std::vector<double> dgrad =
        matmul_nt(dq, transposed(wq, c.out, c.in), c.rows, c.in, c.out);
    const std::vector<double> wgrad =
        matmul_nt(transposed(dq, c.rows, c.out), transposed(xq, c.rows, c.in), c.out, c.in, c.rows);
    std::vector<double> want_dx(dgrad.size()), want_dw(wgrad.size());
    for (size_t i = 0; i < dgrad.size(); ++i) want_dx[i] = dgrad[i] + dx_before[i];
    for (size_t i = 0; i < wgrad.size(); ++i) want_dw[i] = wgrad[i] + dw_before[i];
    // The gradient GEMMs without and with cuBLASLt's fast accumulation (the default: its partial
    // sums are promoted to fp32 less often, so the f32 wgrad's bound is looser with it).
    for (const bool fast : {false, true}) {
      SCOPED_TRACE(fast ? "gradient fast accumulation" : "full accumulation");
      gpu_ref().set_fp8_gradient_fast_accumulation(fast);
      const Tensor dx_g = gpu_tensor(dx_before, DType::kBF16, Shape{c.rows, c.in});
      const Tensor dw_g = gpu_tensor(dw_before, DType::kF32, Shape{c.out, c.in});
      gpu_->linear_backward_fp8(dout_g, x_g, w_g, dx_g, dw_g, Tensor(), true, true, Fp8Site());
      const double dx_error = relative_error(download(dx_g), want_dx);
      const double dw_error = relative_error(download(dw_g), want_dw);
      std::printf("N=%ld I=%ld O=%ld fast accumulation %d: dgrad error %.2e, wgrad %.2e\n", c.rows,
                  c.in, c.out, fast ? 1 : 0, dx_error, dw_error);
      EXPECT_LE(dx_error, 5e-3) << "dgrad";
      EXPECT_LE(dw_error, fast ? 5e-3 : 1e-3) << "wgrad";
      // Overwriting (not accumulating), dW in bf16, dx skipped (a first layer's input).
      const Tensor dw16_g = gpu_tensor(dw_before, DType::kBF16, Shape{c.out, c.in});
      poison(dw16_g);
      gpu_->linear_backward_fp8(dout_g, x_g, w_g, Tensor(), dw16_g, Tensor(), false, false,
                                Fp8Site());
      EXPECT_LE(relative_error(download(dw16_g), wgrad), 5e-3) << "wgrad, bf16, overwritten";
    }
    gpu_ref().set_fp8_gradient_fast_accumulation(cuda_kernels::fp8_grad_fast_accum_enabled());
  }
}

// Delayed scaling's cast: scale from the state's amax, this tensor's amax recorded in the same
// pass (several blocks: the last one updates the state), the overflow policy (saturate this
// call; a non-finite amax is not recorded).
class Fp8DelayedCastTest : public Fp8Test,
                           public ::testing::WithParamInterface<std::pair<int64_t, int64_t>> {};

// 132 x 1028: partial tiles, 4-element rows both ways; 2048 x 4608: 576 tiles of 128 x 128, more
// than the blocks resident at once on a 132-SM GPU, so blocks loop over tiles (and the amax of
// several tiles a block reaches the history).
INSTANTIATE_TEST_SUITE_P(Shapes, Fp8DelayedCastTest,
                         ::testing::Values(std::pair<int64_t, int64_t>{132, 1028},
                                           std::pair<int64_t, int64_t>{2048, 4608}));

TEST_P(Fp8DelayedCastTest, ScalesByTheHistoryAndRecordsTheAmax) {
  using cuda_kernels::kFp8ScaleAmaxIndex;
  using cuda_kernels::kFp8StateFloats;
  const cudaStream_t stream = gpu_ref().stream();
  const int64_t rows = GetParam().first, cols = GetParam().second, n = rows * cols;
  const std::vector<float> x1 = normal(n, 1.0f);
  std::vector<float> x2 = x1, x3 = x1;
  for (float& v : x2) v *= 4.0f;  // exact in bf16
  x3[n / 2] = INFINITY;
  const float amax1 = amax_of(x1);
  auto* state = static_cast<float*>(device_bytes(kFp8StateFloats * sizeof(float)));
  SHARDTRAIN_CUDA_CHECK(cudaMemset(state, 0, kFp8StateFloats * sizeof(float)));
  SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
  auto* inv_scale = static_cast<float*>(device_bytes(256));
  auto* out = static_cast<uint8_t*>(device_bytes(n));
  auto* out_t = static_cast<uint8_t*>(device_bytes(n));
  struct Step {
    const std::vector<float>* x;
    float scale_amax;  // what the cast must scale by
    float recorded;    // what it must write to its history slot
    float next;        // the scale amax it must leave
  };
  // 1: bootstrap (the amax pass fills the scale slot): current scaling, amax1 recorded.
  // 2: 4 x1 scaled by amax1: three quarters of the range saturate; 4 amax1 recorded.
  // 3: x1 with an inf, scaled by the history's max; the inf is not recorded.
  const Step steps[] = {{&x1, amax1, amax1, amax1},
                        {&x2, amax1, 4 * amax1, 4 * amax1},
                        {&x3, 4 * amax1, 0.0f, 4 * amax1}};
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(::testing::Message() << "cast " << i + 1);
    const Step& step = steps[i];
    const Tensor input = gpu_tensor(*step.x, DType::kBF16, Shape{rows, cols});
    if (i == 0) {
      cuda_kernels::fp8_amax(DType::kBF16, input.data(), n, state + kFp8ScaleAmaxIndex, stream);
    }
    cuda_kernels::fp8_cast_delayed(DType::kBF16, input.data(), rows, cols, Fp8Format::kE4M3, state,
                                   i, out, out_t, inv_scale, stream);
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> got_state(kFp8StateFloats);
    SHARDTRAIN_CUDA_CHECK(cudaMemcpy(got_state.data(), state, kFp8StateFloats * sizeof(float),
                                     cudaMemcpyDeviceToHost));
    float got_inv_scale = 0;
    SHARDTRAIN_CUDA_CHECK(
        cudaMemcpy(&got_inv_scale, inv_scale, sizeof(float), cudaMemcpyDeviceToHost));
    const float scale = scale_for(step.scale_amax, Fp8Format::kE4M3);
    ASSERT_EQ(got_inv_scale, 1.0f / scale);
    ASSERT_EQ(got_state[i], step.recorded);
    ASSERT_EQ(got_state[kFp8ScaleAmaxIndex], step.next);
    ASSERT_EQ(got_state[kFp8ScaleAmaxIndex + 1], 0.0f) << "running amax left behind";
    ASSERT_EQ(got_state[kFp8ScaleAmaxIndex + 2], 0.0f) << "block counter left behind";
    const std::vector<uint8_t> got = download_bytes(out, n), got_t = download_bytes(out_t, n);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t col = 0; col < cols; ++col) {
        const uint8_t want = quantize((*step.x)[r * cols + col], scale, Fp8Format::kE4M3);
        ASSERT_EQ(got[r * cols + col], want) << "row " << r << " col " << col;
        ASSERT_EQ(got_t[col * rows + r], want) << "transposed, row " << r << " col " << col;
      }
  }
}

// Pointers 8 bytes off the 16-byte grid (the contract asks 4 elements' alignment of x, 4 bytes
// of the outputs) take the 4-element path even where the shape would allow 16-byte accesses.
TEST_F(Fp8Test, CastOffTheSixteenByteGridMatchesTheHost) {
  const cudaStream_t stream = gpu_ref().stream();
  const int64_t rows = 160, cols = 144, n = rows * cols;
  const std::vector<float> x = normal(n + 4, 2.0f);
  const Tensor input = gpu_tensor(x, DType::kBF16, Shape{n + 4});
  const void* shifted = static_cast<const uint16_t*>(input.data()) + 4;  // 8 bytes on
  float* scalars = static_cast<float*>(device_bytes(2 * sizeof(float)));
  auto* out = static_cast<uint8_t*>(device_bytes(n + 16)) + 4;
  auto* out_t = static_cast<uint8_t*>(device_bytes(n + 16)) + 4;
  cuda_kernels::fp8_amax(DType::kBF16, shifted, n, scalars, stream);
  cuda_kernels::fp8_cast(DType::kBF16, shifted, rows, cols, Fp8Format::kE4M3, scalars, out, out_t,
                         scalars + 1, stream);
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> values(x.begin() + 4, x.end());
  const float scale = scale_for(amax_of(values), Fp8Format::kE4M3);
  const std::vector<uint8_t> got = download_bytes(out, n), got_t = download_bytes(out_t, n);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t col = 0; col < cols; ++col) {
      const uint8_t want = quantize(values[r * cols + col], scale, Fp8Format::kE4M3);
      ASSERT_EQ(got[r * cols + col], want) << "row " << r << " col " << col;
      ASSERT_EQ(got_t[col * rows + r], want) << "transposed, row " << r << " col " << col;
    }
}

// The SwiGLU kernels' FP8 outputs against the unfused path bit for bit: swiglu_forward then
// fp8_cast_delayed of its act, swiglu_backward then fp8_cast_delayed of dgate and dup, from the
// same states (scale amax half the tensor's, so the largest values saturate), on shapes taking
// each access path: 16-byte both ways (256 x 320), 4-element both ways (132 x 1028), and more
// tiles than resident blocks (2048 x 2304: blocks loop over tiles).
TEST_F(Fp8Test, SwigluKernelsMatchTheUnfusedCastsBitForBit) {
  using cuda_kernels::kFp8ScaleAmaxIndex;
  using cuda_kernels::kFp8StateFloats;
  const cudaStream_t stream = gpu_ref().stream();
  const Fp8Format grad = cuda_kernels::kDefaultFp8GradFormat;
  // A state whose scale amax is `amax`, history empty.
  auto state_with = [&](float amax) {
    std::vector<float> host(kFp8StateFloats, 0.0f);
    host[kFp8ScaleAmaxIndex] = amax;
    auto* state = static_cast<float*>(device_bytes(kFp8StateFloats * sizeof(float)));
    SHARDTRAIN_CUDA_CHECK(
        cudaMemcpy(state, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
    return state;
  };
  auto state_of = [&](const float* state) {
    std::vector<float> host(kFp8StateFloats);
    SHARDTRAIN_CUDA_CHECK(
        cudaMemcpy(host.data(), state, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return host;
  };
  const std::pair<int64_t, int64_t> shapes[] = {{256, 320}, {132, 1028}, {2048, 2304}};
  for (const auto& shape_case : shapes) {
    const int64_t rows = shape_case.first, cols = shape_case.second;
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    const int64_t n = rows * cols;
    const Shape shape{rows, cols};
    const Tensor dact = gpu_tensor(normal(n, 1e-2f, 1.0f), DType::kBF16, shape);
    const Tensor gate = gpu_tensor(normal(n, 2.0f), DType::kBF16, shape);
    const Tensor up = gpu_tensor(normal(n, 1.0f), DType::kBF16, shape);
    const Tensor act_ref = gpu_tensor(std::vector<float>(n), DType::kBF16, shape);
    const Tensor dgate = gpu_tensor(std::vector<float>(n), DType::kBF16, shape);
    const Tensor dup = gpu_tensor(std::vector<float>(n), DType::kBF16, shape);
    gpu_->swiglu_forward(gate, up, act_ref);
    gpu_->swiglu_backward(dact, gate, up, dgate, dup);
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
    const float amax_act = amax_of(download(act_ref)), amax_g = amax_of(download(dgate)),
                amax_u = amax_of(download(dup));
    auto* bytes = static_cast<uint8_t*>(device_bytes(12 * n));
    auto q = [&](int i) { return bytes + i * n; };
    auto* inv = static_cast<float*>(device_bytes(6 * 256));
    auto inv_at = [&](int i) { return inv + 64 * i; };
    // Forward: act and its FP8 copies.
    float* s_ref = state_with(amax_act / 2);
    float* s_fused = state_with(amax_act / 2);
    const Tensor act = gpu_tensor(std::vector<float>(n), DType::kBF16, shape);
    poison(act);
    SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());
    cuda_kernels::fp8_cast_delayed(DType::kBF16, act_ref.data(), rows, cols, Fp8Format::kE4M3,
                                   s_ref, 2, q(0), q(1), inv_at(0), stream);
    cuda_kernels::swiglu_forward_fp8(gate.data(), up.data(), rows, cols, s_fused, 2, act.data(),
                                     q(2), q(3), inv_at(1), stream);
    // Backward: dgate and dup, both layouts each.
    float* sg_ref = state_with(amax_g / 2);
    float* su_ref = state_with(amax_u / 2);
    float* sg = state_with(amax_g / 2);
    float* su = state_with(amax_u / 2);
    cuda_kernels::fp8_cast_delayed(DType::kBF16, dgate.data(), rows, cols, grad, sg_ref, 5, q(4),
                                   q(5), inv_at(2), stream);
    cuda_kernels::fp8_cast_delayed(DType::kBF16, dup.data(), rows, cols, grad, su_ref, 7, q(6),
                                   q(7), inv_at(3), stream);
    cuda_kernels::swiglu_backward_fp8(dact.data(), gate.data(), up.data(), rows, cols, grad, sg, 5,
                                      su, 7, q(8), q(9), q(10), q(11), inv_at(4), inv_at(5),
                                      stream);
    SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(download(act), download(act_ref)) << "act";
    const char* names[] = {"act", "act^T", "dgate", "dgate^T", "dup", "dup^T"};
    const int ref[] = {0, 1, 4, 5, 6, 7}, fused[] = {2, 3, 8, 9, 10, 11};
    for (int i = 0; i < 6; ++i)
      EXPECT_TRUE(download_bytes(q(fused[i]), n) == download_bytes(q(ref[i]), n)) << names[i];
    const std::vector<uint8_t> all_inv = download_bytes(inv, 6 * 256);
    const auto* invs = reinterpret_cast<const float*>(all_inv.data());
    EXPECT_EQ(invs[64 * 1], invs[0]) << "act's inverse scale";
    EXPECT_EQ(invs[64 * 4], invs[64 * 2]) << "dgate's inverse scale";
    EXPECT_EQ(invs[64 * 5], invs[64 * 3]) << "dup's inverse scale";
    EXPECT_EQ(state_of(s_fused), state_of(s_ref)) << "act's state";
    EXPECT_EQ(state_of(sg), state_of(sg_ref)) << "dgate's state";
    EXPECT_EQ(state_of(su), state_of(su_ref)) << "dup's state";
    EXPECT_EQ(state_of(sg)[5], amax_g) << "dgate's amax recorded";
  }
}

// The FP8 linears with a site (what the model passes): delayed scaling across calls of one site,
// and the reuse of the previous call's x (gate then up) only when it is that same x.
TEST_F(Fp8Test, SitesScaleByTheirHistoryAndReuseOnlyTheSameInput) {
  const int64_t rows = 256, in = 128, out = 192;
  const std::vector<float> x1 = normal(rows * in, 1.0f), xb = normal(rows * in, 2.0f);
  std::vector<float> x2 = x1;
  for (float& v : x2) v *= 4.0f;
  const std::vector<float> w = normal(out * in, 0.05f);
  const float amax1 = amax_of(x1);
  const Tensor x1_g = gpu_tensor(x1, DType::kBF16, Shape{rows, in});
  const Tensor x2_g = gpu_tensor(x2, DType::kBF16, Shape{rows, in});
  const Tensor xb_g = gpu_tensor(xb, DType::kBF16, Shape{rows, in});
  const Tensor w_g = gpu_tensor(w, DType::kBF16, Shape{out, in});
  const std::vector<double> wq = dequantized(w, Fp8Format::kE4M3);
  auto forward = [&](const Tensor& x, Fp8Site site) {
    const Tensor y = gpu_tensor(std::vector<float>(rows * out), DType::kBF16, Shape{rows, out});
    poison(y);
    gpu_->linear_forward_fp8(x, w_g, Tensor(), Tensor(), y, site);
    return download(y);
  };
  auto reference = [&](const std::vector<float>& x, float amax) {
    return matmul_nt(dequantized(x, Fp8Format::kE4M3, amax), wq, rows, out, in);
  };
  const Fp8Site site{0, false};
  // First call: no history, so current scaling, bit for bit.
  EXPECT_EQ(forward(x1_g, site), forward(x1_g, Fp8Site())) << "bootstrap";
  // Second: 4 x1 scaled by amax1 (saturating), not by its own amax.
  const std::vector<float> second = forward(x2_g, site);
  EXPECT_LE(relative_error(second, reference(x2, amax1)), 5e-3) << "delayed";
  EXPECT_GT(relative_error(second, reference(x2, 4 * amax1)), 5e-2) << "scaled as current";
  // Third: x1 scaled by the history's max, 4 amax1.
  EXPECT_LE(relative_error(forward(x1_g, site), reference(x1, 4 * amax1)), 5e-3) << "history max";

  // Reuse: a different x after the previous call must be quantised, the same x may be reused.
  forward(x1_g, Fp8Site{1, false});
  EXPECT_LE(relative_error(forward(xb_g, Fp8Site{2, true}), reference(xb, -1)), 5e-3) << "other x";
  EXPECT_LE(relative_error(forward(xb_g, Fp8Site{3, true}), reference(xb, -1)), 5e-3) << "same x";

  // Backward: wgrad of up after gate (same x: reused x^T), then with another x (not reused).
  const std::vector<float> dout = normal(rows * out, 1e-3f, 1.0f);
  const Tensor dout_g = gpu_tensor(dout, DType::kBF16, Shape{rows, out});
  const std::vector<double> dq = dequantized(dout, cuda_kernels::kDefaultFp8GradFormat);
  auto wgrad = [&](const Tensor& x, Fp8Site site) {
    const Tensor dw = gpu_tensor(std::vector<float>(out * in), DType::kF32, Shape{out, in});
    poison(dw);
    gpu_->linear_backward_fp8(dout_g, x, w_g, Tensor(), dw, Tensor(), false, false, site);
    return download(dw);
  };
  auto wgrad_reference = [&](const std::vector<float>& x) {
    return matmul_nt(transposed(dq, rows, out),
                     transposed(dequantized(x, Fp8Format::kE4M3), rows, in), out, in, rows);
  };
  wgrad(x1_g, Fp8Site{10, false});
  EXPECT_LE(relative_error(wgrad(x1_g, Fp8Site{11, true}), wgrad_reference(x1)), 1e-3)
      << "wgrad, reused x";
  EXPECT_LE(relative_error(wgrad(xb_g, Fp8Site{12, true}), wgrad_reference(xb)), 1e-3)
      << "wgrad, other x";
}

// The MLP's fused backward (SwiGLU's gradients cast to FP8 in the SwiGLU kernel) against the
// unfused composition with current scales: the first call with sites starts the histories
// (unfused), the second, with the same tensors, scales by the same amaxes, fused. dgate and dup
// are left unwritten only by the fused path, which proves it ran.
TEST_F(Fp8Test, FusedSwigluBackwardMatchesTheUnfusedLinears) {
  const int64_t rows = 256, hidden = 128, inter = 320;
  // A (r x c) tensor of `values`, or poisoned when `values` is empty.
  auto tensor = [&](std::vector<float> values, int64_t r, int64_t c, DType dtype) {
    const bool outputs = values.empty();
    if (outputs) values.resize(r * c);
    const Tensor t = gpu_tensor(values, dtype, Shape{r, c});
    if (outputs) poison(t);
    return t;
  };
  const Tensor dact = tensor(normal(rows * inter, 1e-2f, 1.0f), rows, inter, DType::kBF16);
  const Tensor gate = tensor(normal(rows * inter, 2.0f), rows, inter, DType::kBF16);
  const Tensor up = tensor(normal(rows * inter, 1.0f), rows, inter, DType::kBF16);
  const Tensor x = tensor(normal(rows * hidden, 1.0f), rows, hidden, DType::kBF16);
  const Tensor wg = tensor(normal(inter * hidden, 0.05f), inter, hidden, DType::kBF16);
  const Tensor wu = tensor(normal(inter * hidden, 0.05f), inter, hidden, DType::kBF16);
  struct Result {
    std::vector<float> dx, dwg, dwu, dgate;
  };
  auto run = [&](Fp8Site gate_site, Fp8Site up_site) {
    const Tensor dgate = tensor({}, rows, inter, DType::kBF16);
    const Tensor dup = tensor({}, rows, inter, DType::kBF16);
    const Tensor dx = tensor({}, rows, hidden, DType::kBF16);
    const Tensor dwg = tensor({}, inter, hidden, DType::kF32);
    const Tensor dwu = tensor({}, inter, hidden, DType::kF32);
    gpu_->swiglu_linears_backward_fp8(dact, gate, up, x, wg, wu, dgate, dup, dx, dwg, dwu, false,
                                      gate_site, up_site);
    return Result{download(dx), download(dwg), download(dwu), download(dgate)};
  };
  const Result unfused = run(Fp8Site(), Fp8Site());
  ASSERT_TRUE(std::isfinite(unfused.dgate[0])) << "the unfused path writes dgate";
  const Fp8Site gate_site{30, false}, up_site{31, true};
  const Result first = run(gate_site, up_site);
  EXPECT_TRUE(std::isfinite(first.dgate[0])) << "a first call has no history: unfused";
  const Result fused = run(gate_site, up_site);
  EXPECT_TRUE(std::isnan(fused.dgate[0])) << "the fused path leaves dgate unwritten";
  auto error = [](const std::vector<float>& got, const std::vector<float>& want) {
    return relative_error(got, std::vector<double>(want.begin(), want.end()));
  };
  EXPECT_LE(error(fused.dx, unfused.dx), 2e-3) << "dx";
  EXPECT_LE(error(fused.dwg, unfused.dwg), 2e-3) << "gate's weight gradient";
  EXPECT_LE(error(fused.dwu, unfused.dwu), 2e-3) << "up's weight gradient";
  EXPECT_LE(error(first.dx, unfused.dx), 2e-3) << "dx, first call";
}

// The MLP's fused forward (act cast to FP8 in the SwiGLU kernel) against swiglu_forward and the
// FP8 linear: the first call of a site has no x history (refused: the caller runs the unfused
// path, which starts it); then, with the same inputs, the history's amax is this act's, so the
// fused call's act and output equal the unfused ones bit for bit.
TEST_F(Fp8Test, FusedSwigluForwardMatchesTheUnfusedPath) {
  const int64_t rows = 256, hidden = 128, inter = 320;
  const Tensor gate = gpu_tensor(normal(rows * inter, 2.0f), DType::kBF16, Shape{rows, inter});
  const Tensor up = gpu_tensor(normal(rows * inter, 1.0f), DType::kBF16, Shape{rows, inter});
  const Tensor w = gpu_tensor(normal(hidden * inter, 0.05f), DType::kBF16, Shape{hidden, inter});
  const Tensor residual =
      gpu_tensor(normal(rows * hidden, 1.0f), DType::kBF16, Shape{rows, hidden});
  auto output = [&](int64_t r, int64_t c) {
    const Tensor t = gpu_tensor(std::vector<float>(r * c), DType::kBF16, Shape{r, c});
    poison(t);
    return t;
  };
  // Unfused, as the default Ops::swiglu_linear_forward_fp8: SwiGLU, then the FP8 linear.
  const Tensor act_ref = output(rows, inter), out_ref = output(rows, hidden);
  gpu_->swiglu_forward(gate, up, act_ref);
  const Fp8Site site{40, false};
  gpu_->linear_forward_fp8(act_ref, w, Tensor(), residual, out_ref, site);  // starts the history
  const Tensor act = output(rows, inter), out = output(rows, hidden);
  gpu_->swiglu_linear_forward_fp8(gate, up, act, w, residual, out, site);
  EXPECT_EQ(download(act), download(act_ref)) << "act";
  EXPECT_EQ(download(out), download(out_ref)) << "out = residual + act W^T";
  // The kernel itself on Fp8Linear: refused without a history, accepted with one.
  Fp8Linear linear(gpu_ref().stream());
  const Fp8LinearShape shape{rows, inter, hidden};
  const Fp8Site fresh{41, false};
  EXPECT_FALSE(linear.swiglu_forward(shape, gate.data(), up.data(), act.data(), w.data(), nullptr,
                                     out.data(), fresh));
  linear.forward(shape, act_ref.data(), w.data(), nullptr, nullptr, out_ref.data(), fresh);
  const Tensor out2 = output(rows, hidden);
  EXPECT_TRUE(linear.swiglu_forward(shape, gate.data(), up.data(), nullptr, w.data(), nullptr,
                                    out2.data(), fresh));
  EXPECT_EQ(download(out2), download(out_ref)) << "Fp8Linear, no act written, no residual";
}

// The down projection's kept input (Fp8Site::input_kept_in_fp8): the fused forward leaves act
// holding the product's FP8 transposed copy and its dequantisation factor instead of the bf16
// product, and the site's next backward with that act reads the copy for the weight gradient.
// A first call starts the history itself (its own amax); the second, with the product 4 times
// larger (up doubled twice: exact), scales by the first's amax (delayed: it saturates), and the
// weight gradient must be that saturated copy's, not a fresh cast's. Forward against the
// unfused path with a twin site bit for bit, the kept bytes and factor against the host's
// quantisation bit for bit, dx and dW against fp64 references.
TEST_F(Fp8Test, KeptSwigluInputFeedsTheDownProjectionsWeightGradient) {
  // Whatever the default of SHARDTRAIN_FP8_KEEP_DOWN_INPUT (ops/ops_switches.h), on here.
  const shardtrain::testing::ScopedEnv keep_on("SHARDTRAIN_FP8_KEEP_DOWN_INPUT", "1");
  const int64_t rows = 256, hidden = 128, inter = 320;
  const Shape NF{rows, inter}, NC{rows, hidden};
  const std::vector<float> up_v = normal(rows * inter, 1.0f);
  std::vector<float> up4_v = up_v;
  for (float& v : up4_v) v *= 4.0f;
  const std::vector<float> w_v = normal(hidden * inter, 0.05f);
  const std::vector<float> dout_v = normal(rows * hidden, 1e-3f, 1.0f);
  const Tensor gate = gpu_tensor(normal(rows * inter, 2.0f), DType::kBF16, NF);
  const Tensor up = gpu_tensor(up_v, DType::kBF16, NF);
  const Tensor up4 = gpu_tensor(up4_v, DType::kBF16, NF);
  const Tensor w = gpu_tensor(w_v, DType::kBF16, Shape{hidden, inter});
  const Tensor residual = gpu_tensor(normal(rows * hidden, 1.0f), DType::kBF16, NC);
  const Tensor dout = gpu_tensor(dout_v, DType::kBF16, NC);
  auto output = [&](Shape shape, DType dtype = DType::kBF16) {
    const Tensor t = gpu_tensor(std::vector<float>(shape.numel()), dtype, shape);
    poison(t);
    return t;
  };
  // The products as the kernels compute them (bf16-rounded), for the references.
  const Tensor act1_g = output(NF), act4_g = output(NF);
  gpu_->swiglu_forward(gate, up, act1_g);
  gpu_->swiglu_forward(gate, up4, act4_g);
  const std::vector<float> act1 = download(act1_g), act4 = download(act4_g);
  for (size_t i = 0; i < act1.size(); ++i) ASSERT_EQ(act4[i], 4.0f * act1[i]) << i;
  const float amax1 = amax_of(act1);

  const Fp8Site kept{60, false, true}, twin{61, false, false};
  const Tensor act = output(NF);
  ASSERT_GE(act.bytes(), fp8_kept_input_bytes(rows, inter));
  auto expect_kept = [&](const std::vector<float>& values, float amax, const char* what) {
    const std::vector<uint8_t> bytes =
        download_bytes(act.data(), fp8_kept_input_bytes(rows, inter));
    const float scale = scale_for(amax, Fp8Format::kE4M3);
    int64_t wrong = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < inter; ++c)
        wrong += bytes[c * rows + r] != quantize(values[r * inter + c], scale, Fp8Format::kE4M3);
    EXPECT_EQ(wrong, 0) << what << ": bytes of act^T";
    float inv_scale;
    std::memcpy(&inv_scale, bytes.data() + fp8_copy_bytes(rows * inter), sizeof inv_scale);
    EXPECT_EQ(inv_scale, 1.0f / scale) << what << ": its factor";
  };
  // First forward: no history; the kept site starts it from its own product's amax, as the
  // twin's unfused first call does (current scaling).
  const Tensor out = output(NC), out_twin = output(NC);
  gpu_->swiglu_linear_forward_fp8(gate, up, act, w, residual, out, kept);
  gpu_->linear_forward_fp8(act1_g, w, Tensor(), residual, out_twin, twin);
  EXPECT_EQ(download(out), download(out_twin)) << "first forward";
  expect_kept(act1, amax1, "first forward");
  // Its backward consumes the copy (dW from act1 at amax1).
  const std::vector<double> dq = dequantized(dout_v, cuda_kernels::kDefaultFp8GradFormat);
  const std::vector<double> wq = dequantized(w_v, Fp8Format::kE4M3);
  auto wgrad_reference = [&](const std::vector<float>& x, float amax) {
    return matmul_nt(transposed(dq, rows, hidden),
                     transposed(dequantized(x, Fp8Format::kE4M3, amax), rows, inter), hidden, inter,
                     rows);
  };
  {
    const Tensor dw = output(Shape{hidden, inter}, DType::kF32);
    gpu_->linear_backward_fp8(dout, act, w, Tensor(), dw, Tensor(), false, false, kept);
    EXPECT_LE(relative_error(download(dw), wgrad_reference(act1, amax1)), 5e-3) << "first dW";
  }
  // Second forward, 4 x the product: scaled by amax1 (saturating), bit for bit the twin's
  // second (delayed) call.
  gpu_->swiglu_linear_forward_fp8(gate, up4, act, w, residual, out, kept);
  gpu_->linear_forward_fp8(act4_g, w, Tensor(), residual, out_twin, twin);
  EXPECT_EQ(download(out), download(out_twin)) << "second forward";
  expect_kept(act4, amax1, "second forward");
  // Backward: dx from dout and W; dW from the kept (saturated) copy. A fresh cast of x^T would
  // scale by the history's max, 4 amax1, and not saturate.
  const Tensor dx = output(NF);
  const Tensor dw = output(Shape{hidden, inter}, DType::kF32);
  gpu_->linear_backward_fp8(dout, act, w, dx, dw, Tensor(), false, false, kept);
  const std::vector<float> dw_kept = download(dw);
  EXPECT_LE(relative_error(download(dx),
                           matmul_nt(dq, transposed(wq, hidden, inter), rows, inter, hidden)),
            5e-3)
      << "dx";
  EXPECT_LE(relative_error(dw_kept, wgrad_reference(act4, amax1)), 5e-3) << "dW, kept copy";
  EXPECT_GT(relative_error(dw_kept, wgrad_reference(act4, 4 * amax1)), 5e-2)
      << "dW as from a fresh cast";
  // A site with a kept input given another (bf16) x casts that x: only the buffer the forward
  // wrote is read as FP8.
  gpu_->swiglu_linear_forward_fp8(gate, up4, act, w, residual, out, kept);
  gpu_->linear_backward_fp8(dout, act4_g, w, Tensor(), dw, Tensor(), false, false, kept);
  EXPECT_LE(relative_error(download(dw), wgrad_reference(act4, 4 * amax1)), 5e-3)
      << "dW of another x";
  // Without the flag the product stays bf16 (the fused forward's usual contract).
  const Tensor act_plain = output(NF);
  gpu_->swiglu_linear_forward_fp8(gate, up4, act_plain, w, residual, out, twin);
  EXPECT_EQ(download(act_plain), act4) << "bf16 product without the flag";
}

TEST_F(Fp8Test, ShapesOffTheMultipleOf16RunTheBf16Path) {
  // N = 40 tokens: the FP8 GEMM needs multiples of 16, so the same result as linear_forward.
  const Tensor x = gpu_tensor(normal(40 * 64, 1.0f), DType::kBF16, Shape{40, 64});
  const Tensor w = gpu_tensor(normal(24 * 64, 0.1f), DType::kBF16, Shape{24, 64});
  const Tensor fp8_out = gpu_tensor(std::vector<float>(40 * 24), DType::kBF16, Shape{40, 24});
  const Tensor bf16_out = gpu_tensor(std::vector<float>(40 * 24), DType::kBF16, Shape{40, 24});
  poison(fp8_out);
  gpu_->linear_forward_fp8(x, w, Tensor(), Tensor(), fp8_out, Fp8Site());
  gpu_->linear_forward(x, w, Tensor(), bf16_out);
  EXPECT_EQ(download(fp8_out), download(bf16_out));
}

// Fp8Gemm's algorithm choice by timing (cuda_tuning.h) against the heuristic's first
// accepted candidate: both results match the fp64 reference, and the timing runs leave no trace
// (an in-place accumulation adds its product exactly once, a residual input is not written).
// Each mode gets a fresh Fp8Gemm, so the first call of every key makes the choice.
TEST_F(Fp8Test, GemmAlgorithmTimingKeepsTheResults) {
  const cudaStream_t stream = gpu_ref().stream();
  constexpr int64_t kN = 1024, kI = 512, kO = 768;  // D (row-major N x O) = x (N x I) W^T
  const std::vector<float> x = normal(kN * kI, 1.0f);
  const std::vector<float> w = normal(kO * kI, 0.05f);
  const std::vector<float> bias = normal(kO, 0.1f);
  const std::vector<float> before = normal(kN * kO, 1.0f);  // the product's magnitude (~1.1)
  // FP8 operands and their dequantisation factors, as the cast kernels would write them.
  auto upload_fp8 = [&](const std::vector<float>& values, const float** scale_out) {
    const float scale = scale_for(amax_of(values), Fp8Format::kE4M3);
    std::vector<uint8_t> bytes(values.size());
    for (size_t i = 0; i < values.size(); ++i)
      bytes[i] = quantize(values[i], scale, Fp8Format::kE4M3);
    auto* device = static_cast<uint8_t*>(device_bytes(bytes.size()));
    SHARDTRAIN_CUDA_CHECK(cudaMemcpy(device, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
    auto* inverse = static_cast<float*>(device_bytes(256));
    const float inverse_scale = 1.0f / scale;
    SHARDTRAIN_CUDA_CHECK(
        cudaMemcpy(inverse, &inverse_scale, sizeof(float), cudaMemcpyHostToDevice));
    *scale_out = inverse;
    return device;
  };
  const float *w_scale = nullptr, *x_scale = nullptr;
  const uint8_t* w8 = upload_fp8(w, &w_scale);
  const uint8_t* x8 = upload_fp8(x, &x_scale);
  SHARDTRAIN_CUDA_CHECK(cudaDeviceSynchronize());  // the ops' stream does not order against these
  const std::vector<double> product =
      matmul_nt(dequantized(x, Fp8Format::kE4M3), dequantized(w, Fp8Format::kE4M3), kN, kO, kI);
  const Tensor bias_g = gpu_tensor(bias, DType::kBF16, Shape{kO});

  for (const bool timed : {false, true}) {
    SCOPED_TRACE(timed ? "algorithm timed" : "heuristic's first");
    Fp8Gemm gemm(stream, timed);
    auto call_into = [&](const Tensor& out, float beta) {
      Fp8GemmCall call;
      call.m = kO;
      call.n = kN;
      call.k = kI;
      call.a = w8;
      call.a_scale = w_scale;
      call.b = x8;
      call.b_scale = x_scale;
      call.c = out.data();
      call.c_dtype = out.dtype();
      call.ldc = kO;
      call.beta = beta;
      return call;
    };
    auto finish = [&](const Fp8GemmCall& call, const Tensor& out) {
      gemm.run(call);
      SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream));
      return download(out);
    };
    auto plus = [&](const std::vector<float>& add, double times) {
      std::vector<double> want(product.size());
      for (size_t i = 0; i < want.size(); ++i) want[i] = times * product[i] + add[i];
      return want;
    };

    // Overwritten f32 output (gradient GEMMs' accumulation, wgrad's dtype).
    const Tensor out32 = gpu_tensor(std::vector<float>(kN * kO), DType::kF32, Shape{kN, kO});
    poison(out32);
    EXPECT_LE(relative_error(finish(call_into(out32, 0), out32), product), 1e-3) << "f32";
    // bf16 output with the bias epilogue and fast accumulation (the forward GEMM).
    const Tensor out16 = gpu_tensor(std::vector<float>(kN * kO), DType::kBF16, Shape{kN, kO});
    poison(out16);
    Fp8GemmCall biased = call_into(out16, 0);
    biased.bias = bias_g.data();
    biased.fast_accumulation = true;
    std::vector<float> bias_rows(product.size());
    for (size_t i = 0; i < bias_rows.size(); ++i) bias_rows[i] = bias[i % kO];
    EXPECT_LE(relative_error(finish(biased, out16), plus(bias_rows, 1)), 5e-3) << "bias";
    // In-place accumulation, f32 and bf16 (wgrad into dW, dgrad into dx): old + product exactly
    // once (a trial run adding into the real output would be off by ~100%); the key's second
    // call (its choice cached) adds once more.
    for (const DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(dtype_name(dtype));
      const Tensor acc = gpu_tensor(before, dtype, Shape{kN, kO});
      const std::vector<float> old = download(acc);  // before, rounded to the dtype
      const double bound = dtype == DType::kF32 ? 1e-3 : 5e-3;
      EXPECT_LE(relative_error(finish(call_into(acc, 1), acc), plus(old, 1)), bound) << "once";
      EXPECT_LE(relative_error(finish(call_into(acc, 1), acc), plus(old, 2)), bound) << "twice";
    }
    // A residual in the epilogue (C read, D another buffer): C unchanged, D = product + C.
    const Tensor residual = gpu_tensor(before, DType::kBF16, Shape{kN, kO});
    const std::vector<float> residual_before = download(residual);
    const Tensor out_res = gpu_tensor(std::vector<float>(kN * kO), DType::kBF16, Shape{kN, kO});
    poison(out_res);
    Fp8GemmCall with_residual = call_into(residual, 1);
    with_residual.d = out_res.data();
    with_residual.fast_accumulation = true;
    EXPECT_LE(relative_error(finish(with_residual, out_res), plus(residual_before, 1)), 5e-3)
        << "residual";
    EXPECT_EQ(download(residual), residual_before) << "the residual was written";

    // Five keys (f32, bias, two accumulating dtypes, residual); with timing, those whose
    // heuristic offers more than one candidate chose by timing.
    if (!timed) {
      EXPECT_EQ(gemm.timed_keys(), 0u);
    } else if (gemm.candidate_count(call_into(out32, 0)) > 1) {
      EXPECT_GE(gemm.timed_keys(), 1u);
    }
    std::printf("%s: %zu of 5 keys timed; f32 key has %zu candidates\n",
                timed ? "timing on" : "timing off", gemm.timed_keys(),
                gemm.candidate_count(call_into(out32, 0)));
  }
}

// Which format suits gradients: dgrad's error against the unquantised product, for gradients
// with a heavy tail (log-normal magnitudes, as activation gradients have) at three spreads.
// Printed: the numbers behind kDefaultFp8GradFormat (cuda_fp8_support.h).
TEST_F(Fp8Test, GradientFormatErrorOnHeavyTailedGradients) {
  const int64_t rows = 512, in = 256, out = 384;
  const std::vector<float> w = normal(out * in, 0.05f);
  const Tensor w_g = gpu_tensor(w, DType::kBF16, Shape{out, in});
  std::vector<double> w_exact(w.begin(), w.end());
  for (const float tail : {0.0f, 1.5f, 3.0f}) {
    const std::vector<float> dout = normal(rows * out, 1e-4f, tail);
    const std::vector<double> exact = matmul_nt(std::vector<double>(dout.begin(), dout.end()),
                                                transposed(w_exact, out, in), rows, in, out);
    const Tensor dout_g = gpu_tensor(dout, DType::kBF16, Shape{rows, out});
    double errors[2] = {};
    for (const Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
      gpu_ref().set_fp8_gradient_format(format);
      const Tensor dx_g = gpu_tensor(std::vector<float>(rows * in), DType::kBF16, Shape{rows, in});
      poison(dx_g);
      const Tensor x_g = gpu_tensor(normal(rows * in, 1.0f), DType::kBF16, Shape{rows, in});
      gpu_->linear_backward_fp8(dout_g, x_g, w_g, dx_g, Tensor(), Tensor(), false, false,
                                Fp8Site());
      errors[format == Fp8Format::kE5M2] = relative_error(download(dx_g), exact);
    }
    gpu_ref().set_fp8_gradient_format(cuda_kernels::kDefaultFp8GradFormat);
    std::printf("dgrad relative error, gradient tail %.1f: e4m3 %.4f, e5m2 %.4f\n", tail, errors[0],
                errors[1]);
    // Both are FP8-accurate products (a few percent); neither may blow up.
    EXPECT_LT(errors[0], 0.1);
    EXPECT_LT(errors[1], 0.1);
  }
}

TEST(Fp8Refusal, BelowComputeCapability89) {
  const auto a100 = cuda_kernels::device_limits_preset("a100");
  ASSERT_TRUE(a100.has_value());
  EXPECT_NE(cuda_kernels::fp8_unsupported_reason(*a100).find("compute capability 8.0"),
            std::string::npos);
  EXPECT_EQ(cuda_kernels::fp8_unsupported_reason(*cuda_kernels::device_limits_preset("l4")), "");
  EXPECT_EQ(cuda_kernels::fp8_unsupported_reason(*cuda_kernels::device_limits_preset("h100")), "");
  if (cuda_device_count() == 0) GTEST_SKIP() << "no GPU: the CudaOps half of the test skipped";
  // The CUDA backend under an A100's limits refuses the FP8 linears with that sentence.
  cuda_kernels::set_device_limits_override(a100);
  {
    std::unique_ptr<Ops> ops = make_cuda_ops();
    EXPECT_NE(ops->fp8_unsupported_reason().find("FP8 needs compute capability 8.9+"),
              std::string::npos);
    DeviceBuffer buffer(*ops, 16 * 16 * 2);
    const Tensor t = buffer.view(DType::kBF16, Shape{16, 16});
    EXPECT_THROW(ops->linear_forward_fp8(t, t, Tensor(), Tensor(), t, Fp8Site()), Error);
  }
  cuda_kernels::set_device_limits_override(std::nullopt);
}

}  // namespace
}  // namespace shardtrain
