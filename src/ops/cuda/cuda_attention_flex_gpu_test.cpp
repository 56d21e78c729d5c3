// The CUDA masked attention kernels against PyTorch's FlexAttention with the same block mask
// (causal AND same document AND sliding window), forward and backward: the bf16 inputs and
// FlexAttention's results that tools/device/flex_attention_reference.py writes on the GPU
// machine (ops/testing/flex_reference.h), read from $SHARDTRAIN_TEST_FLEX_DIR. Every kernel of
// the dispatch table this GPU runs (default: warp-specialised wgmma on an H200; cp.async wgmma;
// mma.sync with 8 and 4 warps; the D = 256 rows run mma.sync), each against FlexAttention's bf16
// results and against the float64 dense attention of the same inputs. Prints, per tensor, max
// abs, max rel and relative L2 errors, and FlexAttention's error against the float64 truth
// beside ours. DISABLED_KernelTimeAgainstFlex prints our forward and forward + backward times
// beside FlexAttention's from the same files. Skips with a visible message without a GPU or
// without the files.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "ops/cuda/testing/cuda_ops_fixture.h"
#include "ops/testing/flex_reference.h"

namespace shardtrain::cuda_testing {
namespace {

using flex_testing::AttentionRun;
using flex_testing::FlexCase;

// Two bf16 implementations: each within bf16 rounding of the truth (~3e-3 relative L2, the
// other tests' bound 1e-2), so within twice the bound of each other. The lse is fp32 in both
// (the same bf16 products summed in another order).
constexpr flex_testing::Tolerances kAgainstFlex{2 * kBf16Tolerance, 1e-4};
// The bounds every CUDA attention test holds against the fp32 CPU reference.
constexpr flex_testing::Tolerances kAgainstExact{kBf16Tolerance, kF32Tolerance};

class CudaAttentionFlexTest : public CudaOpsTest {
 protected:
  void SetUp() override {
    CudaOpsTest::SetUp();
    if (IsSkipped()) return;
    files_ = flex_testing::flex_reference_files();
    if (files_.paths.empty()) GTEST_SKIP() << files_.why_none;
  }

  static void describe(const FlexCase& c) {
    std::printf("%s: B=%ld T=%ld H=%ld K=%ld D=%ld window %ld; reference: %s\n", c.name().c_str(),
                static_cast<long>(c.B), static_cast<long>(c.T), static_cast<long>(c.H),
                static_cast<long>(c.K), static_cast<long>(c.D), static_cast<long>(c.window),
                c.reference.c_str());
  }

  flex_testing::FlexFiles files_;
};

TEST_F(CudaAttentionFlexTest, EveryKernelMatchesFlexAttention) {
  for (const std::string& path : files_.paths) {
    const FlexCase c(path);
    SCOPED_TRACE(c.name());
    describe(c);
    // FlexAttention's own distance from the float64 truth, the scale for ours.
    for (const char* tensor : {"out", "dq", "dk", "dv"}) {
      const Shape shape =
          std::string(tensor) == "out" || std::string(tensor) == "dq" ? c.q_shape() : c.kv_shape();
      const flex_testing::Difference d =
          flex_testing::difference(c.values(std::string("flex_") + tensor, shape),
                                   c.values(std::string("exact_") + tensor, shape));
      std::printf("%s flex vs exact %s: max abs %.3g, max rel %.3g, rel l2 %.3g\n",
                  c.name().c_str(), tensor, d.max_abs, d.max_rel, d.rel_l2);
    }
    AttentionRun run(*gpu_, DType::kBF16, c);
    for (const char* kernel : {"default", "wgmma", "8", "4"}) {
      SCOPED_TRACE(std::string("kernel ") + kernel);
      run.poison();
      {
        const ScopedKernelOverrides forced(attention_kernel(kernel));
        run.forward();
        run.backward();
      }
      const flex_testing::AttentionOutputs got = run.outputs();
      const std::string label = std::string("gpu[") + kernel + "]";
      const double worst = flex_testing::expect_close(c, got, label, "flex", kAgainstFlex);
      flex_testing::expect_close(c, got, label, "exact", kAgainstExact);
      std::printf("%s %s: largest relative L2 against FlexAttention %.3g\n", c.name().c_str(),
                  label.c_str(), worst);
    }
  }
}

// Kernel time beside FlexAttention's (the script's CUDA-event timings of torch.compile'd
// flex_attention on the same inputs and mask, which include its lse output): our forward, and
// forward + backward, mean wall time of 20 runs after a warm-up. Run with
// --gtest_also_run_disabled_tests on the GPU machine.
TEST_F(CudaAttentionFlexTest, DISABLED_KernelTimeAgainstFlex) {
  for (const std::string& path : files_.paths) {
    const FlexCase c(path);
    AttentionRun run(*gpu_, DType::kBF16, c);
    const double forward = time_ms([&] { run.forward(); }, 20);
    const double backward = time_ms([&] { run.backward(); }, 20);
    const std::string flex_forward = c.meta("flex_forward_ms");
    const std::string flex_both = c.meta("flex_forward_backward_ms");
    const double ratio = flex_both.empty() ? 0 : std::stod(flex_both) / (forward + backward);
    std::printf(
        "{\"case\": \"%s\", \"forward_ms\": %.4f, \"forward_backward_ms\": %.4f, "
        "\"flex_forward_ms\": %s, \"flex_forward_backward_ms\": %s, "
        "\"flex_over_ours_forward_backward\": %.3f}\n",
        c.name().c_str(), forward, forward + backward,
        flex_forward.empty() ? "null" : flex_forward.c_str(),
        flex_both.empty() ? "null" : flex_both.c_str(), ratio);
  }
}

}  // namespace
}  // namespace shardtrain::cuda_testing
