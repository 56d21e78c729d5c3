// The test worker's hooks (cli/testing/test_worker_hooks.h): each SHARDTRAIN_TEST_* variable
// parsed to what it asks for, each malformed value a one-line error naming the variable (the
// worker exits 2), and the shipped binary holding none of those names (it cannot read them).
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cli/testing/test_worker_hooks.h"
#include "core/testing/test_support.h"
#include "ops/ops.h"

namespace shardtrain::testing {
namespace {

EnvLookup lookup(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    const auto found = values.find(name);
    if (found == values.end()) return std::nullopt;
    return found->second;
  };
}

TEST(TestWorkerHooks, UnsetOrEmptyVariablesAskForNothing) {
  for (const auto& env : {lookup({}), lookup({{"SHARDTRAIN_TEST_HANG_AT_STEP", ""},
                                              {"SHARDTRAIN_TEST_ATTENTION_KERNEL", ""}})}) {
    const TestWorkerSettings settings = read_test_worker_settings(env);
    EXPECT_EQ(settings.hang_at_step, 0);
    EXPECT_EQ(settings.stop_at_start_rank, -1);
    EXPECT_EQ(settings.checkpoint_write_delay_ms, 0);
    EXPECT_TRUE(settings.kernels == KernelOverrides{});
    EXPECT_EQ(settings.device_limits, "");
    EXPECT_EQ(settings.deferred_aside, "");
    const WorkerHooks hooks = install_test_worker_hooks(settings);
    EXPECT_FALSE(hooks.step_hooks);
    EXPECT_FALSE(hooks.cpu_ops);
    EXPECT_EQ(hooks.checkpoint_write_delay.count(), 0);
  }
}

TEST(TestWorkerHooks, EveryVariableIsParsed) {
  const TestWorkerSettings settings =
      read_test_worker_settings(lookup({{"SHARDTRAIN_TEST_HANG_AT_STEP", "3"},
                                        {"SHARDTRAIN_TEST_HANG_RANK", "2"},
                                        {"SHARDTRAIN_TEST_STOP_AT_START_RANK", "5"},
                                        {"RANK", "4"},
                                        {"SHARDTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS", "1500"},
                                        {"SHARDTRAIN_TEST_ATTENTION_KERNEL", "mma"},
                                        {"SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS", "4"},
                                        {"SHARDTRAIN_TEST_ATTENTION_BACKWARD_WARPS", "8"},
                                        {"SHARDTRAIN_TEST_ATTENTION_HEADS_PER_BLOCK", "3"},
                                        {"SHARDTRAIN_TEST_DEVICE_LIMITS", "l4"},
                                        {"SHARDTRAIN_TEST_DEFERRED_ASIDE", "ignore-waits"}}));
  EXPECT_EQ(settings.hang_at_step, 3);
  EXPECT_EQ(settings.hang_rank, 2);
  EXPECT_EQ(settings.stop_at_start_rank, 5);
  EXPECT_EQ(settings.worker_rank, 4);
  EXPECT_EQ(settings.checkpoint_write_delay_ms, 1500);
  EXPECT_EQ(settings.kernels.attention, KernelOverrides::Attention::kMma);
  EXPECT_EQ(settings.kernels.attention_forward_warps, 4);
  EXPECT_EQ(settings.kernels.attention_backward_warps, 8);
  EXPECT_EQ(settings.kernels.attention_backward_heads_per_block, 3);
  EXPECT_EQ(settings.device_limits, "l4");
  EXPECT_EQ(settings.deferred_aside, "ignore-waits");
  EXPECT_EQ(read_test_worker_settings(lookup({{"SHARDTRAIN_TEST_ATTENTION_KERNEL", "wgmma"}}))
                .kernels.attention,
            KernelOverrides::Attention::kWgmma);
  EXPECT_EQ(
      read_test_worker_settings(lookup({{"SHARDTRAIN_TEST_ATTENTION_KERNEL", "wgmma-forward"}}))
          .kernels.attention,
      KernelOverrides::Attention::kWgmmaForward);
}

TEST(TestWorkerHooks, TheHangHookIsOnlyTheNamedRanks) {
  TestWorkerSettings settings;
  settings.hang_at_step = 3;
  settings.hang_rank = 2;
  settings.checkpoint_write_delay_ms = 40;
  const WorkerHooks hooks = install_test_worker_hooks(settings);
  ASSERT_TRUE(hooks.step_hooks);
  EXPECT_EQ(hooks.step_hooks(0), nullptr);
  EXPECT_EQ(hooks.step_hooks(1), nullptr);
  const std::unique_ptr<StepHooks> rank2 = hooks.step_hooks(2);
  ASSERT_NE(rank2, nullptr);
  rank2->before_step(2);  // any other step returns at once (step 3 would never return)
  rank2->before_step(4);
  EXPECT_EQ(hooks.checkpoint_write_delay, std::chrono::milliseconds(40));
}

TEST(TestWorkerHooks, TheDeferredAsideHookMakesOpsThatRunAside) {
  for (const char* value : {"1", "ignore-waits"}) {
    TestWorkerSettings settings;
    settings.deferred_aside = value;
    const WorkerHooks hooks = install_test_worker_hooks(settings);
    ASSERT_TRUE(hooks.cpu_ops) << value;
    const std::unique_ptr<Ops> ops = hooks.cpu_ops();
    EXPECT_EQ(ops->device(), Device::kCpu) << value;
    EXPECT_TRUE(ops->runs_aside()) << value;
  }
}

TEST(TestWorkerHooks, AMalformedValueNamesTheVariable) {
  for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
           {"SHARDTRAIN_TEST_HANG_AT_STEP", "0"},
           {"SHARDTRAIN_TEST_HANG_AT_STEP", "three"},
           {"SHARDTRAIN_TEST_HANG_RANK", "-1"},
           {"SHARDTRAIN_TEST_STOP_AT_START_RANK", "one"},
           {"SHARDTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS", "-5"},
           {"SHARDTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS", "10ms"},
           {"SHARDTRAIN_TEST_ATTENTION_KERNEL", "flash"},
           {"SHARDTRAIN_TEST_ATTENTION_FORWARD_WARPS", "6"},
           {"SHARDTRAIN_TEST_ATTENTION_BACKWARD_WARPS", "16"},
           {"SHARDTRAIN_TEST_ATTENTION_HEADS_PER_BLOCK", "0"},
           {"SHARDTRAIN_TEST_DEVICE_LIMITS", "v100"},
           {"SHARDTRAIN_TEST_DEFERRED_ASIDE", "yes"}}) {
    const std::string message = error_of([&] {
      read_test_worker_settings(lookup({{name, value}}));
    });
    EXPECT_NE(message.find(name + "=\"" + value + "\""), std::string::npos)
        << name << "=" << value << ": " << message;
    EXPECT_NE(message.find("HINT"), std::string::npos) << message;
  }
}

