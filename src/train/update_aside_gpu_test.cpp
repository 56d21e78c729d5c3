// On the GPU: the optimizer update on the second stream beside the next forward
// (SHARDTRAIN_OPS_ASIDE=1: fsdp/fsdp_units.h) gives the loss curve and saved parameters of the
// update in order. Bit for bit where the in-order run repeats itself bit for bit; where it does
// not (atomics in some kernels), within ten times its own run-to-run difference. Skips with a
// visible message where no GPU is present. Also: the one-rank default of make_rank_ops.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "core/testing/test_support.h"
#include "dist/dist_env.h"
#include "ops/backend.h"
#include "train/testing/update_aside_job.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

// The job on fresh CUDA ops made with SHARDTRAIN_OPS_ASIDE = `aside` (read when they are made).
testing::LeverRun train_with_aside(const char* aside, const fs::path& dir,
                                   const std::string& name) {
  testing::ScopedEnv env("SHARDTRAIN_OPS_ASIDE", aside);
  const std::unique_ptr<Ops> ops = make_ops(DeviceChoice::kCuda);
  EXPECT_EQ(ops->runs_aside(), std::string(aside) == "1");
  return testing::train_update_aside_job(*ops, DeviceChoice::kCuda, dir, name);
}

TEST(UpdateAsideGpu, MatchesTheUpdateInOrder) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU: the update beside the forward skipped";
  const fs::path dir =
      fs::temp_directory_path() / ("shardtrain_update_aside_gpu_" + std::to_string(::getpid()));
  const testing::LeverRun want = train_with_aside("0", dir, "in_order");
  const testing::LeverRun again = train_with_aside("0", dir, "in_order_again");
  ASSERT_EQ(want.losses.size(), 6u);
  ASSERT_EQ(again.losses.size(), 6u);
  const bool reproducible = want.losses == again.losses && want.model_bytes == again.model_bytes;
  const double spread = testing::largest_relative_loss_difference(want, again);
  std::printf("in-order run repeated: %s (largest relative loss difference %.3g)\n",
              reproducible ? "bit for bit" : "not bit for bit", spread);
  const testing::LeverRun got = train_with_aside("1", dir, "aside");
  ASSERT_EQ(got.losses.size(), want.losses.size());
  const double diff = testing::largest_relative_loss_difference(want, got);
  std::printf("update aside: largest relative loss difference %.3g, parameters %s\n", diff,
              got.model_bytes == want.model_bytes ? "equal" : "differ");
  if (reproducible) {
    EXPECT_EQ(diff, 0.0);
    EXPECT_TRUE(got.model_bytes == want.model_bytes);
  } else {
    EXPECT_LE(diff, 10 * spread + 1e-7);
  }
  fs::remove_all(dir);
}

// A job's ops (make_rank_ops) run aside work aside by default on one rank, in order with several
// (unless SHARDTRAIN_OPS_ASIDE says otherwise); backends made outside a job run it in order.
TEST(UpdateAsideGpu, OnByDefaultForOneRankOnly) {
  if (!cuda_available()) GTEST_SKIP() << "no GPU: the aside default skipped";
  testing::ScopedEnv unset("SHARDTRAIN_OPS_ASIDE", "");
  WorkerEnv one;
  one.world = one.local_world = 1;
  WorkerEnv two = one;
  two.world = two.local_world = 2;
  EXPECT_TRUE(make_rank_ops(DeviceChoice::kCuda, one)->runs_aside());
  EXPECT_FALSE(make_rank_ops(DeviceChoice::kCuda, two)->runs_aside());
  EXPECT_FALSE(make_ops(DeviceChoice::kCuda)->runs_aside());
  {
    testing::ScopedEnv off("SHARDTRAIN_OPS_ASIDE", "0");
    EXPECT_FALSE(make_rank_ops(DeviceChoice::kCuda, one)->runs_aside());
  }
  testing::ScopedEnv on("SHARDTRAIN_OPS_ASIDE", "1");
  EXPECT_TRUE(make_rank_ops(DeviceChoice::kCuda, two)->runs_aside());
}

}  // namespace
}  // namespace shardtrain
