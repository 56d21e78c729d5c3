#include "fsdp/shard_plan.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace shardtrain {
namespace {

ParamLayout two_unit_layout() {
  // Root of 1000 elements, one block of 300 (numels need not be aligned for this test).
  ParamLayout layout;
  layout.units.push_back({"root", {}, 1000});
  layout.units.push_back({"layers.0", {}, 300});
  return layout;
}

TEST(ShardPlan, PadsEachUnitToGroupTimesAlignment) {
  const ShardPlan plan = make_shard_plan(two_unit_layout(), 3);
  EXPECT_EQ(plan.units[0].padded_numel, 1152);  // 6 x (3 x 64)
  EXPECT_EQ(plan.units[0].shard_numel, 384);
  EXPECT_EQ(plan.units[1].padded_numel, 384);  // 2 x 192
  EXPECT_EQ(plan.units[1].shard_numel, 128);
  EXPECT_EQ(plan.shard_begin(0, 2), 768);
  EXPECT_EQ(plan.total_shard_numel(), 512);
  EXPECT_EQ(plan.max_padded_numel(), 1152);
}

TEST(ShardPlan, MemoryFormulasPerStrategy) {
  const ShardPlan plan = make_shard_plan(two_unit_layout(), 2);  // padded 1024 and 384
  const FsdpMemory full = estimate_fsdp_memory(plan, FsdpStrategy::kFullShard, false, DType::kF32);
  EXPECT_EQ(full.master_bytes, 4u * (512 + 192));
  EXPECT_EQ(full.moment_bytes, 2 * full.master_bytes);
  EXPECT_EQ(full.gathered_peak_bytes, 4u * (1024 + 384));                  // root + largest block
  EXPECT_EQ(full.full_grad_peak_bytes, 4u * (1024 + 384) + 2 * 4u * 512);  // + reduce outputs
  EXPECT_EQ(full.compute_shard_bytes, 0u);
  const FsdpMemory bf16 =
      estimate_fsdp_memory(plan, FsdpStrategy::kShardGradOp, true, DType::kBF16);
  EXPECT_EQ(bf16.gathered_peak_bytes, 2u * (1024 + 384));  // all units (only one block here)
  EXPECT_EQ(bf16.compute_shard_bytes, 2u * (512 + 192));
  const FsdpMemory none = estimate_fsdp_memory(make_shard_plan(two_unit_layout(), 1),
                                               FsdpStrategy::kNoShard, true, DType::kF32);
  EXPECT_EQ(none.gathered_peak_bytes, 0u);
  EXPECT_EQ(none.full_grad_peak_bytes, 0u);
  EXPECT_EQ(none.master_bytes, 4u * (1024 + 320));
}

TEST(ShardPlan, PrefetchKeepsTwoBlocksInFlight) {
  ParamLayout layout = two_unit_layout();
  layout.units.push_back({"layers.1", {}, 300});
  layout.units.push_back({"layers.2", {}, 300});
  const ShardPlan plan = make_shard_plan(layout, 2);  // padded 1024, then 384 per block
  const FsdpMemory full = estimate_fsdp_memory(plan, FsdpStrategy::kFullShard, false, DType::kBF16);
  EXPECT_EQ(full.gathered_peak_bytes, 2u * (1024 + 2 * 384));  // root + current + prefetched
  EXPECT_EQ(full.full_grad_peak_bytes, 4u * (1024 + 2 * 384) + 2 * 4u * 512);
  const FsdpMemory all = estimate_fsdp_memory(plan, FsdpStrategy::kShardGradOp, true, DType::kBF16);
  EXPECT_EQ(all.gathered_peak_bytes, 2u * (1024 + 3 * 384));
  EXPECT_EQ(all.full_grad_peak_bytes, 4u * (1024 + 3 * 384) + 2 * 4u * 512);
}

TEST(ShardPlan, OneRankLeversReplaceTheCopyAndTheGradShardWithPools) {
  ParamLayout layout = two_unit_layout();
  layout.units.push_back({"layers.1", {}, 300});
  const ShardPlan plan = make_shard_plan(layout, 1);  // padded 1024, 320, 320
  FsdpMemoryOptions options;
  options.compute_copy = ComputeCopy::kOnDemand;
  const FsdpMemory copy = estimate_fsdp_memory(plan, FsdpStrategy::kNoShard, options, DType::kBF16);
  EXPECT_EQ(copy.compute_shard_bytes, 0u);
  EXPECT_EQ(copy.gathered_peak_bytes, 2u * (1024 + 320));  // root + the block being computed
  EXPECT_EQ(copy.grad_shard_bytes, 4u * (1024 + 2 * 320));
  EXPECT_EQ(copy.full_grad_peak_bytes, 0u);
  options.update_in_backward = true;
  const FsdpMemory both =
      estimate_fsdp_memory(plan, FsdpStrategy::kFullShard, options, DType::kBF16);
  EXPECT_EQ(both.grad_shard_bytes, 0u);
  EXPECT_EQ(both.full_grad_peak_bytes, 4u * (1024 + 320));
  EXPECT_EQ(both.master_bytes, 4u * (1024 + 2 * 320));
  // The default layout keeps the copy; sharded plans ignore both levers.
  EXPECT_EQ(
      estimate_fsdp_memory(plan, FsdpStrategy::kNoShard, false, DType::kBF16).compute_shard_bytes,
      2u * (1024 + 2 * 320));
  const ShardPlan sharded = make_shard_plan(layout, 2);  // padded 1024, 384, 384
  const FsdpMemory g2 =
      estimate_fsdp_memory(sharded, FsdpStrategy::kFullShard, options, DType::kBF16);
  EXPECT_EQ(g2.compute_shard_bytes, 2u * (512 + 2 * 192));
  EXPECT_EQ(g2.grad_shard_bytes, 4u * (512 + 2 * 192));
  EXPECT_EQ(g2.gathered_peak_bytes, 2u * (1024 + 2 * 384));
}

TEST(FsdpStrategy, GroupSizes) {
  EXPECT_EQ(shard_group_size_for(FsdpStrategy::kFullShard, 8, 4, 0), 8);
  EXPECT_EQ(shard_group_size_for(FsdpStrategy::kNoShard, 8, 4, 0), 1);
  EXPECT_EQ(shard_group_size_for(FsdpStrategy::kHybridShard, 8, 4, 0), 4);
  EXPECT_EQ(shard_group_size_for(FsdpStrategy::kHybridShard, 8, 4, 2), 2);
  EXPECT_THROW(shard_group_size_for(FsdpStrategy::kHybridShard, 8, 4, 3), Error);
  EXPECT_THROW(parse_fsdp_strategy("ZERO3"), Error);
  EXPECT_EQ(parse_fsdp_strategy("HYBRID_SHARD"), FsdpStrategy::kHybridShard);
}

}  // namespace
}  // namespace shardtrain