TEST(TestWorkerBinary, AMalformedVariableIsAOneLineErrorWithExitCode2) {
  const CommandResult r =
      run_command("SHARDTRAIN_TEST_ATTENTION_KERNEL=flash " + kTestWorker + " --version");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  ASSERT_EQ(r.lines().size(), 1u) << r.output;
  EXPECT_NE(r.output.find("shardtrain: error: SHARDTRAIN_TEST_ATTENTION_KERNEL=\"flash\""),
            std::string::npos)
      << r.output;
  // The shipped binary ignores the variable: it never reads it.
  const CommandResult shipped =
      run_command("SHARDTRAIN_TEST_ATTENTION_KERNEL=flash " + kBinary + " --version");
  EXPECT_EQ(shipped.exit_code, 0) << shipped.output;
}

TEST(TestWorkerBinary, TheShippedBinaryHoldsNoTestVariableName) {
  std::ifstream in(kBinary, std::ios::binary);
  ASSERT_TRUE(in) << kBinary;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GT(bytes.size(), 100000u);
  EXPECT_EQ(bytes.find("SHARDTRAIN_TEST_"), std::string::npos)
      << "the shipped binary contains a SHARDTRAIN_TEST_* name, so it may read one";
  std::ifstream worker_in(kTestWorker, std::ios::binary);
  const std::string worker((std::istreambuf_iterator<char>(worker_in)),
                           std::istreambuf_iterator<char>());
  EXPECT_NE(worker.find("SHARDTRAIN_TEST_HANG_AT_STEP"), std::string::npos);
}

}  // namespace
}  // namespace shardtrain::testing
