// UnitShards: this rank's persistent FSDP state, unit by unit (fsdp/shard_plan.h for the regions
// and sizes): the frozen region's shard (compute dtype only) and the trainable region's fp32
// master, AdamW moments and gradient shards, plus the compute-dtype copy of the master that the
// all-gathers send. It owns the buffers and hands out views; it never communicates.
//
// Storage: per unit one "forward" buffer in the compute dtype holds [frozen shard | trainable
// compute shard]; on an fp32 backend that buffer is [frozen shard | master shard] (the master is
// what forward reads). At G = 1 it is therefore the whole unit in layout order (frozen_numel is
// a multiple of the alignment), returned to the model without a copy. With
// ComputeCopy::kOnDemand (G = 1, bf16, no frozen parameters) there is no forward buffer.
#pragma once

#include <vector>

#include "fsdp/shard_optimizer.h"
#include "fsdp/shard_plan.h"
#include "model/param_layout.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

class UnitShards {
 public:
  // `ops`, `layout` and `plan` must outlive this object. shard_rank: this rank's index in the
  // shard group; expert_shard_rank: in the expert shard group (units of experts, expert
  // parallelism; dist/mesh.h). keep_compute_copy = false: ComputeCopy::kOnDemand (REQUIRES G = 1
  // and no frozen parameters). keep_grad_shards = false: update_in_backward (no grad shards).
  UnitShards(Ops& ops, const ParamLayout& layout, const ShardPlan& plan, int shard_rank,
             int expert_shard_rank, bool keep_compute_copy, bool keep_grad_shards);
  UnitShards(const UnitShards&) = delete;
  UnitShards& operator=(const UnitShards&) = delete;

  int unit_count() const { return static_cast<int>(plan_.units.size()); }
  // Where this rank's trainable shard starts, in elements of the unit's trainable region.
  int64_t shard_begin(int unit) const {
    return plan_.shard_begin(unit, plan_.units[unit].experts ? expert_shard_rank_ : shard_rank_);
  }
  // The frozen shard (frozen_shard_numel, compute dtype); undefined when the unit has none.
  Tensor frozen_shard(int unit) const;
  // The trainable region's fp32 shards (shard_numel each). grad_shard is undefined without
  // grad shards (update_in_backward).
  Tensor master_shard(int unit) const;
  Tensor grad_shard(int unit) const;
  Tensor exp_avg_shard(int unit) const;
  Tensor exp_avg_sq_shard(int unit) const;
  // The compute-dtype copy of master_shard; undefined on an fp32 backend (the master is sent)
  // or when built on demand.
  Tensor compute_shard(int unit) const;
  // What the trainable region's all-gather sends: compute_shard, or master_shard on fp32.
  Tensor trainable_forward_shard(int unit) const;
  // G = 1 with a forward buffer: the whole unit (numel) as forward reads it.
  Tensor whole_unit(int unit) const;
  bool keeps_compute_copy() const { return keep_compute_copy_; }

  // Every unit's trainable shards as the optimizer sees them (offsets in unit elements).
  const std::vector<UnitBuffers>& optimizer_view() const { return optimizer_view_; }
  // Re-derives the compute copies from the masters (after loading them). Local.
  void refresh_compute_params();
  // Writes `values_f32` (frozen_shard_numel host floats) into the unit's frozen shard, rounded
  // to the compute dtype as the master's copy is.
  void upload_frozen(int unit, const float* values_f32);
  // Bytes held by the shards (master, moments, grad, compute copy, frozen); pools not counted.
  FsdpMemory memory() const;

 private:
  Ops& ops_;
  const ParamLayout& layout_;
  const ShardPlan& plan_;
  const int shard_rank_, expert_shard_rank_;
  const DType act_;
  const bool keep_compute_copy_, keep_grad_shards_;
  std::vector<DeviceBuffer> forward_, master_, grad_, exp_avg_, exp_avg_sq_;
  std::vector<UnitBuffers> optimizer_view_;
};

}  // namespace shardtrain
