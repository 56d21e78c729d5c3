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

// Bytes one rank holds for FSDP state. The formulas (also in docs/fsdp.md):
//   master = 4 * sum_u S_u; moments = 2 * master; grad_shard = master
//   B = min(2, blocks): the block in use and the one prefetched (or being reduced)
//   gathered_peak = act_bytes * (padded root + B * padded largest block)  (FULL/HYBRID_SHARD)
//                 = act_bytes * sum_u padded_u                            (SHARD_GRAD_OP)
//                 = 0 when G = 1 (the shard is the whole unit: no gather)
//   full_grad_peak = 4 * (padded root + B * padded largest block) per-micro-batch reduction
//                  = 4 * sum_u padded_u with reduce_on_last_micro_batch
//                    (G > 1; both + 2 * 4 * largest shard: the reduce-scatter outputs)
//                  = 0 for G = 1 (backward accumulates straight into the grad shard)
//   compute_shard = act_bytes * sum_u S_u when the activation dtype is not fp32, else 0
struct FsdpMemory {
  size_t master_bytes = 0, moment_bytes = 0, grad_shard_bytes = 0;
  size_t gathered_peak_bytes = 0, full_grad_peak_bytes = 0, compute_shard_bytes = 0;
  size_t total() const {
    return master_bytes + moment_bytes + grad_shard_bytes + gathered_peak_bytes +
           full_grad_peak_bytes + compute_shard_bytes;
  }
};

FsdpMemory estimate_fsdp_memory(const ShardPlan& plan, FsdpStrategy strategy,
                                bool reduce_on_last_micro_batch, DType activation_dtype);

}  // namespace shardtrain
