// ShardPlan: where each rank's shard of every flat unit lies, and what a rank's FSDP memory
// costs. Pure arithmetic on the ParamLayout and the shard group size, identical on every rank
// (DESIGN.md "Flat units": a unit's flat numel is padded up to a multiple of
// shard_group_size x kParamAlignElems; rank r of the shard group owns [r*S, (r+1)*S)).
//
// Frozen parameters (ParamSpec::trainable = false) come first in a unit: the frozen region is
// unit elements [0, F), the trainable region [F, numel). Each region is padded and sharded on its
// own: a frozen shard is held only in the compute dtype (no fp32 master, no moments, no
// gradient); a trainable shard has all of them. The gathered unit is the frozen region's gather
// followed, from element F on, by the trainable region's (the second gather overwrites the first
// one's padding), so the model sees the layout's offsets. A unit without frozen parameters
// (F = 0) is one trainable region, sharded as before.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "fsdp/fsdp_strategy.h"
#include "model/param_layout.h"

namespace shardtrain {

struct UnitShard {
  // The group this unit is sharded over: the shard group, or for a unit of experts
  // (UnitLayout::experts, expert parallelism) the expert shard group (dist/mesh.h).
  int group_size = 1;
  bool experts = false;
  // Frozen region, unit elements [0, frozen_numel): compute-dtype shards only.
  int64_t frozen_numel = 0;         // where the first trainable parameter starts (0: none frozen)
  int64_t frozen_padded_numel = 0;  // multiple of group_size * kParamAlignElems
  int64_t frozen_shard_numel = 0;   // frozen_padded_numel / group_size
  // Trainable region, unit elements [frozen_numel, numel): fp32 master, moments, gradient.
  int64_t padded_numel = 0;  // trainable elements, padded to group_size * kParamAlignElems
  int64_t shard_numel = 0;   // padded_numel / group_size
  // Elements of the gathered unit: the trainable region lands at frozen_numel.
  int64_t gathered_numel() const {
    return std::max(frozen_padded_numel, frozen_numel + padded_numel);
  }
};

struct ShardPlan {
  int group_size = 1;            // the shard group's (dense units)
  int expert_group_size = 1;     // the expert shard group's (units of experts)
  std::vector<UnitShard> units;  // parallel to ParamLayout::units

  // Whether the unit is split over more than one rank (else its shard is the whole unit).
  bool sharded(int unit) const { return units[unit].group_size > 1; }

  // Where group rank `group_rank`'s shard of the unit's trainable region starts, in elements of
  // that region (add frozen_numel for unit elements).
  int64_t shard_begin(int unit, int group_rank) const {
    return units[unit].shard_numel * group_rank;
  }
  int64_t total_shard_numel() const;         // trainable, all units
  int64_t total_frozen_shard_numel() const;  // frozen, all units
  int64_t max_padded_numel() const;          // trainable region
  bool has_frozen() const { return total_frozen_shard_numel() > 0; }
};

// Aborts with file:line (a layout bug, not a user mistake) when a unit's frozen parameters do not
// all come before its trainable ones.
// expert_group_size: the group of the layout's units of experts (0: the shard group's size).
ShardPlan make_shard_plan(const ParamLayout& layout, int group_size, int expert_group_size = 0);

// Where a shard group of one (G = 1: one rank, or NO_SHARD) keeps the compute-dtype (bf16)
// copy of its parameters. Both give the same values bit for bit (the same round-to-nearest cast
// of the same fp32 master); they differ in memory and in device time.
enum class ComputeCopy {
  kKeep,      // a persistent copy of every unit (compute dtype bytes per parameter), written by
              // the optimizer step as it updates the master
  kOnDemand,  // no persistent copy: acquiring a unit casts its fp32 master into a pooled buffer
              // (root + one block at a time); two casts per unit and step (forward, backward).
              // Not with frozen parameters (their shard is the copy): kKeep is used then.
};

// What changes the FSDP layout besides the plan and the strategy.
struct FsdpMemoryOptions {
  bool reduce_on_last_micro_batch = false;
  ComputeCopy compute_copy = ComputeCopy::kKeep;  // G = 1 only; G > 1 keeps the bf16 shard
  // The AdamW step of each unit runs as soon as its backward is done (one rank, no clipping,
  // no accumulation; fsdp/fsdp_units.h): no whole-model grad shard, a pooled fp32 gradient
  // buffer per unit in backward (root + one block) instead.
  bool update_in_backward = false;
  // FP8 all-gather (fsdp/fp8_gather.h): per unit, whether it holds FP8 weights (empty: none).
  // Counted where the unit is sharded: its e4m3 shard (one byte per element of the region
  // holding the weights: the frozen one with LoRA, else the trainable one), and one gathered
  // unit's bytes in flight (the largest) on top of gathered_peak.
  std::vector<bool> fp8_gather_units;
};

// Bytes one rank holds for FSDP state. The formulas (also in docs/fsdp.md), with S_u and
// padded_u the trainable region's shard and padded numel, Z_u the frozen region's shard and
// gathered_u the gathered unit (UnitShard::gathered_numel):
//   master = 4 * sum_u S_u; moments = 2 * master; grad_shard = master
//   frozen_shard = act_bytes * sum_u Z_u (2 bytes per element in bf16; no master, moments, grad)
//   B = min(2, blocks): the block in use and the one prefetched (or being reduced); with
//   expert parallelism "blocks" are the dense units, and the largest unit of experts sharded
//   over more than one rank adds once to gathered_peak and full_grad_peak (held beside its
//   block; at an expert shard group of one it is the rank's own storage)
//   gathered_peak = act_bytes * (gathered root + B * gathered largest block)  (FULL/HYBRID_SHARD)
//                 = act_bytes * sum_u gathered_u                            (SHARD_GRAD_OP)
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
//   fp8_shard = sum over units with FP8 weights (G > 1) of the shard of the region holding
//               them, one byte per element (fp8.all_gather; the side vector of norms and the
//               amaxes, a few KiB, are counted by FsdpUnits::memory only)
struct FsdpMemory {
  size_t master_bytes = 0, moment_bytes = 0, grad_shard_bytes = 0;
  size_t gathered_peak_bytes = 0, full_grad_peak_bytes = 0, compute_shard_bytes = 0;
  size_t frozen_shard_bytes = 0;
  size_t fp8_shard_bytes = 0;
  size_t total() const {
    return master_bytes + moment_bytes + grad_shard_bytes + gathered_peak_bytes +
           full_grad_peak_bytes + compute_shard_bytes + frozen_shard_bytes + fp8_shard_bytes;
  }
};

FsdpMemory estimate_fsdp_memory(const ShardPlan& plan, FsdpStrategy strategy,
                                const FsdpMemoryOptions& options, DType activation_dtype);
// The default layout (ComputeCopy::kKeep, update after backward).
FsdpMemory estimate_fsdp_memory(const ShardPlan& plan, FsdpStrategy strategy,
                                bool reduce_on_last_micro_batch, DType activation_dtype);

}  // namespace shardtrain
