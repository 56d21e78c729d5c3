// GradReducer: the gradient side of FSDP: the buffers backward writes into, the reduction queue
// that sums them over ranks into this rank's grad shards, and the global gradient norm. Only the
// trainable region of a unit has gradients (fsdp/shard_plan.h): buffers, reductions and the norm
// cover [frozen_numel, numel) and nothing of the frozen region.
//
//  - acquire(u), G > 1: backward writes into a full fp32 buffer of the trainable region (fresh
//    from a pool: overwritten, no zero fill; kept across micro-batches: accumulated); ready(u)
//    reduce-scatters (sum) it into the grad shard (added to what earlier micro-batches left
//    there) and frees it. With reduce_on_last_micro_batch the full buffer is kept across
//    micro-batches and reduced once, on the last one (costs one full fp32 buffer per unit).
//    G = 1: backward writes straight into the grad shard (= the whole trainable region),
//    overwriting it on the step's first micro-batch and adding on later ones. On the last
//    micro-batch the grad shard is then all-reduced (sum) over the replicate group.
//    Reductions are started at ready(u) and completed one unit later (at ready of the next
//    unit, so they overlap that unit's backward); ready(kRootUnit) (always last) completes
//    them all, so every grad shard is final when forward_backward returns.
//  - update_in_backward (one rank): acquire hands out a pooled fp32 buffer and ready runs the
//    unit's optimizer step from it at once (set_update_in_backward), so no whole-model grad shard
//    exists; the norm is summed unit by unit as they are updated.
// The norm: each unit's term (its grad shard's sum of squares, in its own slot) is enqueued aside
// (Ops::sum_squares_aside) as soon as the shard is final on the step's last micro-batch (G = 1,
// one replica: at ready; else when its reduction completes), so on a GPU the terms run beside the
// rest of backward; global_square_sum joins them, computes the units not yet counted, and adds
// the slots in unit order (the sum, bit for bit, of adding the terms unit by unit).
// Sums, not averages: the model scales grads by 1 / (targets in the global batch).
#pragma once

#include <deque>
#include <vector>

#include "dist/mesh.h"
#include "fsdp/buffer_pool.h"
#include "fsdp/shard_optimizer.h"
#include "fsdp/shard_plan.h"
#include "fsdp/unit_shards.h"
#include "model/param_layout.h"
#include "model/unit_access.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

class GradReducer {
 public:
  // Everything passed must outlive this object.
  GradReducer(Ops& ops, const ParamLayout& layout, const ShardPlan& plan, UnitShards& shards,
              Mesh& mesh, bool reduce_on_last_micro_batch, bool update_in_backward);
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // A new step: readies the grad shards for its first backward (G = 1: the next backward
  // overwrites them; G > 1: zero, as reductions add into them) and drops held buffers.
  void begin_step();
  void begin_micro_batch(bool last) { last_micro_batch_ = last; }
  GradBuffer acquire(int unit);
  void ready(int unit);
  // The global sum of squared gradients (every trainable element counted once): this rank's
  // sum over its grad shards, summed over the shard group only, as replicas hold identical
  // shards. Collective over the shard group; the same value on every rank.
  double global_square_sum();
  // The optimizer step zeroed the grad shards as it read them (GradsAfterStep::kZero).
  void note_grads_zeroed() { grad_shards_zero_ = true; }

  // update_in_backward: the update each ready() runs this step. `optimizer` must outlive it.
  void set_update_in_backward(ShardOptimizer& optimizer, double lr, int64_t step);
  int units_updated_in_backward() const { return backward_update_.units_done; }

  // The full-gradient pool's peak plus the reduce-scatter outputs.
  size_t peak_bytes() const;

 private:
  // A reduction started by ready() and not yet completed.
  struct PendingReduction {
    int unit = 0;
    CommWork work;
    bool replicate = false;   // an all-reduce over the replicate group (G = 1), in place
    int reduced_slot = -1;    // reduce-scatter output (index into reduced_), -1 for none
    int full_grad_slot = -1;  // its input, freed on completion
  };
  struct UnitState {
    int full_grad_slot = -1;    // pool slot, -1 = none
    bool grads_stale = false;   // G = 1: begin_step ran and no backward has written since
    bool norm_counted = false;  // this step's norm term is in its slot (or enqueued aside)
  };
  bool sharded(int unit) const { return plan_.sharded(unit); }
  // The group a unit's gradient is reduce-scattered over: the shard group, or the expert shard
  // group for a unit of experts (the ranks that hold the same experts; dist/mesh.h).
  Comm& shard_comm(int unit) {
    return plan_.units[unit].experts ? mesh_.expert_shard() : mesh_.shard();
  }
  Tensor full_grad(int unit) const;
  // A fresh pool buffer for the unit's trainable region, its padding zeroed (backward never
  // writes it; the reduce-scatter and the norm read it).
  void take_full_grad(int unit);
  void complete_oldest_reduction();
  Comm& reduction_comm(const PendingReduction& p) {
    return p.replicate ? mesh_.replicate() : shard_comm(p.unit);
  }
  // On the last micro-batch, once the unit's grad shard is final: its norm term, aside.
  void count_norm_term(int unit);
  // update_in_backward: the unit's gradient norm term and optimizer step, then frees its buffer.
  void update_unit_in_backward(int unit);

  Ops& ops_;
  const ParamLayout& layout_;
  const ShardPlan& plan_;
  UnitShards& shards_;
  Mesh& mesh_;
  const bool reduce_on_last_micro_batch_, update_in_backward_;
  BufferPool pool_;
  std::vector<UnitState> state_;
  // fp32, largest shard each: reduce-scatter outputs before they are added into grad shards
  // (two, so that one reduction can be in flight while the previous one is completed).
  DeviceBuffer reduced_[2];
  std::deque<PendingReduction> pending_;
  bool last_micro_batch_ = true;
  bool grad_shards_zero_ = true;  // known all zero: at construction, after begin_step or an
                                  // update that zeroed them (G > 1)
  DeviceBuffer norm_scratch_;     // 1 fp32: this rank's sum of squares
  DeviceBuffer norm_terms_;       // fp32 per unit: its sum of squares this step
  bool norm_started_ = false;     // norm_terms_ zeroed this step (a term was counted)
  struct BackwardUpdate {
    ShardOptimizer* optimizer = nullptr;
    double lr = 0;
    int64_t step = 0;
    int units_done = 0;
  } backward_update_;
  DeviceBuffer backward_norm_;  // 1 fp32: the sum of squares of the units updated this step
};

}  // namespace shardtrain
