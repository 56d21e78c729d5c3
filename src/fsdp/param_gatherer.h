// ParamGatherer: the gathered-parameter side of FSDP: a pool of gathered-unit buffers, the
// all-gathers that fill them, and the prefetch that overlaps them with compute.
//
//  - acquire(u) returns unit u whole (numel elements, compute dtype). G > 1: all-gathered over
//    the shard group into a pool buffer: the frozen region's shards into [0, frozen padded),
//    then the trainable region's into [frozen_numel, ...) (fsdp/shard_plan.h); one collective
//    when a unit has only one region. G = 1: the unit's own storage (no copy), or with
//    ComputeCopy::kOnDemand its master cast into a pool buffer.
//  - Prefetch, from the model's fixed unit order (model/unit_access.h): in forward (from
//    acquire(kRootUnit)) acquiring unit u starts the gather of u + 1; in backward
//    begin_backward(u) starts the gather of u - 1 (the root, before the head, starts the last
//    block's). Gathers are Comm::start_* collectives: on NCCL they run on the comm's stream,
//    ordered against compute by events (no host waits); on Gloo they block.
//  - Before a unit's gather is enqueued (prefetch included) the before_gather hook runs:
//    FsdpUnits makes the compute stream wait there for the unit's update running aside, and the
//    gather, which follows the compute stream, reads the updated shard.
//  - FP8 all-gather (fsdp/fp8_gather.h, when given one that is active): a covered region's
//    all-gather moves its e4m3 bytes into a second pool buffer instead, unpacked into the unit's
//    buffer when the gather finishes; the first gather after the shards changed refreshes the
//    e4m3 shards first (collective over the shard group, at the same point on every rank).
//  - release(u): FULL_SHARD / HYBRID_SHARD free the buffer after forward and after backward;
//    SHARD_GRAD_OP keeps forward's buffer for backward (no re-gather) and frees it after
//    backward. Buffers built on demand (G = 1) are always freed.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dist/comm.h"
#include "fsdp/buffer_pool.h"
#include "fsdp/fp8_gather.h"
#include "fsdp/fsdp_strategy.h"
#include "fsdp/shard_plan.h"
#include "fsdp/unit_shards.h"
#include "model/param_layout.h"
#include "ops/ops.h"

namespace shardtrain {

class ParamGatherer {
 public:
  // Everything passed must outlive this object. shard: the shard group's Comm; expert_shard:
  // the expert shard group's (units of experts; dist/mesh.h).
  // fp8: the FP8 all-gather, or null (every unit in the compute dtype).
  ParamGatherer(Ops& ops, const ParamLayout& layout, const ShardPlan& plan, UnitShards& shards,
                Comm& shard, Comm& expert_shard, FsdpStrategy strategy, Fp8Gather* fp8 = nullptr);
  ParamGatherer(const ParamGatherer&) = delete;
  ParamGatherer& operator=(const ParamGatherer&) = delete;

  // Called with a unit before its gather is enqueued (the header comment); none by default.
  void set_before_gather(std::function<void(int)> hook) { before_gather_ = std::move(hook); }
  // The whole unit (numel, compute dtype), valid until release(unit).
  Tensor acquire(int unit);
  void release(int unit);
  // Backward of `unit` starts: prefetches the unit backward needs next (G > 1).
  void begin_backward(int unit);
  // Backward of `unit` is done: release(unit) frees its buffer whatever the strategy.
  void end_backward(int unit) { state_[unit].in_backward = false; }
  // Frees every gathered buffer (after forward-only passes: SHARD_GRAD_OP keeps forward's
  // gathers for a backward that will not come). Local.
  void release_all();
  size_t peak_bytes() const { return pool_.peak_bytes(); }

 private:
  struct UnitState {
    int slot = -1;                  // pool slot holding the gathered unit, -1 = none
    int bytes_slot = -1;            // FP8 all-gather: the slot its e4m3 bytes land in
    CommWork gathers[2];            // frozen region, trainable region (until finished)
    bool gather_in_flight = false;  // started (prefetch) and not yet finished
    bool in_backward = false;       // begin_backward was called since the last end_backward
  };
  bool sharded(int unit) const { return plan_.sharded(unit); }
  Comm& group_of(int unit) { return plan_.units[unit].experts ? expert_shard_ : shard_; }
  // The next unit of the model's walk (model/unit_access.h) that is not a unit of experts:
  // units of experts are gathered when acquired, never prefetched. -1 when none.
  int next_dense(int unit, int step) const;
  // Starts the all-gathers of `unit` into a pool buffer unless it is gathered or in flight.
  void start_gather(int unit);
  void finish_gather(int unit);
  void free_buffer(int unit);
  // G = 1, on demand: the unit's compute copy, cast from its master into a pool buffer.
  Tensor acquire_on_demand_copy(int unit);
  // "unit 3 (layers.2) <phase>": what a collective is for, in communication errors.
  std::string unit_context(int unit, const char* phase) const;

  Ops& ops_;
  const ParamLayout& layout_;
  const ShardPlan& plan_;
  UnitShards& shards_;
  Comm& shard_;
  Comm& expert_shard_;
  const FsdpStrategy strategy_;
  const DType act_;
  BufferPool pool_;
  std::vector<UnitState> state_;
  std::function<void(int)> before_gather_;
  Fp8Gather* const fp8_;
  bool forward_phase_ = true;  // set by acquire(kRootUnit), cleared by begin_backward
};

}  // namespace shardtrain
