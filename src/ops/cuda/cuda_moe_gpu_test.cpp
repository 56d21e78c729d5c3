// The CUDA mixture-of-experts ops against the CPU reference (ops/cuda/testing/cuda_ops_fixture.h):
// routing forward and backward (with the aux gradient), the dispatch permutation (exactly the
// CPU's: stable, deterministic), gather and combine both ways, and the grouped linears (one
// launch over all experts: cuBLAS grouped, our kernel for the f32 weight gradients; experts with
// no rows included) forward and backward, with
// overwrite and accumulate. Shapes: a Qwen3-MoE-like 64 tokens x top 8 of 16 experts, C 256,
// F 96; the f32 expert weight gradients at other shapes (partial tiles, many experts); the
// Hopper expert GEMM of forward and d(x) (cuda_moe_gemm.h) at both tile widths. Plus a DISABLED_
// timing of the grouped forward and backward at Qwen3-30B-A3B's layer geometry, cuBLAS beside
// our expert GEMM.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "ops/cuda/cuda_moe_gemm.h"
#include "ops/cuda/testing/cuda_ops_fixture.h"

namespace shardtrain::cuda_testing {
namespace {

constexpr int64_t N = 64, E = 16, K = 8, C = 256, F = 96, M = N * K;

class CudaMoeTest : public CudaOpsTest {
 protected:
  // Routing of both backends from the same (bf16-rounded) logits; checks they chose the same.
  void route(bool renormalize, Pair& logits, Pair& expert, Pair& weight, Pair& prob_sum) {
    logits = random_input({N, E}, DType::kBF16, -3, 3);
    expert = ints(std::vector<int32_t>(N * K, -1), {N, K});
    weight = output({N, K}, DType::kF32);
    prob_sum = input(std::vector<float>(E, 0.5f), {E}, DType::kF32);
    cpu_->moe_route(logits.cpu, renormalize, expert.cpu, weight.cpu, prob_sum.cpu);
    gpu_->moe_route(logits.gpu, renormalize, expert.gpu, weight.gpu, prob_sum.gpu);
    std::vector<int32_t> got(N * K);
    gpu_->copy_to_host(got.data(), expert.gpu);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), expert.cpu.i32())) << "different experts";
  }
};

TEST_F(CudaMoeTest, RoutingForwardAndBackwardMatchTheCpu) {
  for (bool renormalize : {true, false}) {
    Pair logits, expert, weight, prob_sum;
    route(renormalize, logits, expert, weight, prob_sum);
    EXPECT_LE(error(weight), 1e-5) << renormalize;
    EXPECT_LE(error(prob_sum), 1e-5) << renormalize;
    const Pair dweight = random_input({N, K}, DType::kF32);
    const Pair aux = random_input({E}, DType::kF32, -0.1f, 0.1f);
    for (bool with_aux : {false, true}) {
      const Pair dlogits = output({N, E});
      const Tensor aux_cpu = with_aux ? aux.cpu : Tensor(), aux_gpu = with_aux ? aux.gpu : Tensor();
      cpu_->moe_route_backward(dweight.cpu, logits.cpu, expert.cpu, weight.cpu, renormalize,
                               aux_cpu, dlogits.cpu);
      gpu_->moe_route_backward(dweight.gpu, logits.gpu, expert.gpu, weight.gpu, renormalize,
                               aux_gpu, dlogits.gpu);
      EXPECT_BF16_CLOSE(dlogits) << renormalize << with_aux;
    }
  }
}

