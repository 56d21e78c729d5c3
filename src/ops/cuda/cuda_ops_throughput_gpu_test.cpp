// Timings, not checks (DISABLED_: run with --gtest_also_run_disabled_tests on the GPU machine,
// as tools/device/gpu_tests.sh does): attention at the benchmark shapes under each kernel, and
// the MLP, norms and lm-head loss of the benchmark model.
#include <gtest/gtest.h>

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

// Timing of attention at the benchmark shape (Qwen2.5-1.5B, T=4096, micro-batch 2) and at
// Llama-3.2-1B's (32 heads, 8 kv heads, head dim 64), run with the gpu tests because attention
// dominates the step; also appended to $OUT/attention-timing.txt when OUT is set (the device
// session's output folder). Forward and backward are timed with the default kernel
// (warp-specialised wgmma on an H200), the cp.async wgmma kernel and both mma.sync block shapes
// (8 and 4 warps); "default" is the table's kernel (the forward's choice by timing off, so the
// two wgmma forwards are both timed here). Checks only that outputs are finite.
TEST_F(CudaOpsTest, DISABLED_AttentionThroughputBenchShape) {
  const shardtrain::testing::ScopedEnv table_kernels("SHARDTRAIN_ATTENTION_AUTOTUNE", "0");
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
      const ScopedKernelOverrides forced(attention_kernel(warps));
      const double ms = time_ms([&] { gpu_->attention_forward(q, k, v, scale, out, lse); }, 10);
      return ms;
    };
    const auto time_backward = [&](const std::string& warps) {
      const ScopedKernelOverrides forced(attention_kernel(warps));
      const double ms = time_ms(
          [&] { gpu_->attention_backward(dout, q, k, v, out, lse, scale, dq, dk, dv); }, 10);
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

}  // namespace
}  // namespace shardtrain
