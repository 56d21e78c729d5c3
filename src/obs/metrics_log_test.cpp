// The JSONL record of a StepReport: the keys `--metrics` has always written, optional ones only
// when measured, and one complete line per append.
#include "obs/metrics_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <string>

namespace shardtrain {
namespace {

StepReport sample_report() {
  return StepReport{.step = 7,
                    .total_steps = 20,
                    .loss = 2.5,
                    .lr = 3e-4,
                    .grad_norm = 0.75,
                    .step_tokens = 512,
                    .tokens_total = 3584,
                    .tokens_per_s = 1792,
                    .elapsed_s = 2.0,
                    .step_time_s = 0.25,
                    .data_wait_s = 0.01};
}

TEST(MetricsRecord, HoldsTheStepFieldsAndOptionalOnesOnlyWhenMeasured) {
  StepReport report = sample_report();
  const nlohmann::json plain = metrics_record(report);
  EXPECT_EQ(plain.at("step"), 7);
  EXPECT_EQ(plain.at("loss"), 2.5);
  EXPECT_EQ(plain.at("lr"), 3e-4);
  EXPECT_EQ(plain.at("grad_norm"), 0.75);
  EXPECT_EQ(plain.at("tokens"), 3584) << "tokens is the running total";
  EXPECT_EQ(plain.at("tokens_per_s"), 1792.0);
  EXPECT_EQ(plain.at("elapsed_s"), 2.0);
  EXPECT_EQ(plain.at("step_time_s"), 0.25);
  EXPECT_EQ(plain.at("data_wait_s"), 0.01);
  EXPECT_FALSE(plain.contains("comm_wait_s"));
  EXPECT_FALSE(plain.contains("checkpoint_stall_s"));
  EXPECT_FALSE(plain.contains("epoch"));
  EXPECT_FALSE(plain.contains("mfu"));

  report.exposed_comm_s = 0.125;
  report.checkpoint_stall_s = 0.5;
  report.epoch = 1.25;
  report.mfu = 0.375;
  const nlohmann::json measured = metrics_record(report);
  EXPECT_EQ(measured.at("comm_wait_s"), 0.125);
  EXPECT_EQ(measured.at("checkpoint_stall_s"), 0.5);
  EXPECT_EQ(measured.at("epoch"), 1.25);
  EXPECT_EQ(measured.at("mfu"), 0.375);
}

TEST(MetricsLog, AppendsOneLinePerReport) {
  const std::string path =
      testing::TempDir() + "metrics_log_test_" + std::to_string(::getpid()) + ".jsonl";
  std::remove(path.c_str());
  {
    MetricsLog log(path);
    StepReport report = sample_report();
    log.append(report);
    report.step = 8;
    log.append(report);
  }
  std::ifstream in(path);
  std::string first, second, third;
  ASSERT_TRUE(std::getline(in, first));
  ASSERT_TRUE(std::getline(in, second));
  EXPECT_FALSE(std::getline(in, third));
  EXPECT_EQ(nlohmann::json::parse(first).at("step"), 7);
  EXPECT_EQ(nlohmann::json::parse(second).at("step"), 8);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace shardtrain
