#include "fsdp/grad_reducer.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"

namespace shardtrain {

GradReducer::GradReducer(Ops& ops, const ParamLayout& layout, const ShardPlan& plan,
                         UnitShards& shards, Mesh& mesh, bool reduce_on_last_micro_batch,
                         bool update_in_backward)
    : ops_(ops),
      layout_(layout),
      plan_(plan),
      shards_(shards),
      mesh_(mesh),
      reduce_on_last_micro_batch_(reduce_on_last_micro_batch),
      update_in_backward_(update_in_backward),
      pool_(ops),
      state_(plan.units.size()),
      norm_scratch_(ops, sizeof(float)),
      norm_terms_(ops, plan.units.size() * sizeof(float)) {
  if (update_in_backward_) backward_norm_ = DeviceBuffer(ops, sizeof(float));
  if (plan_.group_size > 1) {
    int64_t largest_shard = 0;
    for (const UnitShard& unit : plan_.units) {
      largest_shard = std::max(largest_shard, unit.shard_numel);
    }
    for (DeviceBuffer& buffer : reduced_) {
      buffer = DeviceBuffer(ops, static_cast<size_t>(largest_shard) * sizeof(float));
    }
  }
}

size_t GradReducer::peak_bytes() const {
  return pool_.peak_bytes() + reduced_[0].bytes() + reduced_[1].bytes();
}

Tensor GradReducer::full_grad(int unit) const {
  return pool_.view(state_[unit].full_grad_slot, DType::kF32, plan_.units[unit].padded_numel);
}

void GradReducer::take_full_grad(int unit) {
  const UnitShard& shard = plan_.units[unit];
  const int64_t trainable = layout_.units[unit].numel - shard.frozen_numel;
  state_[unit].full_grad_slot = pool_.take(static_cast<size_t>(shard.padded_numel) * sizeof(float));
  const Tensor full = full_grad(unit);
  if (shard.padded_numel > trainable) ops_.fill_zero(full.rows(trainable, shard.padded_numel));
}

void GradReducer::begin_step() {
  if (update_in_backward_) {
    backward_update_ = BackwardUpdate{};
    ops_.fill_zero(backward_norm_.view(DType::kF32, {1}));
  }
  norm_started_ = false;
  for (UnitState& state : state_) state.norm_counted = false;
  for (int u = 0; u < static_cast<int>(state_.size()); ++u) {
    if (!sharded(u)) {
      state_[u].grads_stale = true;  // the next backward overwrites the shard
    } else if (!grad_shards_zero_) {
      ops_.fill_zero(shards_.grad_shard(u));  // reductions add into it
    }
    if (state_[u].full_grad_slot >= 0) {
      pool_.free(state_[u].full_grad_slot);
      state_[u].full_grad_slot = -1;
    }
  }
  SHARDTRAIN_CHECK(pending_.empty(), "begin_step with {} reductions in flight", pending_.size());
  // Units at G = 1 are overwritten by their next backward instead (grads_stale).
  grad_shards_zero_ = plan_.group_size > 1;
}

GradBuffer GradReducer::acquire(int unit) {
  UnitState& state = state_[unit];
  grad_shards_zero_ = false;  // backward writes the shard (directly, or by a reduction)
  const int64_t frozen = plan_.units[unit].frozen_numel;
  const int64_t trainable = layout_.units[unit].numel - frozen;
  if (update_in_backward_) {
    // A fresh pooled buffer, overwritten by backward; its padding zeroed (update_unit_in_backward).
    SHARDTRAIN_CHECK(state.full_grad_slot < 0, "unit {} acquired its grads twice", unit);
    take_full_grad(unit);
    return {full_grad(unit).rows(0, trainable), false, frozen};
  }
  if (!sharded(unit)) {
    // The first backward of a step overwrites the shard (begin_step left it stale).
    const bool accumulate = !state.grads_stale;
    state.grads_stale = false;
    return {shards_.grad_shard(unit).rows(0, trainable), accumulate, frozen};
  }
  bool accumulate = true;
  if (state.full_grad_slot < 0) {
    // A fresh buffer: backward overwrites the unit's elements; only the padding after them,
    // which backward never writes but the reduce-scatter reads, is zeroed.
    take_full_grad(unit);
    accumulate = false;
  }
  return {full_grad(unit).rows(0, trainable), accumulate, frozen};
}

void GradReducer::ready(int unit) {
  UnitState& state = state_[unit];
  if (update_in_backward_) {
    update_unit_in_backward(unit);
    return;
  }
  const Tensor shard = shards_.grad_shard(unit);
  const std::string context = fmt::format("unit {} ({})", unit, layout_.units[unit].name);
  if (sharded(unit)) {
    if (!reduce_on_last_micro_batch_ || last_micro_batch_) {
      // At most one reduction is pending here (see the end of this function): its output
      // buffer is busy, the other one is free.
      SHARDTRAIN_CHECK(pending_.size() <= 1, "{} reductions in flight", pending_.size());
      const int slot = !pending_.empty() && pending_.back().reduced_slot == 0 ? 1 : 0;
      const Tensor reduced = reduced_[slot].view(DType::kF32, {shard.numel()});
      shard_comm(unit).set_context(context + " gradient reduce-scatter");
      PendingReduction p;
      p.unit = unit;
      p.work = shard_comm(unit).start_reduce_scatter(reduced, full_grad(unit), ReduceOp::kSum);
      p.reduced_slot = slot;
      p.full_grad_slot = state.full_grad_slot;
      state.full_grad_slot = -1;  // owned by the pending reduction until it completes
      pending_.push_back(p);
    }
  } else if (last_micro_batch_ && mesh_.replicate_size() == 1) {
    count_norm_term(unit);  // backward wrote the shard itself: final
  } else if (last_micro_batch_ && mesh_.replicate_size() > 1) {
    mesh_.replicate().set_context(context + " gradient all-reduce");
    PendingReduction p;
    p.unit = unit;
    p.replicate = true;
    p.work = mesh_.replicate().start_all_reduce(shard, ReduceOp::kSum);
    pending_.push_back(p);
  }
  // Keep one reduction in flight behind the next unit's backward; the root comes last.
  while (pending_.size() > (unit == kRootUnit ? 0u : 1u)) complete_oldest_reduction();
}

void GradReducer::complete_oldest_reduction() {
  SHARDTRAIN_CHECK(!pending_.empty(), "no reduction in flight");
  const PendingReduction p = pending_.front();
  pending_.pop_front();
  reduction_comm(p).finish(p.work);
  if (p.reduced_slot < 0) {  // in-place all-reduce over the replicas: the shard is final
    if (last_micro_batch_) count_norm_term(p.unit);
    return;
  }
  const Tensor shard = shards_.grad_shard(p.unit);
  ops_.add(shard, shard, reduced_[p.reduced_slot].view(DType::kF32, {shard.numel()}));
  pool_.free(p.full_grad_slot);
  if (last_micro_batch_ && mesh_.replicate_size() > 1) {
    // HYBRID_SHARD: then sum the shard over the replicas (on the compute stream).
    mesh_.replicate().set_context(
        fmt::format("unit {} ({}) gradient all-reduce", p.unit, layout_.units[p.unit].name));
    mesh_.replicate().all_reduce(shard, ReduceOp::kSum);
  }
  // The reduce-scatters of earlier micro-batches only add into the shard; the last one's makes
  // it final (and with reduce_on_last_micro_batch it is the only one).
  if (last_micro_batch_) count_norm_term(p.unit);
}

void GradReducer::count_norm_term(int unit) {
  if (plan_.units[unit].shard_numel == 0) return;
  SHARDTRAIN_CHECK(!state_[unit].norm_counted, "unit {} norm counted twice", unit);
  const Tensor terms = norm_terms_.view(DType::kF32, {static_cast<int64_t>(state_.size())});
  if (!norm_started_) {
    ops_.fill_zero(terms);  // on the compute stream, before the aside work it orders
    norm_started_ = true;
  }
  ops_.sum_squares_aside(shards_.grad_shard(unit), terms.rows(unit, unit + 1));
  state_[unit].norm_counted = true;
}

double GradReducer::global_square_sum() {
  // One rank: the units' terms were summed in backward (in backward's unit order).
  if (update_in_backward_) return ops_.read_scalar(backward_norm_.view(DType::kF32, {1}));
  const int64_t units = static_cast<int64_t>(state_.size());
  const Tensor terms = norm_terms_.view(DType::kF32, {units});
  ops_.join_aside();  // the terms counted in backward
  if (!norm_started_) ops_.fill_zero(terms);
  std::vector<float> term(static_cast<size_t>(units));
  for (int u = 0; u < units; ++u) {
    if (plan_.units[u].shard_numel > 0 && !state_[u].norm_counted) {
      ops_.sum_squares(shards_.grad_shard(u), terms.rows(u, u + 1));
    }
  }
  ops_.copy_to_host(term.data(), terms);
  // A second call this step sums the shards again.
  norm_started_ = false;
  for (UnitState& state : state_) state.norm_counted = false;
  // Unit by unit in fp32, then through the device, as the per-rank sum has always been reduced.
  float local_sum = 0;
  for (int u = 0; u < units; ++u) {
    if (plan_.units[u].shard_numel > 0) local_sum += term[static_cast<size_t>(u)];
  }
  const Tensor sum_1 = norm_scratch_.view(DType::kF32, {1});
  ops_.copy_from_host(sum_1, &local_sum);
  mesh_.shard().set_context("gradient norm");
  mesh_.shard().all_reduce(sum_1, ReduceOp::kSum);
  return ops_.read_scalar(sum_1);
}

void GradReducer::set_update_in_backward(ShardOptimizer& optimizer, double lr, int64_t step) {
  SHARDTRAIN_CHECK(update_in_backward_, "set_update_in_backward without the option");
  backward_update_ = BackwardUpdate{&optimizer, lr, step, 0};
}

void GradReducer::update_unit_in_backward(int unit) {
  SHARDTRAIN_CHECK(backward_update_.optimizer != nullptr, "no update set for this step");
  UnitState& state = state_[unit];
  const Tensor grad = full_grad(unit);
  // The padding of the buffer is zero (acquire), as a grad shard's is: the same norm terms and
  // the same update (the masters there stay zero).
  ops_.sum_squares(grad, backward_norm_.view(DType::kF32, {1}));
  UnitBuffers view = shards_.optimizer_view()[unit];
  view.grad = grad;
  backward_update_.optimizer->step({view}, backward_update_.lr, backward_update_.step, 1.0f,
                                   GradsAfterStep::kKeep);
  pool_.free(state.full_grad_slot);
  state.full_grad_slot = -1;
  ++backward_update_.units_done;
}

}  // namespace shardtrain
