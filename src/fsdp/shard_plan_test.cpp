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

ParamSpec spec(const std::string& name, int64_t numel, int64_t offset, bool trainable) {
  ParamSpec p;
  p.name = name;
  p.shape = Shape({numel});
  p.offset = offset;
  p.trainable = trainable;
  return p;
}

// LoRA's shape: a frozen root; a block of a frozen base [0, 192) and trainable adapters after it.
ParamLayout frozen_layout() {
  ParamLayout layout;
  layout.units.push_back(
      {"root", {spec("embed", 200, 0, false), spec("norm", 40, 256, false)}, 320});
  layout.units.push_back({"layers.0",
                          {spec("base", 130, 0, false), spec("lora_a", 100, 192, true),
                           spec("lora_b", 64, 320, true)},
                          384});
  return layout;
}

TEST(ShardPlan, FrozenRegionIsShardedApartFromTheTrainableOne) {
  const ShardPlan plan = make_shard_plan(frozen_layout(), 2);  // quantum 128
  EXPECT_EQ(plan.units[0].frozen_numel, 320);
  EXPECT_EQ(plan.units[0].frozen_padded_numel, 384);
  EXPECT_EQ(plan.units[0].frozen_shard_numel, 192);
  EXPECT_EQ(plan.units[0].padded_numel, 0);
  EXPECT_EQ(plan.units[0].gathered_numel(), 384);
  EXPECT_EQ(plan.units[1].frozen_numel, 192);
  EXPECT_EQ(plan.units[1].frozen_padded_numel, 256);
  EXPECT_EQ(plan.units[1].frozen_shard_numel, 128);
  EXPECT_EQ(plan.units[1].padded_numel, 256);  // 192 trainable elements
  EXPECT_EQ(plan.units[1].shard_numel, 128);
  // The trainable gather lands at 192, over the frozen gather's padding [192, 256).
  EXPECT_EQ(plan.units[1].gathered_numel(), 192 + 256);
  EXPECT_EQ(plan.total_shard_numel(), 128);
  EXPECT_EQ(plan.total_frozen_shard_numel(), 192 + 128);
  // Nothing frozen: one trainable region, as before.
  EXPECT_EQ(make_shard_plan(two_unit_layout(), 3).units[0].frozen_numel, 0);
  EXPECT_FALSE(make_shard_plan(two_unit_layout(), 3).has_frozen());
}

TEST(ShardPlan, FrozenParametersCostTwoBytesInBf16AndNoOptimizerState) {
  const ShardPlan plan = make_shard_plan(frozen_layout(), 2);
  const FsdpMemory m = estimate_fsdp_memory(plan, FsdpStrategy::kFullShard, false, DType::kBF16);
  EXPECT_EQ(m.frozen_shard_bytes, 2u * (192 + 128));
  EXPECT_EQ(m.master_bytes, 4u * 128);  // the adapters only
  EXPECT_EQ(m.moment_bytes, 2 * 4u * 128);
  EXPECT_EQ(m.grad_shard_bytes, 4u * 128);
  EXPECT_EQ(m.compute_shard_bytes, 2u * 128);
  EXPECT_EQ(m.gathered_peak_bytes, 2u * (384 + 448));  // root + the one block, both regions
  EXPECT_EQ(m.full_grad_peak_bytes, 4u * 256 + 2 * 4u * 128);  // trainable region only
  EXPECT_EQ(m.total(), m.master_bytes + m.moment_bytes + m.grad_shard_bytes +
                           m.gathered_peak_bytes + m.full_grad_peak_bytes +
                           m.compute_shard_bytes + m.frozen_shard_bytes);
  // G = 1: on demand does not apply (the frozen shard is the compute copy), nothing gathered.
  FsdpMemoryOptions on_demand;
  on_demand.compute_copy = ComputeCopy::kOnDemand;
  const FsdpMemory one = estimate_fsdp_memory(make_shard_plan(frozen_layout(), 1),
                                              FsdpStrategy::kNoShard, on_demand, DType::kBF16);
  EXPECT_EQ(one.frozen_shard_bytes, 2u * (320 + 192));
  EXPECT_EQ(one.compute_shard_bytes, 2u * 192);
  EXPECT_EQ(one.gathered_peak_bytes, 0u);
}

TEST(ShardPlanDeathTest, FrozenParameterAfterATrainableOneIsALayoutBug) {
  ParamLayout layout;
  layout.units.push_back(
      {"root", {spec("trained", 64, 0, true), spec("frozen", 64, 64, false)}, 128});
  EXPECT_DEATH(make_shard_plan(layout, 1), "frozen parameter lies after a trainable one");
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
