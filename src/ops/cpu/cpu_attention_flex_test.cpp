// The fp32 CPU reference attention against PyTorch's FlexAttention with the same block mask
// (causal AND same document AND sliding window): the files tools/device/flex_attention_reference.py
// writes (ops/testing/flex_reference.h), read from $SHARDTRAIN_TEST_FLEX_DIR. The CPU reference
// is what the CUDA kernels are tested against everywhere else, so this ties that reference to
// PyTorch's masks and lse convention; cuda_attention_flex_gpu_test does the same for the kernels.
// Skips with a visible message without the files (they are made on the GPU machine).
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>

#include "ops/cpu/cpu_ops.h"
#include "ops/testing/flex_reference.h"

namespace shardtrain {
namespace {

using flex_testing::AttentionRun;
using flex_testing::FlexCase;

// fp32 on the bf16 inputs: as close to the float64 truth as fp32 sums of T terms get;
// FlexAttention's bf16 results are within bf16 rounding (~3e-3) of it.
constexpr flex_testing::Tolerances kAgainstExact{1e-4, 1e-5};
constexpr flex_testing::Tolerances kAgainstFlex{1e-2, 1e-3};

TEST(CpuAttentionFlex, MatchesFlexAttentionFiles) {
  const flex_testing::FlexFiles files = flex_testing::flex_reference_files();
  if (files.paths.empty()) GTEST_SKIP() << files.why_none;
  std::unique_ptr<Ops> cpu = make_cpu_ops();
  for (const std::string& path : files.paths) {
    const FlexCase c(path);
    SCOPED_TRACE(c.name());
    std::printf("%s: B=%ld T=%ld H=%ld K=%ld D=%ld window %ld; reference: %s\n", c.name().c_str(),
                static_cast<long>(c.B), static_cast<long>(c.T), static_cast<long>(c.H),
                static_cast<long>(c.K), static_cast<long>(c.D), static_cast<long>(c.window),
                c.reference.c_str());
    AttentionRun run(*cpu, DType::kF32, c);
    run.poison();
    run.forward();
    run.backward();
    const flex_testing::AttentionOutputs got = run.outputs();
    flex_testing::expect_close(c, got, "cpu", "flex", kAgainstFlex);
    flex_testing::expect_close(c, got, "cpu", "exact", kAgainstExact);
  }
}

// The files' own bad inputs: a missing tensor is one line naming the file and the tensor.
TEST(CpuAttentionFlex, MissingTensorNamesTheFile) {
  const flex_testing::FlexFiles files = flex_testing::flex_reference_files();
  if (files.paths.empty()) GTEST_SKIP() << files.why_none;
  const FlexCase c(files.paths.front());
  try {
    c.values("no_such_tensor", c.q_shape());
    ADD_FAILURE() << "no Error for a missing tensor";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(files.paths.front()), std::string::npos) << message;
    EXPECT_NE(message.find("'no_such_tensor' is missing"), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace shardtrain
