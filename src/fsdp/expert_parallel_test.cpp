// Expert parallelism's pure parts: the fsdp.expert_parallel check (one Error naming the key per
// bad value), the layout of one expert rank (model/param_layout.h ExpertPlacement: the router in
// its block, the rank's experts in a unit of their own under their Hub names) and the shard
// plan (units of experts split over the expert shard group, dense units over the shard group).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "fsdp/fsdp_strategy.h"
#include "fsdp/shard_plan.h"
#include "model/hf_config.h"
#include "model/param_layout.h"

namespace shardtrain {
namespace {

ModelConfig qwen3_moe() { return read_hf_config(testing::kGolden + "qwen3_moe/config.json"); }

std::string error_of(int64_t requested, int shard_group, int64_t experts) {
  try {
    expert_parallel_for(requested, shard_group, experts);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ExpertParallelFor, AcceptsDivisorsOfTheShardGroupAndTheExperts) {
  EXPECT_EQ(expert_parallel_for(1, 4, 8), 1);
  EXPECT_EQ(expert_parallel_for(1, 4, 0), 1);  // a dense model without the key
  EXPECT_EQ(expert_parallel_for(2, 4, 8), 2);
  EXPECT_EQ(expert_parallel_for(4, 4, 8), 4);
}

TEST(ExpertParallelFor, EachBadValueNamesTheKeyAndWhatItMustDivide) {
  const std::string zero = error_of(0, 4, 8);
  EXPECT_NE(zero.find("'fsdp.expert_parallel' (0) must be >= 1"), std::string::npos) << zero;
  const std::string group = error_of(3, 4, 6);
  EXPECT_NE(group.find("'fsdp.expert_parallel' (3) must divide the shard group size 4"),
            std::string::npos)
      << group;
  const std::string experts = error_of(4, 4, 6);
  EXPECT_NE(experts.find("'fsdp.expert_parallel' (4) must divide the model's 6 experts"),
            std::string::npos)
      << experts;
  const std::string dense = error_of(2, 4, 0);
  EXPECT_NE(dense.find("'fsdp.expert_parallel' (2) needs a mixture-of-experts model"),
            std::string::npos)
      << dense;
  for (const std::string& message : {zero, group, experts, dense}) {
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(ExpertPlacementLayout, EachRankHoldsItsExpertsInAUnitAfterTheBlocks) {
  const ModelConfig c = qwen3_moe();  // 3 layers, layer 1 dense, 8 experts
  const int64_t E = c.moe.num_experts;
  ASSERT_EQ(E % 2, 0);
  const ParamLayout whole = make_param_layout(c);
  EXPECT_EQ(whole.expert_parallel, 1);
  for (int unit : whole.expert_unit) EXPECT_EQ(unit, -1);
  for (int rank = 0; rank < 2; ++rank) {
    const ParamLayout mine = make_param_layout(c, LoraConfig(), ExpertPlacement{2, rank});
    EXPECT_EQ(mine.expert_parallel, 2);
    // Root, 3 blocks, then the two sparse blocks' units of experts.
    ASSERT_EQ(mine.units.size(), 6u);
    EXPECT_EQ(mine.expert_unit, (std::vector<int>{4, -1, 5}));
    const UnitLayout& experts = mine.units[4];
    EXPECT_TRUE(experts.experts);
    EXPECT_EQ(experts.name, "layers.0.experts");
    ASSERT_EQ(experts.params.size(), static_cast<size_t>(3 * E / 2));
    const int64_t first = rank * E / 2;
    EXPECT_EQ(experts.params[0].name,
              "model.layers.0.mlp.experts." + std::to_string(first) + ".gate_proj.weight");
    EXPECT_EQ(
        experts.params.back().name,
        "model.layers.0.mlp.experts." + std::to_string(first + E / 2 - 1) + ".down_proj.weight");
    // The block keeps its router and no expert; the dense block is unchanged.
    const UnitLayout& block = mine.units[block_unit(0)];
    EXPECT_GE(block.find("model.layers.0.mlp.gate.weight"), 0);
    EXPECT_LT(block.find("model.layers.0.mlp.experts.0.gate_proj.weight"), 0);
    EXPECT_EQ(mine.units[block_unit(1)].numel, whole.units[block_unit(1)].numel);
    // Every parameter of the whole model is in one of the two ranks' layouts exactly once.
    EXPECT_EQ(
        mine.parameter_count(),
        whole.parameter_count() - 2 * (3 * E / 2) * c.moe.expert_intermediate * c.hidden_size);
  }
}

TEST(ExpertPlacementShardPlan, UnitsOfExpertsSplitOverTheExpertShardGroup) {
  const ModelConfig c = qwen3_moe();
  const ParamLayout mine = make_param_layout(c, LoraConfig(), ExpertPlacement{2, 1});
  // FULL_SHARD on 4 ranks with 2-way expert parallelism: dense units over 4, experts over 2.
  const ShardPlan plan = make_shard_plan(mine, 4, 2);
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const UnitShard& shard = plan.units[u];
    EXPECT_EQ(shard.experts, mine.units[u].experts);
    EXPECT_EQ(shard.group_size, shard.experts ? 2 : 4) << u;
    EXPECT_EQ(shard.padded_numel % (shard.group_size * kParamAlignElems), 0);
    EXPECT_EQ(shard.shard_numel * shard.group_size, shard.padded_numel);
    EXPECT_EQ(plan.sharded(static_cast<int>(u)), true);
  }
  // 2-way on a shard group of 2: each rank holds its experts whole.
  const ShardPlan whole_experts = make_shard_plan(mine, 2, 1);
  EXPECT_FALSE(whole_experts.sharded(4));
  EXPECT_EQ(whole_experts.units[4].shard_numel, mine.units[4].numel);
}

}  // namespace
}  // namespace shardtrain
