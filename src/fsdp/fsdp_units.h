// FsdpUnits: the sharded UnitAccess and the step protocol of one FSDP job. Each rank holds, per
// flat unit, only its shards (fsdp/shard_plan.h): of the trainable region the fp32 master, AdamW
// moments and gradient; of the frozen region (parameters not trained) the compute-dtype values
// only. It all-gathers a unit when the model asks for it and reduces the unit's gradients when
// the model is done with them.
//
// Groups: a 2-D mesh (dist/mesh.h): parameters are sharded across the shard group (size G) and
// replicated across the replicate group (size world / G). The work is split by job, in classes
// this one owns:
//   fsdp/unit_shards.h     the persistent shards and their views
//   fsdp/param_gatherer.h  acquire/release_params: the gathered-buffer pool, the all-gathers and
//                          the prefetch (forward u -> u + 1, backward u -> u - 1); the release
//                          policy per strategy (SHARD_GRAD_OP keeps forward's gathers)
//   fsdp/grad_reducer.h    acquire_grads/grads_ready: the gradient buffers, the reduction queue
//                          (reduce-scatter one unit behind backward; replicate all-reduce), the
//                          gradient norm, the update in backward
//   fsdp/shard_io.h        random init, pretrained load, gather to host for the export
// Communication outside the step (sums, agreement, barrier) is the Mesh's, not this class's.
//
// One optimizer step, on every rank in the same order (each call is collective):
//   begin_step(local_targets);                      // readies the grad shards
//   for each micro-batch m of M: begin_micro_batch(m, M); model.forward_backward(*this, ...);
//     (the first loss asks global_targets(): the global loss denominator)
//   totals = end_backward(local_tokens, local_loss); // global tokens, loss, gradient norm
//   apply_optimizer(optimizer, lr, step, clip);      // the update on this rank's shards
// What the gradient shards hold between steps is private: G = 1 keeps them (the next step's
// first backward overwrites them), G > 1 has the update zero them as it reads them (the
// reductions of the next step add into them), so no step pays a separate zero pass.
//
// Frozen parameters are gathered with the rest (the model sees whole units) but get no gradient
// buffer (GradBuffer::offset says where the trainable region starts), no reduction, no norm term
// and no update: they never change.
//
// Memory levers at G = 1 (FsdpOptions; fsdp/shard_plan.h has the byte formulas):
//  - ComputeCopy::kOnDemand: no persistent compute-dtype copy. acquire_params casts the unit's
//    fp32 master shard into a buffer of the gathered pool (the same round-to-nearest values the
//    persistent copy holds, so the numerics do not change); release_params frees it. On an fp32
//    backend the "cast" is a copy (useful only to test the path on the CPU). Units with frozen
//    parameters keep their copy (the frozen shard is one): kKeep is used then.
//  - update_in_backward (one rank, no clipping, one micro-batch per step): call
//    set_update_in_backward(optimizer, lr, step) after begin_step; each unit's optimizer step
//    runs as soon as its backward is done (fsdp/grad_reducer.h); end_backward reports the norm
//    summed unit by unit and apply_optimizer only checks that every unit was updated. The
//    update is the one apply_optimizer would do with grad_scale 1 (bit for bit); the reported
//    gradient norm is summed in another order (last bits may differ). A step whose loss turns
//    out non-finite has already been applied.
//
// The update beside the next forward (when the ops run aside work: Ops::runs_aside,
// SHARDTRAIN_OPS_ASIDE=1 on CUDA): apply_optimizer enqueues each unit's update aside
// (ShardOptimizer::step_aside, one ticket a unit, in unit order) and returns; acquire_params and
// acquire_grads of a unit, and (G > 1) the enqueueing of its all-gather, prefetch included, make
// the compute stream wait for its ticket first, so the next step's forward of unit u runs while
// the updates of the units after it still run (the communication stream follows the compute
// stream: a gather reads the updated shard, and the next backward's reductions write the grad
// shards after the update read them). The update is the same one (bit for bit). Whatever else
// reads or writes the shards waits too: the shard io below, and the Ops' host copies (which join
// all aside work). The step's global target count, a collective that waits for the device with
// several ranks, is summed at the first loss (global_targets), after the forward is enqueued.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "dist/mesh.h"
#include "fsdp/fp8_gather.h"
#include "fsdp/grad_reducer.h"
#include "fsdp/param_gatherer.h"
#include "fsdp/shard_io.h"
#include "fsdp/shard_optimizer.h"
#include "fsdp/shard_plan.h"
#include "fsdp/unit_shards.h"
#include "io/hf_checkpoint.h"
#include "model/param_layout.h"
#include "model/unit_access.h"
#include "ops/ops.h"

