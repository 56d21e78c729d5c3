// Sharding strategies (DESIGN.md "Strategies") and the 2-D mesh shape they imply.
//
// Every strategy is a (shard group size G, replicate group size R = world / G) mesh plus a
// release policy: FULL_SHARD is G = world; SHARD_GRAD_OP is G = world but keeps the parameters
// gathered in forward for backward; HYBRID_SHARD is G = fsdp.shard_group_size (default: ranks
// per node); NO_SHARD is G = 1 (every rank holds everything, grads all-reduced).
#pragma once

#include <cstdint>
#include <string>

namespace shardtrain {

enum class FsdpStrategy { kFullShard, kShardGradOp, kHybridShard, kNoShard };

// "FULL_SHARD" | "SHARD_GRAD_OP" | "HYBRID_SHARD" | "NO_SHARD"; throws Error otherwise.
FsdpStrategy parse_fsdp_strategy(const std::string& name);
const char* fsdp_strategy_name(FsdpStrategy strategy);

// Shard group size for `strategy` on `world` ranks. requested_group: fsdp.shard_group_size
// (0 = local_world). Throws Error naming the key when HYBRID's group does not divide the world.
int shard_group_size_for(FsdpStrategy strategy, int world, int local_world, int requested_group);

// Checks fsdp.expert_parallel (N) against the shard group and the model's experts (0: a dense
// model) and returns it. Throws Error naming the key when N < 1, or N > 1 with a dense model,
// or N does not divide the shard group size or the expert count.
int expert_parallel_for(int64_t requested, int shard_group, int64_t experts);

}  // namespace shardtrain
