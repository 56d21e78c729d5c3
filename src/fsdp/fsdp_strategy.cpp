#include "fsdp/fsdp_strategy.h"

#include "core/error.h"

namespace shardtrain {

FsdpStrategy parse_fsdp_strategy(const std::string& name) {
  if (name == "FULL_SHARD") return FsdpStrategy::kFullShard;
  if (name == "SHARD_GRAD_OP") return FsdpStrategy::kShardGradOp;
  if (name == "HYBRID_SHARD") return FsdpStrategy::kHybridShard;
  if (name == "NO_SHARD") return FsdpStrategy::kNoShard;
  fail(
      "config key 'fsdp.strategy' must be one of FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, "
      "NO_SHARD; got '{}'",
      name);
}

const char* fsdp_strategy_name(FsdpStrategy strategy) {
  switch (strategy) {
    case FsdpStrategy::kFullShard:
      return "FULL_SHARD";
    case FsdpStrategy::kShardGradOp:
      return "SHARD_GRAD_OP";
    case FsdpStrategy::kHybridShard:
      return "HYBRID_SHARD";
    case FsdpStrategy::kNoShard:
      return "NO_SHARD";
  }
  return "?";
}

int shard_group_size_for(FsdpStrategy strategy, int world, int local_world, int requested_group) {
  switch (strategy) {
    case FsdpStrategy::kFullShard:
    case FsdpStrategy::kShardGradOp:
      return world;
    case FsdpStrategy::kNoShard:
      return 1;
    case FsdpStrategy::kHybridShard: {
      const int group = requested_group > 0 ? requested_group : local_world;
      if (group < 1 || world % group != 0) {
        fail(
            "config key 'fsdp.shard_group_size' ({}; 0 = ranks per node = {}) must divide the "
            "world size {} for HYBRID_SHARD; HINT: set it to a divisor of {}",
            requested_group, local_world, world, world);
      }
      return group;
    }
  }
  return world;
}

int expert_parallel_for(int64_t requested, int shard_group, int64_t experts) {
  if (requested < 1) {
    fail("config key 'fsdp.expert_parallel' ({}) must be >= 1; HINT: 1 = no expert parallelism",
         requested);
  }
  if (requested == 1) return 1;
  if (experts == 0) {
    fail(
        "config key 'fsdp.expert_parallel' ({}) needs a mixture-of-experts model (qwen3_moe, "
        "mixtral); HINT: set it to 1 for a dense model",
        requested);
  }
  if (shard_group % requested != 0) {
    fail(
        "config key 'fsdp.expert_parallel' ({}) must divide the shard group size {} (the "
        "strategy's; HYBRID_SHARD: fsdp.shard_group_size); HINT: use a divisor of {}",
        requested, shard_group, shard_group);
  }
  if (experts % requested != 0) {
    fail(
        "config key 'fsdp.expert_parallel' ({}) must divide the model's {} experts; HINT: use a "
        "divisor of {} that also divides the shard group size {}",
        requested, experts, experts, shard_group);
  }
  return static_cast<int>(requested);
}

}  // namespace shardtrain
