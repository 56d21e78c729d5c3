// `shardtrain plan --gpu-memory` on the reference workloads (bench/shapes), through the binary:
// the smallest setting is the least memory, multi-node jobs get the HYBRID_SHARD advice, and a
// job whose sharded state alone does not fit (Llama-2-70B on 16 x 80 GB) is told how many GPUs
// it needs instead of a shorter sequence.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

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

TEST(PlanCli, ExpertParallelHoldsFewerExpertsAndCountsTheAllToAllBuffers) {
  const std::string base = "--train.micro_batch=1 --data.seq_len=4096 --world-size 8 ";
  const std::string none = plan("qwen3-30b-a3b-8l", base);
  const std::string eight = plan("qwen3-30b-a3b-8l", base + "--fsdp.expert_parallel=8");
  EXPECT_EQ(none.find("fsdp.expert_parallel"), std::string::npos) << none;
  EXPECT_NE(eight.find("fsdp.expert_parallel = 8: each rank holds 16 of 128 experts per sparse "
                       "block (its units of experts sharded over 1 ranks); all-to-all buffers "),
            std::string::npos)
      << eight;
  // FULL_SHARD gathers 16 experts per block instead of 128: the row's "gathered" column shrinks.
  const auto gathered = [](const std::string& out) {
    const size_t row = out.find("\nFULL_SHARD");
    std::istringstream fields(out.substr(row + 1, out.find('\n', row + 1) - row - 1));
    std::vector<std::string> columns;
    for (std::string f; fields >> f;) columns.push_back(f);
    return columns;
  };
  const std::vector<std::string> a = gathered(none), b = gathered(eight);
  // strategy, group, then (value, "MiB") per column: gathered is the sixth column.
  ASSERT_GE(a.size(), 18u) << none;
  ASSERT_GE(b.size(), 18u) << eight;
  EXPECT_EQ(a[13], "MiB") << none;
  EXPECT_LT(std::stod(b[12]), std::stod(a[12]) / 2) << a[12] << " vs " << b[12];
}

// The row's column `index` (strategy, group, then value and "MiB" per column) as a number.
double column(const std::string& out, const std::string& strategy, size_t index) {
  const size_t row = out.find("\n" + strategy + " ");
  EXPECT_NE(row, std::string::npos) << out;
  std::istringstream fields(out.substr(row + 1, out.find('\n', row + 1) - row - 1));
  std::vector<std::string> columns;
  for (std::string f; fields >> f;) columns.push_back(f);
  EXPECT_GT(columns.size(), index) << out;
  return columns.size() > index ? std::stod(columns[index]) : 0.0;
}

TEST(PlanCli, Fp8AllGatherCountsTheE4m3ShardsWhereUnitsAreSharded) {
  const std::string base =
      "--train.micro_batch=1 --data.seq_len=4096 --world-size 8 --train.precision=fp8 ";
  const std::string bf16_gather = plan("llama3.2-1b", base);
  const std::string e4m3_gather = plan("llama3.2-1b", base + "--fp8.all_gather=true");
  EXPECT_EQ(bf16_gather.find("fp8.all_gather"), std::string::npos) << bf16_gather;
  EXPECT_NE(e4m3_gather.find("fp8.all_gather: where the shard group has more than one rank"),
            std::string::npos)
      << e4m3_gather;
  // The compute copy column (index 4) grows by one byte per element of the 16 FP8 blocks'
  // shards: 16 x 60,817,408 / 8 bytes = 116.0 MiB at FULL_SHARD over 8; nothing at NO_SHARD.
  const double added = column(e4m3_gather, "FULL_SHARD", 4) - column(bf16_gather, "FULL_SHARD", 4);
  EXPECT_NEAR(added, 16.0 * 60817408 / 8 / (1 << 20), 0.5) << e4m3_gather;
  EXPECT_EQ(column(e4m3_gather, "NO_SHARD", 4), column(bf16_gather, "NO_SHARD", 4));
  // And one gathered block's bytes in flight (index 12): 60.8M elements, about 58 MiB.
  const double gathered =
      column(e4m3_gather, "FULL_SHARD", 12) - column(bf16_gather, "FULL_SHARD", 12);
  EXPECT_NEAR(gathered, 60817408.0 / (1 << 20), 1.0) << e4m3_gather;
}

TEST(PlanCli, ExpertParallelThatDoesNotDivideTheShardGroupIsOneLineAndExitTwo) {
  const std::string source = SHARDTRAIN_SOURCE_DIR;
  const auto result = testing::run_command(
      std::string(SHARDTRAIN_BINARY) + " plan --config " + source + "/bench/bench.toml" +
      " --model.path=" + source + "/bench/shapes/qwen3-30b-a3b-8l --data.path=unused" +
      " --world-size 8 --fsdp.expert_parallel=3");
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_NE(result.output.find("'fsdp.expert_parallel' (3) must divide the shard group size 8"),
            std::string::npos)
      << result.output;
  EXPECT_EQ(result.output.find('\n'), result.output.size() - 1) << result.output;
}

}  // namespace
}  // namespace shardtrain
