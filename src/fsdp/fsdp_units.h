// FsdpUnits: the sharded UnitAccess. Each rank holds, per flat unit, only its shard of the
// fp32 master parameters, AdamW moments and gradients (fsdp/shard_plan.h); it all-gathers a
// unit's parameters when the model asks for them and reduce-scatters the unit's gradients when
// the model is done with them.
//
// Groups (a 2-D mesh, dist/fsdp_groups.h): parameters are sharded across the shard group
// (size G) and replicated across the replicate group (size world / G).
//  - acquire_params: all-gather over the shard group into a buffer from a small pool. G = 1:
//    the shard is the whole unit and is returned directly (no buffer, no communication).
//  - Prefetch, from the model's fixed unit order (model/unit_access.h): in forward (from
//    acquire_params(kRootUnit)) acquiring unit u starts the gather of u + 1; in backward
//    acquire_grads(u) starts the gather of u - 1 (acquire_grads(kRootUnit), before the head,
//    starts the last block's). Gathers and reductions are Comm::start_* collectives: on NCCL they
//    run on the comm's stream, ordered against compute by events (no host waits); on Gloo they
//    block.
//  - release_params: FULL_SHARD / HYBRID_SHARD free the buffer after forward and after
//    backward; SHARD_GRAD_OP keeps forward's buffer for backward (no re-gather) and frees it
//    after backward. The root unit is acquired once per micro-batch and stays gathered.
//  - acquire_grads / grads_ready, G > 1: backward writes into a full fp32 grad buffer (fresh
//    from the pool: overwritten, no zero fill; kept across micro-batches: accumulated);
//    grads_ready reduce-scatters (sum) it into the grad shard (added to what earlier
//    micro-batches left there) and frees it. With reduce_on_last_micro_batch the full buffer
//    is kept across micro-batches and reduced once, on the last one (costs one full fp32 grad
//    buffer per unit). G = 1: backward writes straight into the grad shard (= whole unit),
//    overwriting it on the step's first micro-batch and adding on later ones.
//    On the last micro-batch the grad shard is then all-reduced (sum) over the replicate group.
//    Reductions are started at grads_ready(u) and completed one unit later (at grads_ready of
//    the next unit, so they overlap that unit's backward); grads_ready(kRootUnit) (always
//    last) completes them all, so every grad shard is final when forward_backward returns.
// Sums, not averages: the model scales grads by 1 / (targets in the global batch), so the sum
// over ranks is the gradient of the global mean loss.
//
// One optimizer step, on every rank in the same order (each call is collective):
//   targets = begin_step(local_targets);            // the global loss denominator
//   for each micro-batch m of M: begin_micro_batch(m, M); model.forward_backward(*this, ...);
//   totals = end_backward(local_tokens, local_loss); // global tokens, loss, gradient norm
//   apply_optimizer(optimizer, lr, step, clip);      // the update on this rank's shards
// What the gradient shards hold between steps is private: G = 1 keeps them (the next step's
// first backward overwrites them), G > 1 has the update zero them as it reads them (the
// reductions of the next step add into them), so no step pays a separate zero pass.
//
// Memory levers at G = 1 (FsdpOptions; fsdp/shard_plan.h has the byte formulas):
//  - ComputeCopy::kOnDemand: no persistent compute-dtype copy. acquire_params casts the unit's
//    fp32 master shard into a buffer of the gathered pool (the same round-to-nearest values the
//    persistent copy holds, so the numerics do not change); release_params frees it (whatever
//    the strategy: at G = 1 nothing is gathered, so SHARD_GRAD_OP keeps nothing either). On an
//    fp32 backend the "cast" is a copy (useful only to test the path on the CPU).
//  - update_in_backward (one rank, no clipping, one micro-batch per step): call
//    set_update_in_backward(optimizer, lr, step) after begin_step; acquire_grads hands out a
//    pooled fp32 buffer and grads_ready runs the unit's optimizer step from it at once (before
//    the next unit's backward), so no whole-model grad shard exists; end_backward reports the
//    norm summed unit by unit and apply_optimizer only checks that every unit was updated. The
//    update is the one apply_optimizer would do with grad_scale 1 (bit for bit); the reported
//    gradient norm is summed in another order (last bits may differ). A step whose loss turns
//    out non-finite has already been applied.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "dist/fsdp_groups.h"
#include "fsdp/shard_optimizer.h"
#include "fsdp/shard_plan.h"
#include "io/hf_checkpoint.h"
#include "model/param_layout.h"
#include "model/unit_access.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

