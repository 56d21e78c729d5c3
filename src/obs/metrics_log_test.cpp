// The JSONL record of a StepReport: the keys `--metrics` has always written, optional ones only
// when measured, and one complete line per append.
#include "obs/metrics_log.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "obs/progress.h"

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
  EXPECT_FALSE(plain.contains("host_wait_s"));
  EXPECT_FALSE(plain.contains("checkpoint_stall_s"));
  EXPECT_FALSE(plain.contains("epoch"));
  EXPECT_FALSE(plain.contains("eval_loss"));
  EXPECT_FALSE(plain.contains("mfu"));

  report.exposed_comm_s = 0.125;
  report.host_wait_s = 0.0625;
  report.checkpoint_stall_s = 0.5;
  report.epoch = 1.25;
  report.mfu = 0.375;
  const nlohmann::json measured = metrics_record(report);
  EXPECT_EQ(measured.at("comm_wait_s"), 0.125);
  EXPECT_EQ(measured.at("host_wait_s"), 0.0625);
  EXPECT_EQ(measured.at("checkpoint_stall_s"), 0.5);
  EXPECT_EQ(measured.at("epoch"), 1.25);
  EXPECT_EQ(measured.at("mfu"), 0.375);
}

TEST(MetricsRecord, EpochAndEvalWhenKnown) {
  StepReport report = sample_report();
  report.epoch = 0.25;
  report.eval = EvalReport{.step = 7,
                           .loss = 2.0,
                           .perplexity = 7.389,
                           .targets = 300,
                           .sequences = 20,
                           .eval_time_s = 0.5};
  const nlohmann::json record = metrics_record(report);
  EXPECT_EQ(record.at("epoch"), 0.25);
  EXPECT_EQ(record.at("eval_loss"), 2.0);
  EXPECT_EQ(record.at("eval_ppl"), 7.389);
  EXPECT_EQ(record.at("eval_tokens"), 300);
  EXPECT_EQ(record.at("eval_sequences"), 20);
  EXPECT_EQ(record.at("eval_time_s"), 0.5);
}

TEST(ProgressLine, ShowsEpochAndEvalOnlyWhenKnown) {
  StepReport report = sample_report();
  const std::string plain = format_progress_line(report);
  EXPECT_EQ(plain.find("epoch"), std::string::npos) << plain;
  EXPECT_EQ(plain.find("eval"), std::string::npos) << plain;
  EXPECT_EQ(plain.rfind("step 7/20 | loss 2.5000 | ", 0), 0u) << plain;
  report.epoch = 1.5;
  report.eval = EvalReport{.step = 7, .loss = 2.0, .perplexity = 7.389};
  const std::string line = format_progress_line(report);
  EXPECT_NE(line.find(" | epoch 1.50 | eval loss 2.0000 ppl 7.39 | "), std::string::npos) << line;
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

// A FIFO nobody reads would hold the run in open() forever: refused at once with one line. With
// a reader it is a stream like any other.
TEST(MetricsLog, AFifoWithoutAReaderIsRefusedAtOnce) {
  const std::string fifo = testing::TempDir() + "metrics_log_fifo_" + std::to_string(::getpid());
  std::remove(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string message = "(no error)";
  try {
    MetricsLog log(fifo);
  } catch (const Error& error) {
    message = error.what();
  }
  EXPECT_NE(message.find("a FIFO that no process reads"), std::string::npos) << message;

  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  {
    MetricsLog log(fifo);
    log.append(sample_report());
  }
  char buffer[4096];
  const ssize_t got = ::read(reader, buffer, sizeof buffer);
  ::close(reader);
  ASSERT_GT(got, 0);
  EXPECT_EQ(nlohmann::json::parse(std::string(buffer, got)).at("step"), 7);
  std::remove(fifo.c_str());
}

}  // namespace
}  // namespace shardtrain