TEST_F(CudaMoeTest, DispatchGatherCombineMatchTheCpu) {
  Pair logits, expert, weight, prob_sum;
  route(true, logits, expert, weight, prob_sum);
  Pair source = ints(std::vector<int32_t>(M, -1), {M}),
       row = ints(std::vector<int32_t>(M, -1), {N, K});
  const std::vector<int64_t> rows_cpu = cpu_->moe_dispatch(expert.cpu, E, source.cpu, row.cpu);
  const std::vector<int64_t> rows_gpu = gpu_->moe_dispatch(expert.gpu, E, source.gpu, row.gpu);
  EXPECT_EQ(rows_gpu, rows_cpu);
  std::vector<int32_t> source_gpu(M), row_gpu(M);
  gpu_->copy_to_host(source_gpu.data(), source.gpu);
  gpu_->copy_to_host(row_gpu.data(), row.gpu);
  EXPECT_TRUE(std::equal(source_gpu.begin(), source_gpu.end(), source.cpu.i32()));
  EXPECT_TRUE(std::equal(row_gpu.begin(), row_gpu.end(), row.cpu.i32()));

  const Pair x = random_input({N, C});
  const Pair x_rows = output({M, C});
  cpu_->moe_gather(x.cpu, source.cpu, x_rows.cpu);
  gpu_->moe_gather(x.gpu, source.gpu, x_rows.gpu);
  EXPECT_LE(error(x_rows), 0.0);  // a copy

  const Pair y = random_input({M, C});
  const Pair residual = random_input({N, C});
  const Pair out = output({N, C});
  cpu_->moe_combine(y.cpu, row.cpu, weight.cpu, residual.cpu, out.cpu);
  gpu_->moe_combine(y.gpu, row.gpu, weight.gpu, residual.gpu, out.gpu);
  EXPECT_BF16_CLOSE(out);

  const Pair dout = random_input({N, C});
  const Pair dy = output({M, C});
  const Pair dweight = output({N, K}, DType::kF32);
  cpu_->moe_combine_backward(dout.cpu, y.cpu, row.cpu, weight.cpu, dy.cpu, dweight.cpu);
  gpu_->moe_combine_backward(dout.gpu, y.gpu, row.gpu, weight.gpu, dy.gpu, dweight.gpu);
  EXPECT_BF16_CLOSE(dy);
  EXPECT_LE(error(dweight), 1e-4);

  for (bool accumulate : {false, true}) {
    const Pair dx = accumulate ? random_input({N, C}) : output({N, C});
    cpu_->moe_gather_backward(dy.cpu, row.cpu, dx.cpu, accumulate);
    gpu_->moe_gather_backward(dy.gpu, row.gpu, dx.gpu, accumulate);
    EXPECT_BF16_CLOSE(dx) << accumulate;
  }
}

TEST_F(CudaMoeTest, GroupedLinearsMatchTheCpuWithEmptyExperts) {
  // Uneven rows, two experts with none.
  const std::vector<int64_t> rows = {40, 0, 100, 7, 61, 0, 33, 50, 12, 9, 60, 20, 30, 10, 40, 40};
  ASSERT_EQ(std::accumulate(rows.begin(), rows.end(), int64_t{0}), M);
  const Pair x = random_input({M, C});
  const Pair w = random_input({E, F, C}, DType::kBF16, -0.1f, 0.1f);
  const Pair out = output({M, F});
  cpu_->grouped_linear_forward(x.cpu, w.cpu, rows, out.cpu);
  gpu_->grouped_linear_forward(x.gpu, w.gpu, rows, out.gpu);
  EXPECT_BF16_CLOSE(out);

  const Pair dout = random_input({M, F});
  for (bool accumulate : {false, true}) {
    const Pair dx = accumulate ? random_input({M, C}) : output({M, C});
    const Pair dw =
        accumulate ? random_input({E, F, C}, DType::kF32) : output({E, F, C}, DType::kF32);
    cpu_->grouped_linear_backward(dout.cpu, x.cpu, w.cpu, rows, dx.cpu, dw.cpu, accumulate,
                                  accumulate);
    gpu_->grouped_linear_backward(dout.gpu, x.gpu, w.gpu, rows, dx.gpu, dw.gpu, accumulate,
                                  accumulate);
    EXPECT_BF16_CLOSE(dx) << accumulate;
    EXPECT_BF16_CLOSE(dw) << accumulate;
  }
}

