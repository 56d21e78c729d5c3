// `shardtrain plan --gpu-memory` on the reference workloads (bench/shapes), through the binary:
// the smallest setting is the least memory, multi-node jobs get the HYBRID_SHARD advice, and a
// job whose sharded state alone does not fit (Llama-2-70B on 16 x 80 GB) is told how many GPUs
// it needs instead of a shorter sequence.
#include <gtest/gtest.h>

#include <string>

#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

std::string plan(const std::string& shape, const std::string& args) {
  const std::string source = SHARDTRAIN_SOURCE_DIR;
  const auto result = testing::run_command(
      std::string(SHARDTRAIN_BINARY) + " plan --config " + source + "/bench/bench.toml" +
      " --model.path=" + source + "/bench/shapes/" + shape + " --data.path=unused " + args);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return result.output;
}

TEST(PlanCli, QwenOnEightL4sProposesTheLeastMemoryAndHybridAcrossNodes) {
  const std::string out = plan("qwen2.5-1.5b",
                               "--train.micro_batch=1 --data.seq_len=8192 --world-size 8 "
                               "--local-world-size 4 --gpu-memory l4");
  EXPECT_NE(out.find("smallest setting that fits: --fsdp.strategy=FULL_SHARD "
                     "--train.activation_checkpointing=full"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("fastest setting that fits"), std::string::npos) << out;
  EXPECT_NE(out.find("across 2 nodes: HYBRID_SHARD fits with"), std::string::npos) << out;
}

TEST(PlanCli, SeventyBOnSixteenH100sNeedsMoreGpusNotAShorterSequence) {
  const std::string out = plan("llama2-70b",
                               "--train.micro_batch=1 --data.seq_len=256 --world-size 16 "
                               "--local-world-size 8 --gpu-memory h100");
  EXPECT_NE(out.find("the sharded state alone needs"), std::string::npos) << out;
  EXPECT_NE(out.find("a shorter data.seq_len cannot help; HINT: FULL_SHARD + full "
                     "checkpointing fits from "),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("lower data.seq_len"), std::string::npos) << out;
}

TEST(PlanCli, L40sIsAGpuName) {
  const std::string out = plan("qwen2.5-1.5b", "--world-size 4 --gpu-memory l40s");
  EXPECT_NE(out.find("fit on 44.99 GiB per GPU (l40s"), std::string::npos) << out;
}

}  // namespace
}  // namespace shardtrain
