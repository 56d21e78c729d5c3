#include "train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace shardtrain {
namespace {

OptimConfig optim_with(LrScheduleKind schedule, double lr, double min_lr, int64_t warmup) {
  OptimConfig optim;
  optim.schedule = schedule;
  optim.lr = lr;
  optim.min_lr = min_lr;
  optim.warmup_steps = warmup;
  return optim;
}

TEST(LrSchedule, WarmupIsLinearFromZero) {
  const OptimConfig optim = optim_with(LrScheduleKind::kCosine, 1.0, 0.0, 4);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 1, 14), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 2, 14), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 4, 14), 1.0);
}

TEST(LrSchedule, CosineAfterWarmup) {
  // warmup 4, total 14: decay spans 10 steps; step 9 is halfway.
  const OptimConfig optim = optim_with(LrScheduleKind::kCosine, 1.0, 0.1, 4);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 9, 14), 0.1 + 0.5 * 0.9);  // progress 0.5
  EXPECT_DOUBLE_EQ(learning_rate(optim, 14, 14), 0.1);             // progress 1: min_lr
  EXPECT_DOUBLE_EQ(learning_rate(optim, 5, 14),
                   0.1 + 0.5 * 0.9 * (1 + std::cos(std::numbers::pi * 0.1)));
  EXPECT_DOUBLE_EQ(learning_rate(optim, 20, 14), 0.1) << "past the end clamps to min_lr";
}

TEST(LrSchedule, CosineWithoutWarmup) {
  const OptimConfig optim = optim_with(LrScheduleKind::kCosine, 2.0, 0.0, 0);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 2, 4), 1.0);  // progress 0.5
  EXPECT_NEAR(learning_rate(optim, 1, 4), 1.0 + std::cos(std::numbers::pi * 0.25), 1e-15);
}

TEST(LrSchedule, LinearDecay) {
  const OptimConfig optim = optim_with(LrScheduleKind::kLinear, 1.0, 0.2, 2);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 2, 10), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 6, 10), 0.6);   // progress 0.5
  EXPECT_DOUBLE_EQ(learning_rate(optim, 10, 10), 0.2);  // progress 1
  EXPECT_DOUBLE_EQ(learning_rate(optim, 4, 10), 1.0 - 0.8 * 0.25);
}

TEST(LrSchedule, ConstantAfterWarmup) {
  const OptimConfig optim = optim_with(LrScheduleKind::kConstant, 0.5, 0.0, 2);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 1, 10), 0.25);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 3, 10), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 10, 10), 0.5);
}

TEST(LrSchedule, WarmupFillingTheWholeRun) {
  const OptimConfig optim = optim_with(LrScheduleKind::kCosine, 1.0, 0.0, 5);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 5, 5), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(optim, 6, 5), 0.0) << "past the end: fully decayed";
}

}  // namespace
}  // namespace shardtrain
