// The memory levers at a shard group of one change bytes, never numerics (fsdp/fsdp_units.h):
// training with the bf16/compute copy built on demand, with the AdamW step run per unit inside
// backward, or both, gives the same loss curve and the same saved parameters bit for bit as the
// default layout (on the CPU the on-demand "cast" is an fp32 copy into the gathered pool, so the
// pool path itself runs). The levers' preconditions are refused with errors naming the keys.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>

#include "core/error.h"
#include "train/testing/memory_levers_job.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

fs::path test_dir(const std::string& name) {
  return fs::temp_directory_path() /
         ("shardtrain_levers_" + name + "_" + std::to_string(::getpid()));
}

TEST(MemoryLevers, OnDemandCopyAndUpdateInBackwardTrainBitIdentically) {
  const fs::path dir = test_dir("cpu");
  const testing::LeverRun want = testing::train_memory_levers(DeviceChoice::kCpu, "keep", false, dir);
  ASSERT_EQ(want.losses.size(), 12u);
  EXPECT_LT(want.losses.back(), want.losses.front()) << "the baseline should learn";
  ASSERT_GT(want.model_bytes.size(), 100000u);
  for (const auto& [copy, in_backward] :
       {std::pair<const char*, bool>{"on_demand", false}, {"keep", true}, {"on_demand", true}}) {
    const testing::LeverRun got = testing::train_memory_levers(DeviceChoice::kCpu, copy, in_backward, dir);
    ASSERT_EQ(got.losses.size(), want.losses.size());
    for (size_t s = 0; s < want.losses.size(); ++s) {
      EXPECT_EQ(got.losses[s], want.losses[s])
          << copy << " in_backward " << in_backward << " step " << s + 1;
    }
    EXPECT_TRUE(got.model_bytes == want.model_bytes)
        << copy << " in_backward " << in_backward << ": saved parameters differ";
  }
  fs::remove_all(dir);
}

TEST(MemoryLevers, UpdateInBackwardNeedsNoClippingOneRankAndOneMicroBatch) {
  TrainConfig config;
  config.model.path = "m";
  config.data.path = "d";
  config.optim.update_in_backward = true;
  try {
    config.validate();
    FAIL() << "clipping with update_in_backward was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.max_grad_norm"), std::string::npos) << e.what();
  }
  config.train.max_grad_norm = 0;
  EXPECT_NO_THROW(config.validate());

  // Accumulation (4 micro-batches per step) is refused when the trainer is built.
  const fs::path dir = test_dir("accum");
  testing::use_lever_job_data(config, dir);
  config.train.steps = 2;
  config.train.micro_batch = 1;
  config.train.grad_accum = 4;
  config.train.device = DeviceChoice::kCpu;
  auto ops = make_ops(DeviceChoice::kCpu);
  TrainRunOptions options;
  options.quiet = true;
  try {
    run_training(config, *ops, options);
    FAIL() << "update_in_backward with grad_accum 4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("grad_accum 4"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardtrain
