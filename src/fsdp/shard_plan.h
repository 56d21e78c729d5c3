// ShardPlan: where each rank's shard of every flat unit lies, and what a rank's FSDP memory
// costs. Pure arithmetic on the ParamLayout and the shard group size, identical on every rank
// (DESIGN.md "Flat units": a unit's flat numel is padded up to a multiple of
// shard_group_size x kParamAlignElems; rank r of the shard group owns [r*S, (r+1)*S)).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "fsdp/fsdp_strategy.h"
#include "model/param_layout.h"

namespace shardtrain {

struct UnitShard {
  int64_t padded_numel = 0;  // multiple of group_size * kParamAlignElems
  int64_t shard_numel = 0;   // padded_numel / group_size
};

struct ShardPlan {
  int group_size = 1;
  std::vector<UnitShard> units;  // parallel to ParamLayout::units

  int64_t shard_begin(int unit, int group_rank) const {
    return units[unit].shard_numel * group_rank;
  }
  int64_t total_shard_numel() const;
  int64_t max_padded_numel() const;
};

ShardPlan make_shard_plan(const ParamLayout& layout, int group_size);

// Where a shard group of one (G = 1: one rank, or NO_SHARD) keeps the compute-dtype (bf16)
// copy of its parameters. Both give the same values bit for bit (the same round-to-nearest cast
// of the same fp32 master); they differ in memory and in device time.
enum class ComputeCopy {
  kKeep,      // a persistent copy of every unit (compute dtype bytes per parameter), written by
              // the optimizer step as it updates the master
  kOnDemand,  // no persistent copy: acquiring a unit casts its fp32 master into a pooled buffer
              // (root + one block at a time); two casts per unit and step (forward, backward)
};

// What changes the FSDP layout besides the plan and the strategy.
struct FsdpMemoryOptions {
  bool reduce_on_last_micro_batch = false;
  ComputeCopy compute_copy = ComputeCopy::kKeep;  // G = 1 only; G > 1 keeps the bf16 shard
  // The AdamW step of each unit runs as soon as its backward is done (one rank, no clipping,
  // no accumulation; fsdp/fsdp_units.h): no whole-model grad shard, a pooled fp32 gradient
  // buffer per unit in backward (root + one block) instead.
  bool update_in_backward = false;
};

// Bytes one rank holds for FSDP state. The formulas (also in docs/fsdp.md):
//   master = 4 * sum_u S_u; moments = 2 * master; grad_shard = master
//   B = min(2, blocks): the block in use and the one prefetched (or being reduced)
//   gathered_peak = act_bytes * (padded root + B * padded largest block)  (FULL/HYBRID_SHARD)
//                 = act_bytes * sum_u padded_u                            (SHARD_GRAD_OP)
//                 = 0 when G = 1 (the shard is the whole unit: no gather), except
//                 = act_bytes * (padded root + padded largest block) with ComputeCopy::kOnDemand
//   full_grad_peak = 4 * (padded root + B * padded largest block) per-micro-batch reduction
//                  = 4 * sum_u padded_u with reduce_on_last_micro_batch
//                    (G > 1; both + 2 * 4 * largest shard: the reduce-scatter outputs)
//                  = 0 for G = 1 (backward accumulates straight into the grad shard), except
//                  = 4 * (padded root + padded largest block) with update_in_backward
//                    (and grad_shard = 0)
//   compute_shard = act_bytes * sum_u S_u when the activation dtype is not fp32, else 0;
//                   0 at G = 1 with ComputeCopy::kOnDemand
struct FsdpMemory {
  size_t master_bytes = 0, moment_bytes = 0, grad_shard_bytes = 0;
  size_t gathered_peak_bytes = 0, full_grad_peak_bytes = 0, compute_shard_bytes = 0;
  size_t total() const {
    return master_bytes + moment_bytes + grad_shard_bytes + gathered_peak_bytes +
           full_grad_peak_bytes + compute_shard_bytes;
  }
};

FsdpMemory estimate_fsdp_memory(const ShardPlan& plan, FsdpStrategy strategy,
                                const FsdpMemoryOptions& options, DType activation_dtype);
// The default layout (ComputeCopy::kKeep, update after backward).
FsdpMemory estimate_fsdp_memory(const ShardPlan& plan, FsdpStrategy strategy,
                                bool reduce_on_last_micro_batch, DType activation_dtype);

}  // namespace shardtrain
