#include "fsdp/shard_plan.h"

#include <algorithm>

#include "core/error.h"

namespace shardtrain {

int64_t ShardPlan::total_shard_numel() const {
  int64_t total = 0;
  for (const UnitShard& u : units) total += u.shard_numel;
  return total;
}

int64_t ShardPlan::total_frozen_shard_numel() const {
  int64_t total = 0;
  for (const UnitShard& u : units) total += u.frozen_shard_numel;
  return total;
}

int64_t ShardPlan::max_padded_numel() const {
  int64_t largest = 0;
  for (const UnitShard& u : units) largest = std::max(largest, u.padded_numel);
  return largest;
}

namespace {

// Where the unit's trainable region starts: its frozen parameters must all come first.
int64_t frozen_numel_of(const UnitLayout& unit) {
  int64_t frozen_end = 0, trainable_begin = unit.numel;
  for (const ParamSpec& p : unit.params) {
    if (p.trainable) {
      trainable_begin = std::min(trainable_begin, p.offset);
    } else {
      frozen_end = std::max(frozen_end, p.offset + p.numel());
    }
  }
  if (frozen_end == 0) return 0;
  SHARDTRAIN_CHECK(frozen_end <= trainable_begin,
                   "unit {}: a frozen parameter lies after a trainable one (fsdp/shard_plan.h)",
                   unit.name);
  SHARDTRAIN_CHECK(trainable_begin % kParamAlignElems == 0, "unit {}: trainable region at {}",
                   unit.name, trainable_begin);
  return trainable_begin;
}

int64_t round_up(int64_t n, int64_t quantum) { return (n + quantum - 1) / quantum * quantum; }

}  // namespace

ShardPlan make_shard_plan(const ParamLayout& layout, int group_size, int expert_group_size) {
  if (expert_group_size == 0) expert_group_size = group_size;
  SHARDTRAIN_CHECK(group_size >= 1 && expert_group_size >= 1, "group sizes {} and {}", group_size,
                   expert_group_size);
  ShardPlan plan;
  plan.group_size = group_size;
  plan.expert_group_size = expert_group_size;
  for (const UnitLayout& unit : layout.units) {
    UnitShard shard;
    shard.experts = unit.experts;
    shard.group_size = unit.experts ? expert_group_size : group_size;
    const int64_t quantum = shard.group_size * kParamAlignElems;
    shard.frozen_numel = frozen_numel_of(unit);
    shard.frozen_padded_numel = round_up(shard.frozen_numel, quantum);
    shard.frozen_shard_numel = shard.frozen_padded_numel / shard.group_size;
    shard.padded_numel = round_up(unit.numel - shard.frozen_numel, quantum);
    shard.shard_numel = shard.padded_numel / shard.group_size;
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
  // A frozen region's shard is the compute copy already: the copy is kept (fsdp_units.h).
  const bool on_demand =
      !sharded && options.compute_copy == ComputeCopy::kOnDemand && !plan.has_frozen();
  const bool update_in_backward = !sharded && options.update_in_backward;
  m.master_bytes = shard * f32;
  m.moment_bytes = 2 * shard * f32;
  m.grad_shard_bytes = update_in_backward ? 0 : shard * f32;
  m.frozen_shard_bytes = static_cast<size_t>(plan.total_frozen_shard_numel()) * act;
  if (activation_dtype != DType::kF32 && !on_demand) m.compute_shard_bytes = shard * act;

  // Gathered units (frozen and trainable regions) and full gradients (trainable region only).
  size_t all_gathered = 0, all_grads = 0, blocks = 0, largest_shard = 0;
  size_t largest_gathered_block = 0, largest_grad_block = 0;
  // Units of experts (expert parallelism): one is held beside its block, never prefetched; at
  // an expert shard group of one it is the rank's own storage (no gather, no full gradient).
  size_t largest_gathered_experts = 0, largest_grad_experts = 0;
  for (size_t u = 0; u < plan.units.size(); ++u) {
    const UnitShard& unit = plan.units[u];
    all_gathered += static_cast<size_t>(unit.gathered_numel());
    all_grads += static_cast<size_t>(unit.padded_numel);
    largest_shard = std::max(largest_shard, static_cast<size_t>(unit.shard_numel));
    if (unit.experts) {
      if (unit.group_size > 1) {
        largest_gathered_experts =
            std::max(largest_gathered_experts, static_cast<size_t>(unit.gathered_numel()));
        largest_grad_experts =
            std::max(largest_grad_experts, static_cast<size_t>(unit.padded_numel));
      } else {
        all_gathered -= static_cast<size_t>(unit.gathered_numel());
        all_grads -= static_cast<size_t>(unit.padded_numel);
      }
    } else if (static_cast<int>(u) != kRootUnit) {
      largest_gathered_block =
          std::max(largest_gathered_block, static_cast<size_t>(unit.gathered_numel()));
      largest_grad_block = std::max(largest_grad_block, static_cast<size_t>(unit.padded_numel));
      ++blocks;
    }
  }
  const UnitShard no_unit;
  const UnitShard& root_unit = plan.units.empty() ? no_unit : plan.units[kRootUnit];
  // The block being computed and the one prefetched (forward and backward), or the one being
  // computed and the one being reduced (backward); with the root, held through the pass.
  const size_t in_flight = std::min<size_t>(blocks, 2);
  const size_t gathered_root_and_blocks = static_cast<size_t>(root_unit.gathered_numel()) +
                                          in_flight * largest_gathered_block +
                                          largest_gathered_experts;
  const size_t grad_root_and_blocks = static_cast<size_t>(root_unit.padded_numel) +
                                      in_flight * largest_grad_block + largest_grad_experts;
  // G = 1, built on demand: the root (held for the whole pass) and the block being computed.
  const size_t root_and_block = static_cast<size_t>(root_unit.padded_numel) +
                                std::min<size_t>(blocks, 1) * largest_grad_block;
  if (sharded) {
    const bool keep_all = strategy == FsdpStrategy::kShardGradOp;
    m.gathered_peak_bytes = act * (keep_all ? all_gathered : gathered_root_and_blocks);
    size_t largest_fp8_gathered = 0;
    for (size_t u = 0; u < options.fp8_gather_units.size() && u < plan.units.size(); ++u) {
      const UnitShard& unit = plan.units[u];
      if (!options.fp8_gather_units[u] || unit.experts) continue;
      m.fp8_shard_bytes += static_cast<size_t>(unit.frozen_shard_numel > 0 ? unit.frozen_shard_numel
                                                                           : unit.shard_numel);
      largest_fp8_gathered =
          std::max(largest_fp8_gathered, static_cast<size_t>(unit.gathered_numel()));
    }
    m.gathered_peak_bytes += largest_fp8_gathered;
    m.full_grad_peak_bytes =
        f32 * (options.reduce_on_last_micro_batch ? all_grads : grad_root_and_blocks) +
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
