// Timings, not checks (DISABLED_: run with --gtest_also_run_disabled_tests on the GPU machine):
// the FP8 linears of the Qwen2.5-1.5B benchmark (8192 tokens: seq 4096, micro-batch 2) split
// into their casts and their GEMMs, by device time (CUDA events on the ops stream, mean of 10
// runs after a warm-up), so a step's FP8 overhead can be assigned to casts, to GEMM rate, or
// to the heuristic's algorithm choice. DISABLED_CastKernelsAtTheBenchShape: the cast kernels
// alone (delayed and current scaling, GB/s of HBM traffic) and the fused SwiGLU casts beside
// bf16's SwiGLU kernels. DISABLED_LinearCastsAndGemmsAtTheBenchShape, per projection shape
// (qkv, o, gate/up, down) of the three benchmark models (Qwen2.5-1.5B and Llama-3.2-1B at 8192
// tokens, Llama-2-7B at 4096: seq 4096, micro-batch 2 and 1), which decide which projections
// run FP8 (model/decoder_model.h):
//   - each cast kernel alone (delayed scaling: x, W forward; dout both layouts, W^T, x^T);
//   - each GEMM (forward with fast accumulation; dgrad and wgrad with and without it), and every
//     cuBLASLt heuristic candidate of it (run() takes the first cuBLASLt accepts: index 0);
//   - the whole Fp8Linear forward and backward (delayed sites, gradient fast accumulation off
//     and on) beside CudaOps's bf16 linear_forward / linear_backward of the same shape, and
//     their ratio.
// DISABLED_KeptSwigluInputAtTheBenchShape: the down projection with its input kept in FP8
// (Fp8Site::input_kept_in_fp8) against the fused forward that writes the bf16 product.
// Then the MLP's fused SwiGLU backward (its kernel alone, and the whole op with four GEMMs)
// beside bf16's swiglu_backward and two linear_backwards. Prints, and appends to
// $OUT/fp8-timing.txt when OUT is set (the device session's output folder).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "ops/cuda/cuda_check.h"
#include "ops/cuda/cuda_fp8.h"
#include "ops/cuda/cuda_fp8_support.h"
#include "ops/cuda/cuda_gemm_fp8.h"
#include "ops/cuda/cuda_kernels.h"
#include "ops/cuda/cuda_linear_fp8.h"
#include "ops/cuda/testing/cuda_fp8_fixture.h"