// The f32 expert weight gradients of cuda_moe_wgrad.cu against the CPU: gradients of several
// 128 x 128 tiles with partial ones at both edges, experts without rows, rows that are not a
// multiple of the kernel's 32-row step; more experts than one launch takes (1100: three
// launches); and a width that is not a multiple of 8 (cuBLAS, one GEMM per expert).
TEST_F(CudaMoeTest, ExpertWeightGradientsMatchTheCpu) {
  struct Case {
    int64_t experts, out, in;
    std::vector<int64_t> rows;
  };
  std::vector<int64_t> many(1100, 0);
  for (size_t e = 0; e < many.size(); ++e) many[e] = (e * 7) % 5;  // 0..4 rows, a fifth none
  const std::vector<Case> cases = {
      {4, 264, 392, {37, 0, 100, 5}},
      {1100, 16, 24, many},
      {3, 12, 40, {9, 0, 17}},
  };
  for (const Case& c : cases) {
    const int64_t total = std::accumulate(c.rows.begin(), c.rows.end(), int64_t{0});
    const Pair x = random_input({total, c.in});
    const Pair w = random_input({c.experts, c.out, c.in}, DType::kBF16, -0.05f, 0.05f);
    const Pair dout = random_input({total, c.out});
    for (bool accumulate : {false, true}) {
      const Pair dw = accumulate ? random_input({c.experts, c.out, c.in}, DType::kF32)
                                 : output({c.experts, c.out, c.in}, DType::kF32);
      cpu_->grouped_linear_backward(dout.cpu, x.cpu, w.cpu, c.rows, Tensor(), dw.cpu, false,
                                    accumulate);
      gpu_->grouped_linear_backward(dout.gpu, x.gpu, w.gpu, c.rows, Tensor(), dw.gpu, false,
                                    accumulate);
      EXPECT_LE(error(dw), 1e-5) << c.experts << " x " << c.out << " x " << c.in << " "
                                 << accumulate;
    }
  }
}

