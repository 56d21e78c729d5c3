// On the GPU (bf16 compute): the bf16 copy built on demand from the fp32 master and the AdamW
// step run per unit in backward give the loss curve and saved parameters of the default layout
// (persistent bf16 copy written by the update, one update after backward). Bit for bit where the
// default run repeats itself bit for bit; where it does not (atomics in some kernels), within ten
// times its own run-to-run difference. Skips with a visible message where no GPU is present.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>

#include "train/testing/memory_levers_job.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

TEST(MemoryLeversGpu, OnDemandCopyAndUpdateInBackwardMatchTheDefault) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU: memory-lever parity on the GPU skipped";
  const fs::path dir =
      fs::temp_directory_path() / ("shardtrain_levers_gpu_" + std::to_string(::getpid()));
  const testing::LeverRun want = testing::train_memory_levers(DeviceChoice::kCuda, "keep", false, dir);
  const testing::LeverRun again = testing::train_memory_levers(DeviceChoice::kCuda, "keep", false, dir);
  ASSERT_EQ(want.losses.size(), 12u);
  ASSERT_EQ(again.losses.size(), 12u);
  EXPECT_LT(want.losses.back(), want.losses.front()) << "the baseline should learn";
  const bool reproducible = want.losses == again.losses && want.model_bytes == again.model_bytes;
  const double spread = testing::largest_relative_loss_difference(want, again);
  std::printf("default run repeated: %s (largest relative loss difference %.3g)\n",
              reproducible ? "bit for bit" : "not bit for bit", spread);
  for (const auto& [copy, in_backward] :
       {std::pair<const char*, bool>{"on_demand", false}, {"keep", true}, {"on_demand", true}}) {
    const testing::LeverRun got = testing::train_memory_levers(DeviceChoice::kCuda, copy, in_backward, dir);
    ASSERT_EQ(got.losses.size(), want.losses.size());
    const double diff = testing::largest_relative_loss_difference(want, got);
    std::printf("%s, update in backward %d: largest relative loss difference %.3g, parameters %s\n",
                copy, in_backward, diff, got.model_bytes == want.model_bytes ? "equal" : "differ");
    if (reproducible) {
      EXPECT_EQ(diff, 0.0) << copy << " " << in_backward;
      EXPECT_TRUE(got.model_bytes == want.model_bytes) << copy << " " << in_backward;
    } else {
      EXPECT_LE(diff, 10 * spread + 1e-7) << copy << " " << in_backward;
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardtrain
