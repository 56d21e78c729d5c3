#include "fsdp/param_gatherer.h"

#include <fmt/format.h>

#include "core/error.h"

namespace shardtrain {

ParamGatherer::ParamGatherer(Ops& ops, const ParamLayout& layout, const ShardPlan& plan,
                             UnitShards& shards, Comm& shard, Comm& expert_shard,
                             FsdpStrategy strategy, Fp8Gather* fp8)
    : ops_(ops),
      layout_(layout),
      plan_(plan),
      shards_(shards),
      shard_(shard),
      expert_shard_(expert_shard),
      strategy_(strategy),
      act_(ops.activation_dtype()),
      pool_(ops),
      state_(plan.units.size()),
      fp8_(fp8 != nullptr && fp8->active() ? fp8 : nullptr) {}

std::string ParamGatherer::unit_context(int unit, const char* phase) const {
  return fmt::format("unit {} ({}) {}", unit, layout_.units[unit].name, phase);
}

void ParamGatherer::start_gather(int unit) {
  UnitState& state = state_[unit];
  if (state.slot >= 0) return;
  if (before_gather_) before_gather_(unit);
  const UnitShard& shard = plan_.units[unit];
  const int64_t gathered_numel = shard.gathered_numel();
  state.slot = pool_.take(static_cast<size_t>(gathered_numel) * dtype_size(act_));
  const Tensor gathered = pool_.view(state.slot, act_, gathered_numel);
  Comm& group = group_of(unit);
  const bool fp8 = fp8_ != nullptr && fp8_->covers(unit);
  Tensor bytes;
  if (fp8) {
    group.set_context(unit_context(unit, "FP8 scales and norms"));
    fp8_->refresh(group);
    state.bytes_slot = pool_.take(fp8_->gathered_bytes(unit));
    bytes =
        pool_.view(state.bytes_slot, DType::kU8, static_cast<int64_t>(fp8_->gathered_bytes(unit)));
  }
  group.set_context(unit_context(unit, "parameter all-gather"));
  // Frozen first: the trainable gather then overwrites the frozen region's padding (both on
  // the comm's stream, in this order).
  if (shard.frozen_shard_numel > 0) {
    state.gathers[0] = fp8 && fp8_->covers(unit, Fp8Gather::kFrozen)
                           ? group.start_all_gather(fp8_->receive(unit, Fp8Gather::kFrozen, bytes),
                                                    fp8_->send(unit, Fp8Gather::kFrozen))
                           : group.start_all_gather(gathered.rows(0, shard.frozen_padded_numel),
                                                    shards_.frozen_shard(unit));
  }
  if (shard.shard_numel > 0) {
    state.gathers[1] =
        fp8 && fp8_->covers(unit, Fp8Gather::kTrainable)
            ? group.start_all_gather(fp8_->receive(unit, Fp8Gather::kTrainable, bytes),
                                     fp8_->send(unit, Fp8Gather::kTrainable))
            : group.start_all_gather(
                  gathered.rows(shard.frozen_numel, shard.frozen_numel + shard.padded_numel),
                  shards_.trainable_forward_shard(unit));
  }
  state.gather_in_flight = true;
}

void ParamGatherer::finish_gather(int unit) {
  UnitState& state = state_[unit];
  if (!state.gather_in_flight) return;
  const UnitShard& shard = plan_.units[unit];
  if (shard.frozen_shard_numel > 0) group_of(unit).finish(state.gathers[0]);
  if (shard.shard_numel > 0) group_of(unit).finish(state.gathers[1]);
  state.gather_in_flight = false;
  if (state.bytes_slot >= 0) {
    const size_t bytes = fp8_->gathered_bytes(unit);
    fp8_->unpack(unit, pool_.view(state.bytes_slot, DType::kU8, static_cast<int64_t>(bytes)),
                 pool_.view(state.slot, act_, shard.gathered_numel()));
    pool_.free(state.bytes_slot);  // the unpack is enqueued before any later use of the slot
    state.bytes_slot = -1;
  }
}

void ParamGatherer::free_buffer(int unit) {
  UnitState& state = state_[unit];
  finish_gather(unit);  // a prefetched gather never used: order the buffer's reuse after it
  pool_.free(state.slot);
  state.slot = -1;
}

Tensor ParamGatherer::acquire_on_demand_copy(int unit) {
  UnitState& state = state_[unit];
  const int64_t padded = plan_.units[unit].padded_numel;
  if (state.slot < 0) {
    // The whole shard, padding included, as refresh_compute_params casts a persistent copy.
    state.slot = pool_.take(static_cast<size_t>(padded) * dtype_size(act_));
    ops_.cast(pool_.view(state.slot, act_, padded), shards_.master_shard(unit));
  }
  return pool_.view(state.slot, act_, padded);
}

Tensor ParamGatherer::acquire(int unit) {
  const int64_t numel = layout_.units[unit].numel;
  if (unit == kRootUnit) forward_phase_ = true;  // every pass starts at the root
  if (!sharded(unit)) {
    if (!shards_.keeps_compute_copy()) return acquire_on_demand_copy(unit).rows(0, numel);
    return shards_.whole_unit(unit);
  }
  start_gather(unit);
  finish_gather(unit);
  // Forward walks the units in order: gather the next one while this one computes.
  const int next = next_dense(unit, +1);
  if (forward_phase_ && next >= 0 && sharded(next)) start_gather(next);
  return pool_.view(state_[unit].slot, act_, plan_.units[unit].gathered_numel()).rows(0, numel);
}

void ParamGatherer::release(int unit) {
  UnitState& state = state_[unit];
  if (state.slot < 0) return;
  // SHARD_GRAD_OP keeps forward's gather for backward; everything is freed after backward.
  const bool keep = sharded(unit) && strategy_ == FsdpStrategy::kShardGradOp && !state.in_backward;
  if (!keep) free_buffer(unit);
}

void ParamGatherer::begin_backward(int unit) {
  state_[unit].in_backward = true;
  forward_phase_ = false;
  if (plan_.units[unit].experts) return;
  // Backward walks the blocks in reverse after the root's head: gather the next one now.
  const int next =
      unit == kRootUnit ? next_dense(static_cast<int>(plan_.units.size()), -1) : unit - 1;
  if (next >= block_unit(0) && next != unit && sharded(next)) start_gather(next);
}

int ParamGatherer::next_dense(int unit, int step) const {
  const int count = static_cast<int>(plan_.units.size());
  for (int u = unit + step; u >= 0 && u < count; u += step) {
    if (!plan_.units[u].experts) return u;
  }
  return -1;
}

void ParamGatherer::release_all() {
  forward_phase_ = false;
  for (int u = 0; u < static_cast<int>(state_.size()); ++u) {
    if (state_[u].slot >= 0) free_buffer(u);
  }
}

}  // namespace shardtrain