namespace shardtrain {
namespace {

using namespace cuda_testing;
using cuda_kernels::Fp8Format;

class Fp8ThroughputTest : public CudaFp8Test {
 protected:
  void SetUp() override {
    CudaFp8Test::SetUp();
    if (IsSkipped()) return;
    stream_ = gpu_ref().stream();
    const char* out = std::getenv("OUT");
    if (out != nullptr) log_ = std::fopen((std::string(out) + "/fp8-timing.txt").c_str(), "a");
  }
  void TearDown() override {
    if (log_ != nullptr) std::fclose(log_);
    CudaFp8Test::TearDown();
  }
  void report(const char* format, ...) {
    va_list args;
    va_start(args, format);
    std::vprintf(format, args);
    va_end(args);
    if (log_ != nullptr) {
      va_start(args, format);
      std::vfprintf(log_, format, args);
      va_end(args);
      std::fflush(log_);
    }
  }
  // Mean device time of `body` (work enqueued on the ops stream) over `repeats` runs, after one.
  double device_ms(const std::function<void()>& body, int repeats = 10) {
    body();
    const float ms = elapsed_device_ms(stream_, [&] {
      for (int i = 0; i < repeats; ++i) body();
    });
    return ms / repeats;
  }
  template <typename T = uint8_t>
  T* bytes(size_t n) {
    buffers_.emplace_back(*gpu_, n);
    return static_cast<T*>(buffers_.back().data());
  }
  // A zeroed delayed-scaling state, bootstrapped by one amax pass over `src` (as a first cast).
  float* state_for(const void* src, int64_t n) {
    float* state = bytes<float>(cuda_kernels::kFp8StateFloats * sizeof(float));
    SHARDTRAIN_CUDA_CHECK(
        cudaMemsetAsync(state, 0, cuda_kernels::kFp8StateFloats * sizeof(float), stream_));
    cuda_kernels::fp8_amax(DType::kBF16, src, n, state + cuda_kernels::kFp8ScaleAmaxIndex, stream_);
    return state;
  }
  // Times one cast kernel of a bf16 rows x cols source: delayed scaling from `state` (history
  // slots in turn), or current scaling when `state` is null (the cast alone: `amax` holds the
  // tensor's amax from an earlier pass, not timed). One line: time and HBM bytes moved a second.
  void time_cast(const char* what, const void* from, int64_t rows, int64_t cols, Fp8Format format,
                 float* state, uint8_t* row_major, uint8_t* transposed) {
    float* inv_scale = bytes<float>(256);
    float* amax = bytes<float>(256);
    if (state == nullptr) cuda_kernels::fp8_amax(DType::kBF16, from, rows * cols, amax, stream_);
    int pos = 0;
    const double ms = device_ms([&] {
      if (state == nullptr) {
        cuda_kernels::fp8_cast(DType::kBF16, from, rows, cols, format, amax, row_major, transposed,
                               inv_scale, stream_);
      } else {
        cuda_kernels::fp8_cast_delayed(DType::kBF16, from, rows, cols, format, state,
                                       pos++ % cuda_kernels::kFp8AmaxHistory, row_major, transposed,
                                       inv_scale, stream_);
      }
    });
    const double moved = rows * cols * (2.0 + (row_major ? 1 : 0) + (transposed ? 1 : 0));
    report("  cast %-27s %5ld x %5ld: %7.1f us (%4.0f GB/s)\n", what, rows, cols, 1e3 * ms,
           moved / ms * 1e-6);
  }
  // Times `call` with run() and with every heuristic candidate; one line.
  void time_gemm(Fp8Gemm& gemm, const char* what, const Fp8GemmCall& call) {
    const double flops = 2.0 * call.m * call.n * call.k;
    const double ms = device_ms([&] { gemm.run(call); });
    std::string line;
    const size_t candidates = gemm.candidate_count(call);
    double best = ms;
    for (size_t i = 0; i < candidates; ++i) {
      if (!gemm.run_candidate(call, i)) {
        line += " -";
        continue;
      }
      const double t = device_ms([&] { gemm.run_candidate(call, i); });
      best = std::min(best, t);
      char cell[32];
      std::snprintf(cell, sizeof cell, " %.0f", 1e3 * t);
      line += cell;
    }
    report(
        "  %-24s m=%5ld n=%5ld k=%5ld: %7.1f us %5.0f TFLOP/s (best candidate %5.0f); "
        "candidates us:%s\n",
        what, call.m, call.n, call.k, 1e3 * ms, flops / ms * 1e-9, flops / best * 1e-9,
        line.c_str());
  }