// The step's global totals (FsdpUnits::end_backward), the same on every rank.
struct StepTotals {
  double tokens = 0;     // tokens in the global batch
  double loss_sum = 0;   // summed cross-entropy over the global batch's targets
  double grad_norm = 0;  // L2 norm of the whole model's gradient (before clipping)
};

struct FsdpOptions {
  FsdpStrategy strategy = FsdpStrategy::kFullShard;
  bool reduce_on_last_micro_batch = false;
  ComputeCopy compute_copy = ComputeCopy::kKeep;  // G = 1 only (header comment)
  bool update_in_backward = false;                // one rank only (header comment)
};

class FsdpUnits final : public UnitAccess {
 public:
  // `groups` must outlive this object.
  FsdpUnits(Ops& ops, const ParamLayout& layout, FsdpGroups& groups, FsdpOptions options);
  FsdpUnits(const FsdpUnits&) = delete;
  FsdpUnits& operator=(const FsdpUnits&) = delete;

  int unit_count() const { return static_cast<int>(layout_.units.size()); }
  const ShardPlan& plan() const { return plan_; }
  // This rank's shard [begin, begin + shard_numel) of `unit`, in unit elements.
  int64_t shard_begin(int unit) const;
  // This rank's fp32 shards of `unit` (shard_numel each), for the optimizer.
  Tensor master_shard(int unit) const;
  // Undefined with update_in_backward (no grad shard is kept).
  Tensor grad_shard(int unit) const;
  Tensor exp_avg_shard(int unit) const;
  Tensor exp_avg_sq_shard(int unit) const;
  // The compute-dtype copy of master_shard (shard_numel, what the all-gathers send); undefined
  // when the backend computes in fp32 (the master shard is sent) or the copy is built on demand.
  Tensor compute_shard(int unit) const;
  // The shard forward computes with (and the all-gathers send): compute_shard, or master_shard
  // when the backend computes in fp32.
  Tensor forward_shard(int unit) const;

  // Initialisation: each rank fills only its own shard. Random init generates the unit (the
  // same values on every world size) and keeps its slice; pretrained reads only the byte
  // ranges of this shard from the checkpoint (world rank 0 logs progress with an ETA when it
  // takes long, obs/phase_progress.h).
  void init_random(uint64_t seed, double std);
  void load_pretrained(const HfCheckpoint& checkpoint);

  // ---- one optimizer step (the header comment's order; every call collective) ----
  // Starts a step whose accumulation window holds `local_targets` loss targets on this rank:
  // readies the grad shards for the step's first backward and returns the global target count.
  double begin_step(int64_t local_targets);
  void begin_micro_batch(int64_t index, int64_t count);
  // After the window's last backward: the global tokens and loss (from this rank's counts) and
  // the global gradient norm (every element of the model counted once).
  StepTotals end_backward(int64_t local_tokens, double local_loss_sum);
  // One `optimizer` step over this rank's shards with gradients multiplied by grad_scale (the
  // clip coefficient): updates the master shards, writes the compute shards and leaves the grad
  // shards as the next begin_step expects.
  void apply_optimizer(ShardOptimizer& optimizer, double lr, int64_t step, float grad_scale);
  // update_in_backward only, after begin_step: the update each grads_ready runs this step.
  // `optimizer` must outlive the step.
  void set_update_in_backward(ShardOptimizer& optimizer, double lr, int64_t step);
  bool updates_in_backward() const { return options_.update_in_backward; }
  // The compute copy as built (kOnDemand only at G = 1).
  ComputeCopy compute_copy() const {
    return on_demand_copy() ? ComputeCopy::kOnDemand : ComputeCopy::kKeep;
  }

  // After forward-only passes (evaluation between steps): frees every gathered parameter buffer
  // (SHARD_GRAD_OP keeps forward's gathers for a backward that will not come). Local.
  void release_gathered_params();

  // Re-derives the compute shards from the master shards (after loading them).
  void refresh_compute_params();
  // Sum of `value` over all ranks (the data-parallel group: every rank reads its own data).
  double sum_over_ranks(double value);
  // Element-wise sums of several values in one collective.
  std::vector<double> sum_over_ranks(const std::vector<double>& values);
  // Returns once every rank has called it.
  void barrier() { groups_.world().barrier(); }

  // This rank's place in the mesh (dist/fsdp_groups.h): its index in the shard group and in the
  // replicate group, and in the world.
  int shard_rank() const { return groups_.shard().rank(); }
  int replicate_rank() const { return groups_.replicate().rank(); }
  int world_rank() const { return groups_.world().rank(); }
  int world_size() const { return groups_.world().size(); }

  // Collective over the shard group: fills host_values (unit numel) with the whole unit's
  // fp32 master parameters.
  void gather_master_to_host(int unit, float* host_values);

