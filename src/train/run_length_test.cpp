// The run's length and schedule (warmup clamped with a warning) and what a resume changed.
#include "train/run_length.h"

#include <gtest/gtest.h>

namespace shardtrain {
namespace {

TrainConfig base_config() {
  TrainConfig config;
  config.model.path = "m";
  config.data.path = "d.bin";
  config.train.micro_batch = 2;
  config.optim.warmup_steps = 10;
  return config;
}

std::string toml_of(TrainConfig config) {
  ConfigSchema schema;
  config.register_config(schema);
  return schema.to_toml();
}

TEST(RunLength, WarmupLongerThanTheRunIsClampedWithAWarning) {
  TrainConfig config = base_config();
  config.train.steps = 4;
  const RunLength run = plan_run_length(config, 100, 1);
  EXPECT_EQ(run.total_steps, 4);
  EXPECT_EQ(run.global_batch, 2);
  EXPECT_EQ(run.schedule.warmup_steps, 4);
  ASSERT_EQ(run.warnings.size(), 1u);
  EXPECT_NE(run.warnings[0].find("optim.warmup_steps (10) is longer than the run (4 steps); "
                                 "clamped to 4"),
            std::string::npos)
      << run.warnings[0];
}

TEST(RunLength, EpochsDecideTheLengthAndAShortWarmupStays) {
  TrainConfig config = base_config();
  config.train.epochs = 3;
  const RunLength run = plan_run_length(config, 40, 2);  // 120 sequences / 4 per step
  EXPECT_EQ(run.total_steps, 30);
  EXPECT_EQ(run.global_batch, 4);
  EXPECT_EQ(run.schedule.warmup_steps, 10);
  EXPECT_TRUE(run.warnings.empty());
}

TEST(ResumeChanges, NamesEachChangedSetting) {
  TrainConfig saved = base_config();
  saved.train.steps = 100;
  TrainConfig now = saved;
  now.train.steps = 200;
  now.optim.lr = 1e-4;
  now.optim.schedule = LrScheduleKind::kLinear;
  const std::vector<std::string> changes =
      resume_changes({toml_of(saved), 1, 100}, now, /*world=*/2, 200);
  ASSERT_EQ(changes.size(), 4u);
  EXPECT_EQ(changes[0], "steps: 100 -> 200");
  EXPECT_EQ(changes[1], "global batch (sequences per step): 2 -> 4");
  EXPECT_EQ(changes[2], "optim.schedule: cosine -> linear");
  EXPECT_EQ(changes[3], "optim.lr: 0.0003 -> 0.0001");
}

TEST(ResumeChanges, TheSameRunOnTheSameGlobalBatchChangesNothing) {
  TrainConfig saved = base_config();
  saved.train.global_batch = 8;  // micro_batch 2: grad_accum 4 on 1 rank, 2 on 2 ranks
  EXPECT_TRUE(resume_changes({toml_of(saved), 1, 100}, saved, 2, 100).empty());
}

TEST(ResumeChanges, AnUnreadableSavedConfigComparesTheLengthOnly) {
  TrainConfig now = base_config();
  const std::vector<std::string> changes =
      resume_changes({"[train]\nno_such_key = 1\n", 1, 50}, now, 1, 60);
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0], "steps: 50 -> 60");
}

}  // namespace
}  // namespace shardtrain