// The Hopper expert GEMM (cuda_moe_gemm.h) against the CPU, forward and d(x), written and
// accumulated, at both tile widths: partial row tiles (rows not a multiple of 128, the next
// expert's rows in the box), experts without rows, one expert with most rows, output widths that
// leave a partial column tile (192 and 320 against 256-wide tiles), and more experts than one
// launch takes (300: two launches). Then the same shapes through CudaOps with the kernel chosen
// (SHARDTRAIN_MOE_GEMM=wgmma).
TEST_F(CudaMoeTest, ExpertGemmMatchesTheCpu) {
  struct Case {
    int64_t experts, out, in;
    std::vector<int64_t> rows;
  };
  std::vector<int64_t> many(300);
  for (size_t e = 0; e < many.size(); ++e) many[e] = (e * 37) % 7 * 23;  // 0..138, a seventh none
  const std::vector<Case> cases = {
      {4, 192, 320, {37, 0, 300, 5}},
      {8, 768, 256, {700, 3, 0, 129, 128, 1, 0, 255}},
      {300, 64, 128, many},
  };
  for (const Case& c : cases) {
    const int64_t total = std::accumulate(c.rows.begin(), c.rows.end(), int64_t{0});
    const Pair x = random_input({total, c.in});
    const Pair w = random_input({c.experts, c.out, c.in}, DType::kBF16, -0.1f, 0.1f);
    const Pair dout = random_input({total, c.out});
    if (!cuda_moe::expert_gemm_fit(total, c.experts, c.out, c.in, x.gpu.data(), w.gpu.data(),
                                   dout.gpu.data())) {
      GTEST_SKIP() << "no expert GEMM here (it needs sm_90a and a compute capability 9.0 GPU)";
    }
    const Pair product = output({total, c.out});  // the CPU's x_e W_e^T
    cpu_->grouped_linear_forward(x.cpu, w.cpu, c.rows, product.cpu);
    const std::vector<float> product_values = host_values(product.cpu);
    for (int tile_n : {128, 256}) {
      for (bool accumulate : {false, true}) {
        const std::string what = std::to_string(c.experts) + " x " + std::to_string(c.out) + " x " +
                                 std::to_string(c.in) + " tile " + std::to_string(tile_n) +
                                 (accumulate ? " accumulate" : "");
        // Forward: the CPU has no accumulating forward; the expected sum is formed here.
        std::vector<float> old = random(total * c.out);
        std::vector<float> want(old.size());
        for (size_t i = 0; i < want.size(); ++i) {
          want[i] = product_values[i] + (accumulate ? old[i] : 0.0f);
        }
        const Pair out = accumulate ? input(old, {total, c.out}) : output({total, c.out});
        cpu_->copy_from_host(out.cpu, want.data());
        EXPECT_TRUE(cuda_moe::expert_gemm(cuda_moe::ExpertGemm::kForward, x.gpu.data(),
                                          w.gpu.data(), c.rows, c.out, c.in, out.gpu.data(),
                                          accumulate, gpu_ref().stream(), tile_n));
        EXPECT_BF16_CLOSE(out) << "forward " << what;

        const Pair dx = accumulate ? random_input({total, c.in}) : output({total, c.in});
        cpu_->grouped_linear_backward(dout.cpu, x.cpu, w.cpu, c.rows, dx.cpu, Tensor(), accumulate,
                                      false);
        EXPECT_TRUE(cuda_moe::expert_gemm(cuda_moe::ExpertGemm::kInputGradient, dout.gpu.data(),
                                          w.gpu.data(), c.rows, c.out, c.in, dx.gpu.data(),
                                          accumulate, gpu_ref().stream(), tile_n));
        EXPECT_BF16_CLOSE(dx) << "d(x) " << what;
      }
    }
    // Through CudaOps (the kernel's default tile), with the f32 weight gradient beside d(x).
    setenv("SHARDTRAIN_MOE_GEMM", "wgmma", 1);
    const Pair out = output({total, c.out});
    gpu_->grouped_linear_forward(x.gpu, w.gpu, c.rows, out.gpu);
    cpu_->grouped_linear_forward(x.cpu, w.cpu, c.rows, out.cpu);
    EXPECT_BF16_CLOSE(out) << c.experts;
    const Pair dx = random_input({total, c.in});
    const Pair dw = output({c.experts, c.out, c.in}, DType::kF32);
    cpu_->grouped_linear_backward(dout.cpu, x.cpu, w.cpu, c.rows, dx.cpu, dw.cpu, true, false);
    gpu_->grouped_linear_backward(dout.gpu, x.gpu, w.gpu, c.rows, dx.gpu, dw.gpu, true, false);
    unsetenv("SHARDTRAIN_MOE_GEMM");
    EXPECT_BF16_CLOSE(dx) << c.experts;
    EXPECT_LE(error(dw), 1e-5) << c.experts;
  }
}

// Qwen3-30B-A3B's expert GEMMs for 4096 tokens (top 8 of 128, C 2048, F 768), balanced rows:
// forward and d(x) of the gate/up projection (2048 -> 768) and of the down projection
// (768 -> 2048), cuBLAS's grouped GEMM beside our expert GEMM at both tile widths (also with rows
// skewed 5:1 over a quarter of the experts), and the f32 expert weight gradients; time and
// TFLOP/s.
TEST_F(CudaMoeTest, DISABLED_GroupedTiming) {
  const int64_t tokens = 4096, experts = 128, top = 8, hidden = 2048, ffn = 768;
  const int64_t rows_total = tokens * top;
  const std::vector<int64_t> rows(experts, rows_total / experts);
  std::vector<int64_t> skewed(experts);  // the same total
  for (int64_t e = 0; e < experts; ++e) skewed[e] = e < experts / 4 ? 640 : 128;
  const double flops = 2.0 * rows_total * hidden * ffn;
  const auto rate = [&](double ms) { return flops / (ms * 1e-3) / 1e12; };
  const bool ours =
      cuda_moe::expert_gemm_fit(rows_total, experts, ffn, hidden, reinterpret_cast<void*>(256),
                                reinterpret_cast<void*>(256), reinterpret_cast<void*>(256));
  // The gate/up projection's weight is (ffn x hidden), the down projection's (hidden x ffn).
  for (const bool down : {false, true}) {
    const int64_t O = down ? hidden : ffn, I = down ? ffn : hidden;
    const Pair x = random_input({rows_total, I});
    const Pair w = random_input({experts, O, I}, DType::kBF16, -0.05f, 0.05f);
    const Pair out = output({rows_total, O});
    const Pair dout = random_input({rows_total, O});
    const Pair dx = output({rows_total, I});
    setenv("SHARDTRAIN_MOE_GEMM", "cublas", 1);
    const double cublas_forward =
        time_ms([&] { gpu_->grouped_linear_forward(x.gpu, w.gpu, rows, out.gpu); }, 20);
    const double cublas_dx = time_ms(
        [&] {
          gpu_->grouped_linear_backward(dout.gpu, x.gpu, w.gpu, rows, dx.gpu, Tensor(), false,
                                        false);
        },
        20);
    unsetenv("SHARDTRAIN_MOE_GEMM");
    std::printf(
        "%s %lld -> %lld over %lld experts, %lld rows: cuBLAS forward %.3f ms "
        "(%.0f TFLOP/s), dx %.3f ms (%.0f)\n",
        down ? "down" : "gate/up", static_cast<long long>(I), static_cast<long long>(O),
        static_cast<long long>(experts), static_cast<long long>(rows_total), cublas_forward,
        rate(cublas_forward), cublas_dx, rate(cublas_dx));
    if (!ours) continue;
    for (int tile_n : {128, 256}) {
      const auto run = [&](cuda_moe::ExpertGemm kind, const std::vector<int64_t>& expert_rows) {
        const bool forward = kind == cuda_moe::ExpertGemm::kForward;
        return time_ms(
            [&] {
              cuda_moe::expert_gemm(kind, forward ? x.gpu.data() : dout.gpu.data(), w.gpu.data(),
                                    expert_rows, O, I, forward ? out.gpu.data() : dx.gpu.data(),
                                    false, gpu_ref().stream(), tile_n);
            },
            20);
      };
      const double forward_ms = run(cuda_moe::ExpertGemm::kForward, rows);
      const double dx_ms = run(cuda_moe::ExpertGemm::kInputGradient, rows);
      const double skewed_forward = run(cuda_moe::ExpertGemm::kForward, skewed);
      const double skewed_dx = run(cuda_moe::ExpertGemm::kInputGradient, skewed);
      std::printf(
          "  expert GEMM tile 128 x %d: forward %.3f ms (%.0f TFLOP/s), dx %.3f ms "
          "(%.0f); skewed rows: forward %.0f, dx %.0f TFLOP/s\n",
          tile_n, forward_ms, rate(forward_ms), dx_ms, rate(dx_ms), rate(skewed_forward),
          rate(skewed_dx));
    }
  }
  const Pair x = random_input({rows_total, hidden});
  const Pair w = random_input({experts, ffn, hidden}, DType::kBF16, -0.05f, 0.05f);
  const Pair dout = random_input({rows_total, ffn});
  const Pair dw = output({experts, ffn, hidden}, DType::kF32);
  const auto dw_ms = [&](const std::vector<int64_t>& expert_rows, bool accumulate) {
    return time_ms(
        [&] {
          gpu_->grouped_linear_backward(dout.gpu, x.gpu, w.gpu, expert_rows, Tensor(), dw.gpu,
                                        false, accumulate);
        },
        20);
  };
  const double balanced_ms = dw_ms(rows, false), skewed_ms = dw_ms(skewed, false);
  const double accumulate_ms = dw_ms(rows, true);
  std::printf(
      "f32 expert weight gradients %lld x %lld: %.3f ms (%.0f TFLOP/s; skewed rows "
      "%.3f ms; added to the old gradient, as gradient accumulation does, %.3f ms)\n",
      static_cast<long long>(ffn), static_cast<long long>(hidden), balanced_ms, rate(balanced_ms),
      skewed_ms, accumulate_ms);
}

}  // namespace
}  // namespace shardtrain::cuda_testing