  // Exposed communication since the last call: seconds the compute stream waited for FSDP's
  // overlapped collectives (Comm::take_compute_wait_seconds over the shard and replicate
  // groups); nullopt when the backend does not measure it.
  std::optional<double> take_compute_wait_seconds();

  // Bytes held now (shards) and the peak of gathered / full-grad buffers so far.
  FsdpMemory memory() const;

  Tensor acquire_params(int unit) override;
  void release_params(int unit) override;
  GradBuffer acquire_grads(int unit) override;
  void grads_ready(int unit) override;

 private:
  struct UnitState {
    int gathered_slot = -1;         // index into gathered_pool_, -1 = not gathered
    CommWork gather;                // the gather into gathered_slot, until acquire finishes it
    bool gather_in_flight = false;  // started (prefetch) and not yet finished
    int full_grad_slot = -1;        // index into full_grad_pool_, -1 = none
    bool in_backward = false;       // acquire_grads was called since the last grads_ready
    bool grads_stale = false;       // G = 1: begin_step ran and no backward has written since
  };
  // A reduction started by grads_ready and not yet completed.
  struct PendingReduction {
    int unit = 0;
    CommWork work;
    bool replicate = false;   // an all-reduce over the replicate group (G = 1), in place
    int reduced_slot = -1;    // reduce-scatter output (index into reduced_), -1 for none
    int full_grad_slot = -1;  // its input, freed on completion
  };
  // A pool of buffers; a request takes the smallest free buffer that fits or allocates one of
  // exactly its size, so the root and the (equal) blocks settle into separate buffers after
  // the first step. In-use bytes are tracked per unit size.
  struct Pool {
    std::vector<DeviceBuffer> buffers;
    std::vector<bool> in_use;
    size_t in_use_bytes = 0, peak_bytes = 0;
  };
  int take_slot(Pool& pool, size_t bytes);
  void free_slot(Pool& pool, int slot, size_t bytes);
  // Starts the all-gather of `unit` into a pool buffer unless it is gathered or in flight.
  void start_gather(int unit);
  void finish_gather(int unit);
  void complete_oldest_reduction();
  Comm& reduction_comm(const PendingReduction& p) {
    return p.replicate ? groups_.replicate() : groups_.shard();
  }
  Tensor shard_tensor(const std::vector<DeviceBuffer>& buffers, int unit) const;
  // The global sum of squared gradients: this rank's sum over its grad shards, summed over the
  // shard group only, as replicas hold identical shards. The same value on every rank.
  double global_grad_square_sum();
  bool sharded() const { return plan_.group_size > 1; }
  bool on_demand_copy() const {
    return !sharded() && options_.compute_copy == ComputeCopy::kOnDemand;
  }
  // G = 1, on demand: the unit's compute copy, cast from its master into a gathered-pool buffer.
  Tensor acquire_on_demand_copy(int unit);
  // update_in_backward: the unit's gradient norm term and optimizer step, then frees its buffer.
  void update_unit_in_backward(int unit);
  // "unit 3 (layers.2) <phase>": what a collective is for, in communication errors.
  std::string unit_context(int unit, const char* phase) const;

  Ops& ops_;
  const ParamLayout& layout_;
  FsdpGroups& groups_;
  FsdpOptions options_;
  ShardPlan plan_;
  std::vector<DeviceBuffer> master_, grad_, exp_avg_, exp_avg_sq_, compute_;
  std::vector<UnitState> state_;
  Pool gathered_pool_, full_grad_pool_;
  // A few fp32 scalars for the per-step totals and the gradient norm, reused every step.
  Tensor scalar_scratch(int64_t floats);
  DeviceBuffer scalar_scratch_;
  // fp32, largest shard each: reduce-scatter outputs before they are added into grad shards
  // (two, so that one reduction can be in flight while the previous one is completed).
  DeviceBuffer reduced_[2];
  std::deque<PendingReduction> pending_;
  bool forward_phase_ = true;  // set by acquire_params(kRootUnit), cleared by acquire_grads
  bool last_micro_batch_ = true;
  bool grad_shards_zero_ = false;  // known all zero: at construction, after begin_step or an
                                   // update that zeroed them (G > 1)
  std::vector<UnitBuffers> optimizer_view_;  // every unit's shards, for apply_optimizer
  // update_in_backward: this step's update and the squared gradient norm summed so far.
  struct BackwardUpdate {
    ShardOptimizer* optimizer = nullptr;
    double lr = 0;
    int64_t step = 0;
    int units_done = 0;
  } backward_update_;
  DeviceBuffer backward_norm_;  // 1 fp32: the sum of squares of the units updated this step
};

}  // namespace shardtrain