namespace shardtrain {

// The step's global totals (FsdpUnits::end_backward), the same on every rank.
struct StepTotals {
  double tokens = 0;     // tokens in the global batch
  double loss_sum = 0;   // summed cross-entropy over the global batch's targets
  double grad_norm = 0;  // L2 norm of the trainable parameters' gradient (before clipping)
};

struct FsdpOptions {
  FsdpStrategy strategy = FsdpStrategy::kFullShard;
  bool reduce_on_last_micro_batch = false;
  ComputeCopy compute_copy = ComputeCopy::kKeep;  // G = 1 only (header comment)
  bool update_in_backward = false;                // one rank only (header comment)
  // fp8.all_gather: per unit, the weights the FP8 linears read (DecoderModel::fp8_weight_ranges),
  // gathered as e4m3 where the unit is sharded (fsdp/fp8_gather.h); empty: every unit in the
  // compute dtype. The updates then run in order (not aside): the next step's first gather
  // refreshes every unit's e4m3 shard.
  std::vector<std::vector<ElementRange>> fp8_gather_ranges;
};

class FsdpUnits final : public UnitAccess {
 public:
  // `ops`, `layout` and `mesh` must outlive this object.
  FsdpUnits(Ops& ops, const ParamLayout& layout, Mesh& mesh, FsdpOptions options);
  FsdpUnits(const FsdpUnits&) = delete;
  FsdpUnits& operator=(const FsdpUnits&) = delete;

  int unit_count() const { return static_cast<int>(layout_.units.size()); }
  const ShardPlan& plan() const { return plan_; }
  // The groups and the collectives train/ may call (sums, agreement, barrier).
  Mesh& mesh() { return mesh_; }
  // This rank's shard of `unit`'s trainable region starts at element shard_begin of that region
  // (which starts at unit element plan().units[unit].frozen_numel; 0 without frozen parameters).
  int64_t shard_begin(int unit) const { return shards_.shard_begin(unit); }
  // This rank's fp32 shards of the trainable region (shard_numel each). grad_shard is undefined
  // with update_in_backward (no grad shard is kept).
  Tensor master_shard(int unit) const { return shards_.master_shard(unit); }
  Tensor grad_shard(int unit) const { return shards_.grad_shard(unit); }
  Tensor exp_avg_shard(int unit) const { return shards_.exp_avg_shard(unit); }
  Tensor exp_avg_sq_shard(int unit) const { return shards_.exp_avg_sq_shard(unit); }
  // The frozen region's shard (frozen_shard_numel, compute dtype); undefined when none.
  Tensor frozen_shard(int unit) const { return shards_.frozen_shard(unit); }

  // Initialisation: each rank fills only its own shards (fsdp/shard_io.h).
  void init_random(uint64_t seed, double std) {
    settle_updates();
    fp8_.all_changed();
    io_.init_random(seed, std);
  }
  void load_pretrained(const HfCheckpoint& checkpoint) {
    settle_updates();
    fp8_.all_changed();
    io_.load_pretrained(checkpoint);
  }
  void load(const ShardIo::ParamReader& read) {
    settle_updates();
    fp8_.all_changed();
    io_.load(read);
  }
  // Re-derives the compute copies from the master shards (after loading them). Local.
  void refresh_compute_params() {
    settle_updates();
    fp8_.all_changed();
    shards_.refresh_compute_params();
  }
  // Collective over the shard group: fills host_values (unit numel) with the whole unit as fp32
  // (trainable parameters from the masters, frozen ones from their compute-dtype shards).
  void gather_unit_to_host(int unit, float* host_values) {
    settle_updates();
    io_.gather_to_host(unit, host_values);
  }
  // Expert parallelism: collective over the world (the expert shard and expert groups): fills
  // host_values (expert group size x the unit's numel) with every expert rank's unit of experts
  // `unit` (UnitLayout::experts), in expert rank order, as fp32.
  void gather_experts_to_host(int unit, float* host_values);