  cudaStream_t stream_ = nullptr;
  std::FILE* log_ = nullptr;
};

// The cast kernels alone at the bench shape, delayed beside current scaling (the cast without
// its amax bookkeeping), and the fused SwiGLU casts beside bf16's swiglu kernels: what a cast
// reaches against HBM (bytes read and written once each).
TEST_F(Fp8ThroughputTest, DISABLED_CastKernelsAtTheBenchShape) {
  const int64_t N = 8192, C = 1536, F = 8960;
  const int64_t largest = N * F;
  const Tensor source = gpu_tensor(random(largest), DType::kBF16, Shape{largest});
  const Tensor small = gpu_tensor(random(largest, -1e-2f, 1e-2f), DType::kBF16, Shape{largest});
  auto* q1 = bytes(largest);
  auto* q2 = bytes(largest);
  const Fp8Format grad = cuda_kernels::kDefaultFp8GradFormat;
  report("FP8 casts, N=%ld tokens (device time, mean of 10)\n", N);
  struct Case {
    const char* what;
    int64_t rows, cols;
    bool row_major, transposed;
    bool gradient;
  };
  const Case cases[] = {{"x of qkv/o/gate (fwd)", N, C, true, false, false},
                        {"x of down (fwd)", N, F, true, false, false},
                        {"W gate/up (fwd)", F, C, true, false, false},
                        {"dout gate/up (both)", N, F, true, true, true},
                        {"dout qkv (both)", N, 2048, true, true, true},
                        {"x^T of qkv/o/gate", N, C, false, true, false},
                        {"x^T of down", N, F, false, true, false},
                        {"W^T gate/up", F, C, false, true, false}};
  for (const Case& c : cases) {
    const void* from = c.gradient ? small.data() : source.data();
    const Fp8Format format = c.gradient ? grad : Fp8Format::kE4M3;
    uint8_t* row_major = c.row_major ? q1 : nullptr;
    uint8_t* transposed = c.transposed ? q2 : nullptr;
    const std::string delayed = std::string(c.what) + " delayed";
    const std::string current = std::string(c.what) + " current";
    time_cast(delayed.c_str(), from, c.rows, c.cols, format, state_for(from, c.rows * c.cols),
              row_major, transposed);
    time_cast(current.c_str(), from, c.rows, c.cols, format, nullptr, row_major, transposed);
  }
  // SwiGLU: the fused FP8 kernels beside bf16's.
  const Shape shape{N, F};
  const Tensor gate = gpu_tensor(random(N * F, -3, 3), DType::kBF16, shape);
  const Tensor up = gpu_tensor(random(N * F), DType::kBF16, shape);
  const Tensor dact = gpu_tensor(random(N * F, -1e-2f, 1e-2f), DType::kBF16, shape);
  const Tensor act = gpu_tensor(random(N * F), DType::kBF16, shape);
  const Tensor dgate = gpu_tensor(random(N * F), DType::kBF16, shape);
  const Tensor dup = gpu_tensor(random(N * F), DType::kBF16, shape);
  auto* q3 = bytes(largest);
  auto* q4 = bytes(largest);
  auto* inv = bytes<float>(2 * 256);
  const double elements = static_cast<double>(N) * F;
  {
    float* state = state_for(act.data(), N * F);
    int pos = 0;
    const double fwd = device_ms([&] {
      cuda_kernels::swiglu_forward_fp8(gate.data(), up.data(), N, F, state,
                                       pos++ % cuda_kernels::kFp8AmaxHistory, act.data(), q1,
                                       nullptr, inv, stream_);
    });
    const double fwd_t = device_ms([&] {
      cuda_kernels::swiglu_forward_fp8(gate.data(), up.data(), N, F, state,
                                       pos++ % cuda_kernels::kFp8AmaxHistory, act.data(), q1, q2,
                                       inv, stream_);
    });
    const double fwd16 = device_ms([&] { gpu_->swiglu_forward(gate, up, act); });
    report(
        "  swiglu_forward_fp8 (act + FP8 act): %7.1f us (%4.0f GB/s); with FP8 act^T too "
        "%7.1f us (%4.0f GB/s); bf16 swiglu_forward %7.1f us (%4.0f GB/s)\n",
        1e3 * fwd, 7 * elements / fwd * 1e-6, 1e3 * fwd_t, 8 * elements / fwd_t * 1e-6, 1e3 * fwd16,
        6 * elements / fwd16 * 1e-6);
  }
  {
    float* sg = state_for(dact.data(), N * F);
    float* su = state_for(dact.data(), N * F);
    int pos = 0;
    const double bwd = device_ms([&] {
      const int p = pos++ % cuda_kernels::kFp8AmaxHistory;
      cuda_kernels::swiglu_backward_fp8(dact.data(), gate.data(), up.data(), N, F, grad, sg, p, su,
                                        p, q1, q2, q3, q4, inv, inv + 64, stream_);
    });
    const double bwd16 = device_ms([&] { gpu_->swiglu_backward(dact, gate, up, dgate, dup); });
    report(
        "  swiglu_backward_fp8: %7.1f us (%4.0f GB/s: 3 bf16 in, 4 FP8 out); bf16 "
        "swiglu_backward %7.1f us (%4.0f GB/s)\n",
        1e3 * bwd, 10 * elements / bwd * 1e-6, 1e3 * bwd16, 10 * elements / bwd16 * 1e-6);
  }
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

TEST_F(Fp8ThroughputTest, DISABLED_LinearCastsAndGemmsAtTheBenchShape) {
  struct Model {
    const char* name;
    int64_t tokens, hidden, qkv, intermediate;
  };
  const Model models[] = {{"Qwen2.5-1.5B", 8192, 1536, 2048, 8960},
                          {"Llama-3.2-1B", 8192, 2048, 3072, 8192},
                          {"Llama-2-7B", 4096, 4096, 12288, 11008}};
  struct Case {
    const char* name;
    int64_t in, out;
    bool residual;
  };
  // One random bf16 buffer serves as every input (x, W, dout read their first elements), and
  // the whole ops' outputs are views of zeroed buffers of the largest case.
  int64_t largest = 0, largest_weight = 0;
  for (const Model& m : models) {
    largest = std::max({largest, m.tokens * m.intermediate, m.tokens * m.qkv});
    largest_weight = std::max({largest_weight, m.intermediate * m.hidden, m.qkv * m.hidden});
  }
  const Tensor source = gpu_tensor(random(largest), DType::kBF16, Shape{largest});
  const void* src = source.data();
  const Tensor src2 = gpu_tensor(random(largest, -1e-2f, 1e-2f), DType::kBF16, Shape{largest});
  auto* q1 = bytes(largest);  // FP8 copies
  auto* q2 = bytes(largest);
  auto* q3 = bytes(largest);
  auto* q4 = bytes(largest);
  auto* out_bf16 = bytes(largest * 2);
  auto* out_f32 = bytes(largest_weight * 4);
  auto* y_bf16 = bytes(largest * 2);
  auto* dx_bf16 = bytes(largest * 2);
  SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(y_bf16, 0, largest * 2, stream_));
  SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(dx_bf16, 0, largest * 2, stream_));
  auto* scales = bytes<float>(8 * 256);
  const auto scale = [&](int i) { return scales + 64 * i; };
  auto view = [](const void* data, DType dtype, int64_t rows, int64_t cols) {
    return Tensor(const_cast<void*>(data), dtype, Shape{rows, cols}, Device::kCuda);
  };
  Fp8Gemm gemm(stream_);
  const Fp8Format grad = cuda_kernels::kDefaultFp8GradFormat;
  for (const Model& m : models) {
    const int64_t N = m.tokens, C = m.hidden, F = m.intermediate;
    const Case cases[] = {{"qkv", C, m.qkv, false},
                          {"o", C, C, true},
                          {"gate/up", C, F, false},
                          {"down", F, C, true}};
    report("%s FP8 linears, N=%ld tokens (device time, mean of 10; FLOP rates of the GEMM alone)\n",
           m.name, N);
    for (const Case& c : cases) {
      const int64_t I = c.in, O = c.out;
      report("%s %s: N x I -> O = %ld x %ld -> %ld (%.1f GFLOP a GEMM)\n", m.name, c.name, N, I, O,
             2e-9 * N * I * O);
      float* sx = state_for(src, N * I);
      float* sw = state_for(src, O * I);
      float* sd = state_for(src2.data(), N * O);
      time_cast("x (forward)", src, N, I, Fp8Format::kE4M3, sx, q1, nullptr);
      time_cast("W (forward)", src, O, I, Fp8Format::kE4M3, sw, q2, nullptr);
      time_cast("dout (both layouts)", src2.data(), N, O, grad, sd, q3, q4);
      time_cast("W^T (backward)", src, O, I, Fp8Format::kE4M3, sw, nullptr, q2);
      time_cast("x^T (backward)", src, N, I, Fp8Format::kE4M3, sx, nullptr, q1);
      // The GEMMs of cuda_linear_fp8.cpp, over the copies just written (values are beside the
      // point: only the layouts and formats matter for time).
      Fp8GemmCall forward;
      forward.m = O, forward.n = N, forward.k = I;
      forward.a = q2, forward.a_scale = scale(0), forward.b = q1, forward.b_scale = scale(1);
      forward.c_dtype = DType::kBF16, forward.ldc = O, forward.fast_accumulation = true;
      forward.c = out_bf16;
      if (c.residual) {  // as the model's o and down: out = residual + x W^T, D beside C
        forward.c = const_cast<void*>(src);  // N x O bf16 values: the residual
        forward.d = out_bf16;
        forward.beta = 1;
      }
      time_gemm(gemm, c.residual ? "forward (+residual)" : "forward", forward);
      for (const bool fast : {false, true}) {
        Fp8GemmCall dgrad;
        dgrad.m = I, dgrad.n = N, dgrad.k = O;
        dgrad.a = q2, dgrad.a_scale = scale(0), dgrad.b = q3, dgrad.b_format = grad;
        dgrad.b_scale = scale(1), dgrad.c = out_bf16, dgrad.c_dtype = DType::kBF16, dgrad.ldc = I;
        dgrad.fast_accumulation = fast;
        time_gemm(gemm, fast ? "dgrad fast-accum" : "dgrad", dgrad);
        Fp8GemmCall wgrad;
        wgrad.m = I, wgrad.n = O, wgrad.k = N;
        wgrad.a = q1, wgrad.a_scale = scale(0), wgrad.b = q4, wgrad.b_format = grad;
        wgrad.b_scale = scale(1), wgrad.c = out_f32, wgrad.c_dtype = DType::kF32, wgrad.ldc = I;
        wgrad.fast_accumulation = fast;
        time_gemm(gemm, fast ? "wgrad f32 fast-accum" : "wgrad f32", wgrad);
      }
      // Whole ops: Fp8Linear as CudaOps runs it (a site: delayed scaling), and bf16 CudaOps.
      const Tensor x = view(src, DType::kBF16, N, I);
      const Tensor w = view(src, DType::kBF16, O, I);
      const Tensor dout = view(src2.data(), DType::kBF16, N, O);
      const Tensor y = view(y_bf16, DType::kBF16, N, O);
      const Tensor dx = view(dx_bf16, DType::kBF16, N, I);
      const Tensor dw = view(out_f32, DType::kF32, O, I);
      const double flops = 2.0 * N * I * O;
      const Fp8LinearShape shape{N, I, O};
      double fwd8 = 0, bwd8 = 0;  // fast accumulation on: the default
      for (const bool fast : {false, true}) {
        Fp8Linear linear(stream_);
        linear.set_gradient_fast_accumulation(fast);
        const Fp8Site site{0, false};
        const void* residual = c.residual ? y.data() : nullptr;
        const double fwd = device_ms(
            [&] { linear.forward(shape, x.data(), w.data(), nullptr, residual, y.data(), site); });
        const double bwd = device_ms([&] {
          linear.backward(shape, dout.data(), x.data(), w.data(), dx.data(), false, dw.data(),
                          DType::kF32, false, site);
        });
        fwd8 = fwd, bwd8 = bwd;
        report(
            "  Fp8Linear (grad fast-accum %s): forward %7.1f us (%4.0f TFLOP/s), backward "
            "%7.1f us (%4.0f TFLOP/s)\n",
            fast ? "on " : "off", 1e3 * fwd, flops / fwd * 1e-9, 1e3 * bwd, 2 * flops / bwd * 1e-9);
      }
      const double fwd16 = device_ms([&] {
        if (c.residual) {
          gpu_->linear_forward_residual(x, w, y, y);
        } else {
          gpu_->linear_forward(x, w, Tensor(), y);
        }
      });
      const double bwd16 =
          device_ms([&] { gpu_->linear_backward(dout, x, w, dx, dw, Tensor(), false, false); });
      report(
          "  bf16 linear:                    forward %7.1f us (%4.0f TFLOP/s), backward "
          "%7.1f us (%4.0f TFLOP/s)\n",
          1e3 * fwd16, flops / fwd16 * 1e-9, 1e3 * bwd16, 2 * flops / bwd16 * 1e-9);
      report("  %s %s FP8 / bf16 time: forward %.2f, backward %.2f, both %.2f (%s)\n", m.name,
             c.name, fwd8 / fwd16, bwd8 / bwd16, (fwd8 + bwd8) / (fwd16 + bwd16),
             fwd8 + bwd8 < fwd16 + bwd16 ? "FP8 faster" : "bf16 faster");
    }
  }
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

// The MLP's down projection (Qwen2.5-1.5B, 8192 tokens: N x F -> C = 8192 x 8960 -> 1536, the
// residual in the epilogue) from SwiGLU's inputs, forward then backward, with the product kept
// as the FP8 x^T the weight gradient reads (Fp8Site::input_kept_in_fp8: forward writes no bf16
// product, backward casts no x^T) against the fused forward that writes the bf16 product.
TEST_F(Fp8ThroughputTest, DISABLED_KeptSwigluInputAtTheBenchShape) {
  const int64_t N = 8192, C = 1536, F = 8960;
  const Tensor gate = gpu_tensor(random(N * F, -3, 3), DType::kBF16, Shape{N, F});
  const Tensor up = gpu_tensor(random(N * F), DType::kBF16, Shape{N, F});
  const Tensor w = gpu_tensor(random(C * F, -0.05f, 0.05f), DType::kBF16, Shape{C, F});
  const Tensor dout = gpu_tensor(random(N * C, -1e-2f, 1e-2f), DType::kBF16, Shape{N, C});
  auto* act = bytes(N * F * 2);
  auto* act_kept = bytes(N * F * 2);
  auto* y = bytes(N * C * 2);
  auto* dx = bytes(N * F * 2);
  auto* dw = bytes(C * F * 4);
  SHARDTRAIN_CUDA_CHECK(cudaMemsetAsync(y, 0, N * C * 2, stream_));
  Fp8Linear linear(stream_);
  const Fp8LinearShape shape{N, F, C};
  const Fp8Site plain{0, false, false}, kept{1, false, true};
  auto forward = [&](void* a, const Fp8Site& site) {
    EXPECT_TRUE(linear.swiglu_forward(shape, gate.data(), up.data(), a, w.data(), y, y, site));
  };
  auto backward = [&](void* a, const Fp8Site& site) {
    linear.backward(shape, dout.data(), a, w.data(), dx, false, dw, DType::kF32, false, site);
  };
  // The plain site's first forward is refused (no history): start it as the model's first
  // step does, with the unfused linear over a bf16 product.
  cuda_kernels::swiglu_forward(DType::kBF16, gate.data(), up.data(), act, N * F, stream_);
  linear.forward(shape, act, w.data(), nullptr, y, y, plain);
  forward(act_kept, kept);
  backward(act_kept, kept);
  const double f_plain = device_ms([&] { forward(act, plain); });
  const double f_kept = device_ms([&] { forward(act_kept, kept); });
  const double fb_plain = device_ms([&] {
    forward(act, plain);
    backward(act, plain);
  });
  const double fb_kept = device_ms([&] {
    forward(act_kept, kept);
    backward(act_kept, kept);
  });
  report(
      "Down projection from SwiGLU, N=%ld F=%ld C=%ld: forward bf16 product + FP8 x %7.1f us, "
      "kept FP8 x^T + FP8 x %7.1f us; forward + backward %7.1f us against %7.1f us kept "
      "(backward %7.1f against %7.1f)\n",
      N, F, C, 1e3 * f_plain, 1e3 * f_kept, 1e3 * fb_plain, 1e3 * fb_kept,
      1e3 * (fb_plain - f_plain), 1e3 * (fb_kept - f_kept));
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

TEST_F(Fp8ThroughputTest, DISABLED_FusedSwigluBackwardAtTheBenchShape) {
  const int64_t N = 8192, C = 1536, F = 8960;
  const Tensor dact = gpu_tensor(random(N * F, -1e-2f, 1e-2f), DType::kBF16, Shape{N, F});
  const Tensor gate = gpu_tensor(random(N * F, -3, 3), DType::kBF16, Shape{N, F});
  const Tensor up = gpu_tensor(random(N * F), DType::kBF16, Shape{N, F});
  const Tensor x = gpu_tensor(random(N * C), DType::kBF16, Shape{N, C});
  const Tensor wg = gpu_tensor(random(F * C, -0.05f, 0.05f), DType::kBF16, Shape{F, C});
  const Tensor wu = gpu_tensor(random(F * C, -0.05f, 0.05f), DType::kBF16, Shape{F, C});
  const Tensor dgate = gpu_tensor(random(N * F), DType::kBF16, Shape{N, F});
  const Tensor dup = gpu_tensor(random(N * F), DType::kBF16, Shape{N, F});
  const Tensor dx = gpu_tensor(random(N * C), DType::kBF16, Shape{N, C});
  const Tensor dwg = gpu_tensor(random(F * C), DType::kF32, Shape{F, C});
  const Tensor dwu = gpu_tensor(random(F * C), DType::kF32, Shape{F, C});
  const double flops = 4 * 2.0 * N * C * F;
  report("MLP gate+up backward from SwiGLU's gradient, N=%ld C=%ld F=%ld (%.0f GFLOP)\n", N, C, F,
         flops * 1e-9);
  {
    float* sg = state_for(dact.data(), N * F);
    float* su = state_for(dact.data(), N * F);
    auto* q = bytes(4 * N * F);
    auto* inv = bytes<float>(2 * 256);
    int pos = 0;
    const double ms = device_ms([&] {
      const int p = pos++ % cuda_kernels::kFp8AmaxHistory;
      cuda_kernels::swiglu_backward_fp8(
          dact.data(), gate.data(), up.data(), N, F, cuda_kernels::kDefaultFp8GradFormat, sg, p, su,
          p, q, q + N * F, q + 2 * N * F, q + 3 * N * F, inv, inv + 64, stream_);
    });
    report("  swiglu_backward_fp8 kernel alone: %7.1f us (%4.0f GB/s: 3 bf16 in, 4 FP8 out)\n",
           1e3 * ms, 10.0 * N * F / ms * 1e-6);
  }
  for (const bool fast : {false, true}) {
    Fp8Linear linear(stream_);
    linear.set_gradient_fast_accumulation(fast);
    const Fp8Site gate_site{0, false}, up_site{1, true};
    const Fp8LinearShape shape{N, C, F};
    // Starts both sites' dout history (the unfused path), as the model's first step does.
    linear.backward(shape, dact.data(), x.data(), wg.data(), dx.data(), false, dwg.data(),
                    DType::kF32, false, gate_site);
    linear.backward(shape, dact.data(), x.data(), wu.data(), dx.data(), true, dwu.data(),
                    DType::kF32, false, up_site);
    bool fused = true;
    const double ms = device_ms([&] {
      fused = fused && linear.swiglu_backward(shape, dact.data(), gate.data(), up.data(), x.data(),
                                              wg.data(), wu.data(), dx.data(), dwg.data(),
                                              dwu.data(), DType::kF32, false, gate_site, up_site);
    });
    EXPECT_TRUE(fused);
    report("  fused FP8 (grad fast-accum %s): %7.1f us (%4.0f TFLOP/s)\n", fast ? "on " : "off",
           1e3 * ms, flops / ms * 1e-9);
  }
  const double ms16 = device_ms([&] {
    gpu_->swiglu_backward(dact, gate, up, dgate, dup);
    gpu_->linear_backward(dgate, x, wg, dx, dwg, Tensor(), false, false);
    gpu_->linear_backward(dup, x, wu, dx, dwu, Tensor(), true, false);
  });
  const double swiglu16 = device_ms([&] { gpu_->swiglu_backward(dact, gate, up, dgate, dup); });
  report("  bf16 (swiglu_backward %.1f us + 2 linear_backward): %7.1f us (%4.0f TFLOP/s)\n",
         1e3 * swiglu16, 1e3 * ms16, flops / ms16 * 1e-9);
  SHARDTRAIN_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace
}  // namespace shardtrain
