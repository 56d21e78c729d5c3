#include "fsdp/shard_plan.h"

#include <algorithm>

#include "core/error.h"

namespace shardtrain {

int64_t ShardPlan::total_shard_numel() const {
  int64_t total = 0;
  for (const UnitShard& u : units) total += u.shard_numel;
  return total;
}

int64_t ShardPlan::max_padded_numel() const {
  int64_t largest = 0;
  for (const UnitShard& u : units) largest = std::max(largest, u.padded_numel);
  return largest;
}

ShardPlan make_shard_plan(const ParamLayout& layout, int group_size) {
  SHARDTRAIN_CHECK(group_size >= 1, "group size {}", group_size);
  ShardPlan plan;
  plan.group_size = group_size;
  const int64_t quantum = group_size * kParamAlignElems;
  for (const UnitLayout& unit : layout.units) {
    UnitShard shard;
    shard.padded_numel = (unit.numel + quantum - 1) / quantum * quantum;
    shard.shard_numel = shard.padded_numel / group_size;
    plan.units.push_back(shard);
  }
  return plan;
}

FsdpMemory estimate_fsdp_memory(const ShardPlan& plan, FsdpStrategy strategy,
                                const FsdpMemoryOptions& options, DType activation_dtype) {
  FsdpMemory m;
  const size_t f32 = sizeof(float), act = dtype_size(activation_dtype);
  const size_t shard = static_cast<size_t>(plan.total_shard_numel());
  const bool sharded = plan.group_size > 1;
  const bool on_demand = !sharded && options.compute_copy == ComputeCopy::kOnDemand;
  const bool update_in_backward = !sharded && options.update_in_backward;
  m.master_bytes = shard * f32;
  m.moment_bytes = 2 * shard * f32;
  m.grad_shard_bytes = update_in_backward ? 0 : shard * f32;
  if (activation_dtype != DType::kF32 && !on_demand) m.compute_shard_bytes = shard * act;

  size_t all_units = 0, largest_block = 0, blocks = 0, largest_shard = 0;
  for (size_t u = 0; u < plan.units.size(); ++u) {
    all_units += static_cast<size_t>(plan.units[u].padded_numel);
    largest_shard = std::max(largest_shard, static_cast<size_t>(plan.units[u].shard_numel));
    if (static_cast<int>(u) != kRootUnit) {
      largest_block = std::max(largest_block, static_cast<size_t>(plan.units[u].padded_numel));
      ++blocks;
    }
  }
  const size_t root =
      plan.units.empty() ? 0 : static_cast<size_t>(plan.units[kRootUnit].padded_numel);
  // The block being computed and the one prefetched (forward and backward), or the one being
  // computed and the one being reduced (backward).
  const size_t root_and_blocks = root + std::min<size_t>(blocks, 2) * largest_block;
  // G = 1, built on demand: the root (held for the whole pass) and the block being computed.
  const size_t root_and_block = root + std::min<size_t>(blocks, 1) * largest_block;
  if (sharded) {
    const bool keep_all = strategy == FsdpStrategy::kShardGradOp;
    m.gathered_peak_bytes = act * (keep_all ? all_units : root_and_blocks);
    m.full_grad_peak_bytes =
        f32 * (options.reduce_on_last_micro_batch ? all_units : root_and_blocks) +
        2 * f32 * largest_shard;  // the two reduce-scatter outputs
  } else {
    if (on_demand) m.gathered_peak_bytes = act * root_and_block;
    if (update_in_backward) m.full_grad_peak_bytes = f32 * root_and_block;
  }
  return m;
}

FsdpMemory estimate_fsdp_memory(const ShardPlan& plan, FsdpStrategy strategy,
                                bool reduce_on_last_micro_batch, DType activation_dtype) {
  FsdpMemoryOptions options;
  options.reduce_on_last_micro_batch = reduce_on_last_micro_batch;
  return estimate_fsdp_memory(plan, strategy, options, activation_dtype);
}

}  // namespace shardtrain