  // ---- one optimizer step (the header comment's order; every call collective) ----
  // Starts a step whose accumulation window holds `local_targets` loss targets on this rank:
  // readies the grad shards for the step's first backward.
  void begin_step(int64_t local_targets);
  // The step's global target count: collective on its first call of a step (every rank makes it
  // at the same point: the first micro-batch's loss), the same value after. With several ranks
  // the sum goes through the device and waits for it, so it is asked for once the first forward
  // is enqueued, not in begin_step: that forward then overlaps the updates running aside.
  double global_targets();
  void begin_micro_batch(int64_t index, int64_t count);
  // After the window's last backward: the global tokens and loss (from this rank's counts) and
  // the global gradient norm (every trainable element of the model counted once).
  StepTotals end_backward(int64_t local_tokens, double local_loss_sum);
  // One `optimizer` step over this rank's trainable shards with gradients multiplied by
  // grad_scale (the clip coefficient): updates the master shards, writes the compute shards and
  // leaves the grad shards as the next begin_step expects.
  void apply_optimizer(ShardOptimizer& optimizer, double lr, int64_t step, float grad_scale);
  // update_in_backward only, after begin_step: the update each grads_ready runs this step.
  // `optimizer` must outlive the step.
  void set_update_in_backward(ShardOptimizer& optimizer, double lr, int64_t step) {
    reducer_.set_update_in_backward(optimizer, lr, step);
  }
  bool updates_in_backward() const { return options_.update_in_backward; }
  // The compute copy as built (kOnDemand only at G = 1 without frozen parameters).
  ComputeCopy compute_copy() const {
    return shards_.keeps_compute_copy() ? ComputeCopy::kKeep : ComputeCopy::kOnDemand;
  }

  // After forward-only passes (evaluation between steps): frees every gathered parameter buffer
  // (SHARD_GRAD_OP keeps forward's gathers for a backward that will not come). Local.
  void release_gathered_params() { gatherer_.release_all(); }

  // This rank's place in the mesh: its index in the shard group, in the replicate group and in
  // the world.
  int shard_rank() const { return mesh_.shard_rank(); }
  int replicate_rank() const { return mesh_.replicate_rank(); }
  int world_rank() const { return mesh_.world_rank(); }
  int world_size() const { return mesh_.world_size(); }

  // Exposed communication since the last call: seconds the compute stream waited for FSDP's
  // overlapped collectives (Comm::take_compute_wait_seconds over the shard and replicate
  // groups); nullopt when the backend does not measure it.
  std::optional<double> take_compute_wait_seconds();

  // Bytes held now (shards) and the peak of gathered / full-grad buffers so far.
  FsdpMemory memory() const;

  Tensor acquire_params(int unit) override {
    wait_for_update(unit);
    return gatherer_.acquire(unit);
  }
  void release_params(int unit) override { gatherer_.release(unit); }
  GradBuffer acquire_grads(int unit) override;
  void grads_ready(int unit) override;

  // Whether apply_optimizer enqueues the updates aside (the header comment).
  bool updates_aside() const {
    return ops_.runs_aside() && !options_.update_in_backward && !fp8_.active();
  }
  // Whether any unit is gathered in FP8 (fp8_gather_ranges given and the unit sharded).
  bool gathers_fp8() const { return fp8_.active(); }
  // Makes the compute stream wait for every update still running aside. Local.
  void settle_updates();

 private:
  // The compute stream waits for `unit`'s update when it runs aside and has not been waited for.
  void wait_for_update(int unit);

  Ops& ops_;
  const ParamLayout& layout_;
  Mesh& mesh_;
  const FsdpOptions options_;
  const ShardPlan plan_;
  UnitShards shards_;
  Fp8Gather fp8_;
  ParamGatherer gatherer_;
  GradReducer reducer_;
  ShardIo io_;
  // Per unit: the ticket of its update running aside (Ops::wait_aside), 0 when none.
  std::vector<int64_t> update_ticket_;
  // This step's local target count, and the global one once summed.
  int64_t local_targets_ = 0;
  std::optional<double> global_targets_;
};

}  // namespace shardtrain
