// The optimizer update beside the next forward (fsdp/fsdp_units.h: each unit's update enqueued
// aside, waited for when the unit is next acquired) trains bit for bit as the update in order,
// checked on the CPU with ops that really defer the aside work (ops/testing/deferred_aside_ops.h):
// any read of a unit's parameters, moments or gradient before its wait would read the old values.
// The control with the waits ignored shows that such a read changes the losses.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "ops/cpu/cpu_ops.h"
#include "ops/testing/deferred_aside_ops.h"
#include "train/testing/update_aside_job.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

fs::path test_dir() {
  return fs::temp_directory_path() / ("shardtrain_update_aside_" + std::to_string(::getpid()));
}

TEST(UpdateAside, TrainsBitIdenticallyToTheUpdateInOrder) {
  const fs::path dir = test_dir();
  CpuOps in_order;
  const testing::LeverRun want =
      testing::train_update_aside_job(in_order, DeviceChoice::kCpu, dir, "in_order");
  ASSERT_EQ(want.losses.size(), 6u);
  ASSERT_GT(want.model_bytes.size(), 100000u);
  testing::DeferredAsideCpuOps aside;
  const testing::LeverRun got =
      testing::train_update_aside_job(aside, DeviceChoice::kCpu, dir, "aside");
  // Every update ran when a unit's next use waited for it (the next step's forward, the
  // evaluation, the final export's gathers), none at a host synchronisation before that.
  EXPECT_GT(aside.issued(), 0);
  EXPECT_EQ(aside.run_by_waits(), aside.issued())
      << "an update was joined before its unit was used: the host waited for it";
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_EQ(got.losses[s], want.losses[s]) << "step " << s + 1;
  }
  EXPECT_TRUE(got.model_bytes == want.model_bytes) << "saved parameters differ";
  fs::remove_all(dir);
}

TEST(UpdateAside, AForwardThatDoesNotWaitReadsTheOldParameters) {
  const fs::path dir = test_dir();
  CpuOps in_order;
  const testing::LeverRun want =
      testing::train_update_aside_job(in_order, DeviceChoice::kCpu, dir, "in_order");
  testing::DeferredAsideCpuOps ignoring_waits(/*honour_waits=*/false);
  const testing::LeverRun got =
      testing::train_update_aside_job(ignoring_waits, DeviceChoice::kCpu, dir, "ignoring_waits");
  ASSERT_EQ(got.losses.size(), want.losses.size());
  EXPECT_EQ(got.losses[0], want.losses[0]) << "the first step has no update before it";
  EXPECT_NE(got.losses[1], want.losses[1])
      << "a forward before the update's wait read the same values: the test cannot see a "
         "missing wait";
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardtrain
