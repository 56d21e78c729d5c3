#include "fsdp/fsdp_units.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <thread>

#include "core/error.h"
#include "model/init_weights.h"
#include "obs/phase_progress.h"

namespace shardtrain {

FsdpUnits::FsdpUnits(Ops& ops, const ParamLayout& layout, FsdpGroups& groups, FsdpOptions options)
    : ops_(ops),
      layout_(layout),
      groups_(groups),
      options_(options),
      plan_(make_shard_plan(layout, groups.shard().size())) {
  const DType act = ops.activation_dtype();
  if (options_.update_in_backward) {
    SHARDTRAIN_CHECK(groups.world().size() == 1, "update_in_backward on {} ranks",
                     groups.world().size());
    backward_norm_ = DeviceBuffer(ops, sizeof(float));
  }
  const bool keep_copy = act != DType::kF32 && !on_demand_copy();
  for (const UnitShard& unit : plan_.units) {
    const size_t bytes = static_cast<size_t>(unit.shard_numel) * sizeof(float);
    master_.emplace_back(ops, bytes);
    grad_.emplace_back(ops, options_.update_in_backward ? 0 : bytes);
    exp_avg_.emplace_back(ops, bytes);
    exp_avg_sq_.emplace_back(ops, bytes);
    compute_.emplace_back(ops,
                          keep_copy ? static_cast<size_t>(unit.shard_numel) * dtype_size(act) : 0);
  }
  state_.resize(plan_.units.size());
  for (int u = 0; u < unit_count(); ++u) {
    optimizer_view_.push_back({&layout_.units[u], shard_begin(u), master_shard(u), grad_shard(u),
                               exp_avg_shard(u), exp_avg_sq_shard(u), compute_shard(u)});
  }
  // Grad shards start zero: the padding after a unit's elements is never written by backward
  // (G = 1 overwrites only the elements) yet is summed into the gradient norm.
  if (!options_.update_in_backward) {
    for (int u = 0; u < unit_count(); ++u) ops_.fill_zero(grad_shard(u));
  }
  grad_shards_zero_ = true;
  if (sharded()) {
    int64_t largest_shard = 0;
    for (const UnitShard& unit : plan_.units)
      largest_shard = std::max(largest_shard, unit.shard_numel);
    for (DeviceBuffer& buffer : reduced_) {
      buffer = DeviceBuffer(ops, static_cast<size_t>(largest_shard) * sizeof(float));
    }
  }
}

std::string FsdpUnits::unit_context(int unit, const char* phase) const {
  return fmt::format("unit {} ({}) {}", unit, layout_.units[unit].name, phase);
}

int64_t FsdpUnits::shard_begin(int unit) const {
  return plan_.shard_begin(unit, groups_.shard().rank());
}

Tensor FsdpUnits::shard_tensor(const std::vector<DeviceBuffer>& buffers, int unit) const {
  return buffers[unit].view(DType::kF32, {plan_.units[unit].shard_numel});
}
Tensor FsdpUnits::master_shard(int unit) const { return shard_tensor(master_, unit); }
Tensor FsdpUnits::grad_shard(int unit) const {
  return options_.update_in_backward ? Tensor() : shard_tensor(grad_, unit);
}
Tensor FsdpUnits::exp_avg_shard(int unit) const { return shard_tensor(exp_avg_, unit); }
Tensor FsdpUnits::exp_avg_sq_shard(int unit) const { return shard_tensor(exp_avg_sq_, unit); }
Tensor FsdpUnits::compute_shard(int unit) const {
  const DType act = ops_.activation_dtype();
  if (act == DType::kF32 || on_demand_copy()) return Tensor();
  return compute_[unit].view(act, {plan_.units[unit].shard_numel});
}

Tensor FsdpUnits::forward_shard(int unit) const {
  return ops_.activation_dtype() == DType::kF32 ? master_shard(unit) : compute_shard(unit);
}

void FsdpUnits::init_random(uint64_t seed, double std) {
  // Two units drawn at once where the host has the cores (each draws its large parameters on
  // threads of their own, model/init_weights.h), then copied in order: the same values.
  const int ahead = std::thread::hardware_concurrency() >= 8 ? 2 : 1;
  std::vector<std::vector<float>> unit_values(ahead);
  std::vector<float> shard_values;
  for (int first = 0; first < unit_count(); first += ahead) {
    const int count = std::min(ahead, unit_count() - first);
    std::vector<std::future<void>> draws;
    for (int k = 0; k < count; ++k) {
      unit_values[k].resize(layout_.units[first + k].numel);  // every element is written
      draws.push_back(std::async(std::launch::async, [this, &unit_values, first, k, seed, std] {
        init_unit_random(layout_.units[first + k], first + k, seed, std, unit_values[k].data());
      }));
    }
    for (std::future<void>& draw : draws) draw.get();
    for (int k = 0; k < count; ++k) {
      const int u = first + k;
      const int64_t begin = shard_begin(u), shard = plan_.units[u].shard_numel;
      shard_values.assign(shard, 0.0f);  // padding beyond the unit stays zero
      const int64_t end = std::min(begin + shard, layout_.units[u].numel);
      if (end > begin) {
        std::copy(unit_values[k].begin() + begin, unit_values[k].begin() + end,
                  shard_values.begin());
      }
      ops_.copy_from_host(master_shard(u), shard_values.data());
    }
  }
  refresh_compute_params();
}

void FsdpUnits::load_pretrained(const HfCheckpoint& checkpoint) {
  std::vector<float> shard_values;
  PhaseProgress progress("load pretrained weights", static_cast<uint64_t>(unit_count()), "units",
                         world_rank() == 0);
  for (int u = 0; u < unit_count(); ++u) {
    const int64_t begin = shard_begin(u), shard = plan_.units[u].shard_numel;
    shard_values.assign(shard, 0.0f);
    for (const ParamSpec& spec : layout_.units[u].params) {
      const int64_t lo = std::max(begin, spec.offset);
      const int64_t hi = std::min(begin + shard, spec.offset + spec.numel());
      if (lo >= hi) continue;
      checkpoint.read_range_into_f32(spec.name, spec.shape, lo - spec.offset, hi - lo,
                                     shard_values.data() + (lo - begin));
    }
    ops_.copy_from_host(master_shard(u), shard_values.data());
    progress.advance();
  }
  refresh_compute_params();
}

double FsdpUnits::begin_step(int64_t local_targets) {
  const double targets = sum_over_ranks(static_cast<double>(local_targets));
  if (options_.update_in_backward) {
    backward_update_ = BackwardUpdate{};
    ops_.fill_zero(backward_norm_.view(DType::kF32, {1}));
  }
  for (int u = 0; u < unit_count(); ++u) {
    if (!sharded()) {
      state_[u].grads_stale = true;  // the next backward overwrites the shard
    } else if (!grad_shards_zero_) {
      ops_.fill_zero(grad_shard(u));  // reductions add into it
    }
    if (state_[u].full_grad_slot >= 0) {
      free_slot(full_grad_pool_, state_[u].full_grad_slot,
                static_cast<size_t>(plan_.units[u].padded_numel) * sizeof(float));
      state_[u].full_grad_slot = -1;
    }
  }
  SHARDTRAIN_CHECK(pending_.empty(), "begin_step with {} reductions in flight", pending_.size());
  grad_shards_zero_ = sharded();
  return targets;
}

StepTotals FsdpUnits::end_backward(int64_t local_tokens, double local_loss_sum) {
  const std::vector<double> sums =
      sum_over_ranks({static_cast<double>(local_tokens), local_loss_sum});
  StepTotals totals;
  totals.tokens = sums[0];
  totals.loss_sum = sums[1];
  totals.grad_norm = std::sqrt(global_grad_square_sum());
  return totals;
}

void FsdpUnits::apply_optimizer(ShardOptimizer& optimizer, double lr, int64_t step,
                                float grad_scale) {
  if (options_.update_in_backward) {
    SHARDTRAIN_CHECK(backward_update_.units_done == unit_count() && grad_scale == 1.0f,
                     "update in backward: {} of {} units updated, grad_scale {}",
                     backward_update_.units_done, unit_count(), grad_scale);
    return;
  }
  // One pass: the update also writes the compute shards (no refresh_compute_params) and, when
  // the next backward adds into the grad shards (G > 1), zeroes them as it reads them (the next
  // begin_step skips its fill). G = 1: the next backward overwrites them.
  const bool next_backward_overwrites = !sharded();
  optimizer.step(optimizer_view_, lr, step, grad_scale,
                 next_backward_overwrites ? GradsAfterStep::kKeep : GradsAfterStep::kZero);
  if (!next_backward_overwrites) grad_shards_zero_ = true;
}

void FsdpUnits::set_update_in_backward(ShardOptimizer& optimizer, double lr, int64_t step) {
  SHARDTRAIN_CHECK(options_.update_in_backward, "set_update_in_backward without the option");
  backward_update_ = BackwardUpdate{&optimizer, lr, step, 0};
}

void FsdpUnits::update_unit_in_backward(int unit) {
  SHARDTRAIN_CHECK(backward_update_.optimizer != nullptr, "no update set for this step");
  UnitState& state = state_[unit];
  const int64_t padded = plan_.units[unit].padded_numel;
  const Tensor grad = full_grad_pool_.buffers[state.full_grad_slot].view(DType::kF32, {padded});
  // The padding of the buffer is zero (acquire_grads), as a grad shard's is: the same norm
  // terms and the same update (the masters there stay zero).
  ops_.sum_squares(grad, backward_norm_.view(DType::kF32, {1}));
  UnitBuffers view = optimizer_view_[unit];
  view.grad = grad;
  backward_update_.optimizer->step({view}, backward_update_.lr, backward_update_.step, 1.0f,
                                   GradsAfterStep::kKeep);
  free_slot(full_grad_pool_, state.full_grad_slot, static_cast<size_t>(padded) * sizeof(float));
  state.full_grad_slot = -1;
  ++backward_update_.units_done;
}

void FsdpUnits::begin_micro_batch(int64_t index, int64_t count) {
  SHARDTRAIN_CHECK(index >= 0 && index < count, "micro-batch {} of {}", index, count);
  SHARDTRAIN_CHECK(!options_.update_in_backward || count == 1,
                   "update in backward with {} micro-batches per step", count);
  last_micro_batch_ = index == count - 1;
}

Tensor FsdpUnits::scalar_scratch(int64_t floats) {
  // Kept across steps: a device allocation per call would stall CUDA (cudaFree synchronises).
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  if (scalar_scratch_.bytes() < bytes) scalar_scratch_ = DeviceBuffer(ops_, bytes);
  return scalar_scratch_.view(DType::kF32, {floats});
}

std::vector<double> FsdpUnits::sum_over_ranks(const std::vector<double>& values) {
  // Two floats per value (the value and its rounding error) keep ~48 bits through an fp32
  // all-reduce; every value goes in one collective.
  std::vector<float> parts;
  for (double value : values) {
    const float high = static_cast<float>(value);
    parts.push_back(high);
    parts.push_back(static_cast<float>(value - high));
  }
  const Tensor parts_tensor = scalar_scratch(static_cast<int64_t>(parts.size()));
  ops_.copy_from_host(parts_tensor, parts.data());
  groups_.world().set_context("step totals (targets, tokens, loss)");
  groups_.world().all_reduce(parts_tensor, ReduceOp::kSum);
  ops_.copy_to_host(parts.data(), parts_tensor);
  std::vector<double> sums(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    sums[i] = static_cast<double>(parts[2 * i]) + static_cast<double>(parts[2 * i + 1]);
  }
  return sums;
}

double FsdpUnits::sum_over_ranks(double value) { return sum_over_ranks(std::vector{value})[0]; }

double FsdpUnits::global_grad_square_sum() {
  // One rank: the units' terms were summed in backward (in backward's unit order).
  if (options_.update_in_backward) return ops_.read_scalar(backward_norm_.view(DType::kF32, {1}));
  const Tensor sum_1 = scalar_scratch(1);
  ops_.fill_zero(sum_1);
  for (int u = 0; u < unit_count(); ++u) ops_.sum_squares(grad_shard(u), sum_1);
  // Through the host as fp32, as the per-rank sum has always been reduced.
  const float local_sum = ops_.read_scalar(sum_1);
  ops_.copy_from_host(sum_1, &local_sum);
  groups_.shard().set_context("gradient norm");
  groups_.shard().all_reduce(sum_1, ReduceOp::kSum);
  return ops_.read_scalar(sum_1);
}

void FsdpUnits::refresh_compute_params() {
  if (ops_.activation_dtype() == DType::kF32 || on_demand_copy()) return;
  for (int u = 0; u < unit_count(); ++u) {
    ops_.cast(compute_shard(u), master_shard(u));
  }
}

void FsdpUnits::gather_master_to_host(int unit, float* host_values) {
  const int64_t numel = layout_.units[unit].numel;
  if (!sharded()) {
    ops_.copy_to_host(host_values, master_shard(unit).rows(0, numel));
    return;
  }
  const int64_t padded = plan_.units[unit].padded_numel;
  DeviceBuffer full(ops_, static_cast<size_t>(padded) * sizeof(float));
  const Tensor full_flat = full.view(DType::kF32, {padded});
  groups_.shard().set_context(unit_context(unit, "checkpoint gather"));
  groups_.shard().all_gather(full_flat, master_shard(unit));
  ops_.copy_to_host(host_values, full_flat.rows(0, numel));
}

std::optional<double> FsdpUnits::take_compute_wait_seconds() {
  std::optional<double> total = groups_.shard().take_compute_wait_seconds();
  if (&groups_.replicate() != &groups_.shard()) {
    if (const std::optional<double> replicate = groups_.replicate().take_compute_wait_seconds()) {
      total = total.value_or(0) + *replicate;
    }
  }
  return total;
}

FsdpMemory FsdpUnits::memory() const {
  FsdpMemory m;
  for (int u = 0; u < unit_count(); ++u) {
    m.master_bytes += master_[u].bytes();
    m.moment_bytes += exp_avg_[u].bytes() + exp_avg_sq_[u].bytes();
    m.grad_shard_bytes += grad_[u].bytes();
    m.compute_shard_bytes += compute_[u].bytes();
  }
  m.gathered_peak_bytes = gathered_pool_.peak_bytes;
  m.full_grad_peak_bytes = full_grad_pool_.peak_bytes + reduced_[0].bytes() + reduced_[1].bytes();
  return m;
}

int FsdpUnits::take_slot(Pool& pool, size_t bytes) {
  int slot = -1;
  for (size_t i = 0; i < pool.buffers.size(); ++i) {
    if (pool.in_use[i] || pool.buffers[i].bytes() < bytes) continue;
    if (slot < 0 || pool.buffers[i].bytes() < pool.buffers[slot].bytes()) {
      slot = static_cast<int>(i);
    }
  }
  if (slot < 0) {
    pool.buffers.emplace_back(ops_, bytes);
    pool.in_use.push_back(false);
    slot = static_cast<int>(pool.buffers.size() - 1);
  }
  pool.in_use[slot] = true;
  pool.in_use_bytes += bytes;
  pool.peak_bytes = std::max(pool.peak_bytes, pool.in_use_bytes);
  return slot;
}

void FsdpUnits::free_slot(Pool& pool, int slot, size_t bytes) {
  SHARDTRAIN_CHECK(pool.in_use[slot], "pool slot {} freed twice", slot);
  pool.in_use[slot] = false;
  pool.in_use_bytes -= bytes;
}

void FsdpUnits::start_gather(int unit) {
  UnitState& state = state_[unit];
  if (state.gathered_slot >= 0) return;
  const DType act = ops_.activation_dtype();
  const int64_t padded = plan_.units[unit].padded_numel;
  state.gathered_slot = take_slot(gathered_pool_, static_cast<size_t>(padded) * dtype_size(act));
  const Tensor gathered = gathered_pool_.buffers[state.gathered_slot].view(act, {padded});
  groups_.shard().set_context(unit_context(unit, "parameter all-gather"));
  state.gather = groups_.shard().start_all_gather(gathered, forward_shard(unit));
  state.gather_in_flight = true;
}

void FsdpUnits::finish_gather(int unit) {
  UnitState& state = state_[unit];
  if (!state.gather_in_flight) return;
  groups_.shard().finish(state.gather);
  state.gather_in_flight = false;
}

Tensor FsdpUnits::acquire_on_demand_copy(int unit) {
  UnitState& state = state_[unit];
  const DType act = ops_.activation_dtype();
  const int64_t padded = plan_.units[unit].padded_numel;
  if (state.gathered_slot < 0) {
    // The whole shard, padding included, as refresh_compute_params casts a persistent copy.
    state.gathered_slot = take_slot(gathered_pool_, static_cast<size_t>(padded) * dtype_size(act));
    ops_.cast(gathered_pool_.buffers[state.gathered_slot].view(act, {padded}), master_shard(unit));
  }
  return gathered_pool_.buffers[state.gathered_slot].view(act, {padded});
}

Tensor FsdpUnits::acquire_params(int unit) {
  const DType act = ops_.activation_dtype();
  const int64_t numel = layout_.units[unit].numel;
  if (on_demand_copy()) return acquire_on_demand_copy(unit).rows(0, numel);
  if (!sharded()) return forward_shard(unit).rows(0, numel);
  if (unit == kRootUnit) forward_phase_ = true;  // every pass starts at the root
  start_gather(unit);
  finish_gather(unit);
  // Forward walks the units in order: gather the next one while this one computes.
  if (forward_phase_ && unit + 1 < unit_count()) start_gather(unit + 1);
  const int64_t padded = plan_.units[unit].padded_numel;
  return gathered_pool_.buffers[state_[unit].gathered_slot].view(act, {padded}).rows(0, numel);
}

void FsdpUnits::release_params(int unit) {
  UnitState& state = state_[unit];
  if (state.gathered_slot < 0) return;
  // SHARD_GRAD_OP keeps forward's gather for backward; everything is freed after backward.
  // (G = 1 builds copies on demand: always freed.)
  const bool keep =
      sharded() && options_.strategy == FsdpStrategy::kShardGradOp && !state.in_backward;
  if (keep) return;
  finish_gather(unit);  // a prefetched gather never used: order the buffer's reuse after it
  free_slot(
      gathered_pool_, state.gathered_slot,
      static_cast<size_t>(plan_.units[unit].padded_numel) * dtype_size(ops_.activation_dtype()));
  state.gathered_slot = -1;
}

void FsdpUnits::release_gathered_params() {
  forward_phase_ = false;
  for (int u = 0; u < unit_count(); ++u) {
    UnitState& state = state_[u];
    if (state.gathered_slot < 0) continue;
    finish_gather(u);
    free_slot(
        gathered_pool_, state.gathered_slot,
        static_cast<size_t>(plan_.units[u].padded_numel) * dtype_size(ops_.activation_dtype()));
    state.gathered_slot = -1;
  }
}

GradBuffer FsdpUnits::acquire_grads(int unit) {
  UnitState& state = state_[unit];
  state.in_backward = true;
  grad_shards_zero_ = false;  // backward writes the shard (directly, or by a reduction)
  forward_phase_ = false;
  const int64_t numel = layout_.units[unit].numel;
  if (options_.update_in_backward) {
    // A fresh pooled buffer, overwritten by backward; its padding zeroed (update_unit_in_backward).
    const int64_t padded = plan_.units[unit].padded_numel;
    SHARDTRAIN_CHECK(state.full_grad_slot < 0, "unit {} acquired its grads twice", unit);
    state.full_grad_slot = take_slot(full_grad_pool_, static_cast<size_t>(padded) * sizeof(float));
    const Tensor full = full_grad_pool_.buffers[state.full_grad_slot].view(DType::kF32, {padded});
    if (padded > numel) ops_.fill_zero(full.rows(numel, padded));
    return {full.rows(0, numel), false};
  }
  if (!sharded()) {
    // The first backward of a step overwrites the shard (begin_step left it stale).
    const bool accumulate = !state.grads_stale;
    state.grads_stale = false;
    return {grad_shard(unit).rows(0, numel), accumulate};
  }

  // Backward walks the blocks in reverse after the root's head: gather the next one now.
  const int next = unit == kRootUnit ? unit_count() - 1 : unit - 1;
  if (next >= block_unit(0) && next != unit) start_gather(next);

  const int64_t padded = plan_.units[unit].padded_numel;
  bool accumulate = true;
  if (state.full_grad_slot < 0) {
    // A fresh buffer: backward overwrites the unit's elements; only the padding after them,
    // which backward never writes but the reduce-scatter reads, is zeroed.
    state.full_grad_slot = take_slot(full_grad_pool_, static_cast<size_t>(padded) * sizeof(float));
    const Tensor full = full_grad_pool_.buffers[state.full_grad_slot].view(DType::kF32, {padded});
    if (padded > numel) ops_.fill_zero(full.rows(numel, padded));
    accumulate = false;
  }
  const Tensor full = full_grad_pool_.buffers[state.full_grad_slot].view(DType::kF32, {padded});
  return {full.rows(0, numel), accumulate};
}

void FsdpUnits::grads_ready(int unit) {
  UnitState& state = state_[unit];
  state.in_backward = false;
  if (options_.update_in_backward) {
    update_unit_in_backward(unit);
    return;
  }
  const Tensor shard = grad_shard(unit);
  if (sharded()) {
    if (!options_.reduce_on_last_micro_batch || last_micro_batch_) {
      // At most one reduction is pending here (see the end of this function): its output
      // buffer is busy, the other one is free.
      SHARDTRAIN_CHECK(pending_.size() <= 1, "{} reductions in flight", pending_.size());
      const int slot = !pending_.empty() && pending_.back().reduced_slot == 0 ? 1 : 0;
      const int64_t padded = plan_.units[unit].padded_numel;
      const Tensor full = full_grad_pool_.buffers[state.full_grad_slot].view(DType::kF32, {padded});
      const Tensor reduced = reduced_[slot].view(DType::kF32, {shard.numel()});
      groups_.shard().set_context(unit_context(unit, "gradient reduce-scatter"));
      PendingReduction p;
      p.unit = unit;
      p.work = groups_.shard().start_reduce_scatter(reduced, full, ReduceOp::kSum);
      p.reduced_slot = slot;
      p.full_grad_slot = state.full_grad_slot;
      state.full_grad_slot = -1;  // owned by the pending reduction until it completes
      pending_.push_back(p);
    }
  } else if (last_micro_batch_ && groups_.replicate().size() > 1) {
    groups_.replicate().set_context(unit_context(unit, "gradient all-reduce"));
    PendingReduction p;
    p.unit = unit;
    p.replicate = true;
    p.work = groups_.replicate().start_all_reduce(shard, ReduceOp::kSum);
    pending_.push_back(p);
  }
  // Keep one reduction in flight behind the next unit's backward; the root comes last.
  while (pending_.size() > (unit == kRootUnit ? 0u : 1u)) complete_oldest_reduction();
}

void FsdpUnits::complete_oldest_reduction() {
  SHARDTRAIN_CHECK(!pending_.empty(), "no reduction in flight");
  const PendingReduction p = pending_.front();
  pending_.pop_front();
  reduction_comm(p).finish(p.work);
  if (p.reduced_slot < 0) return;  // in-place all-reduce: nothing more to do
  const Tensor shard = grad_shard(p.unit);
  ops_.add(shard, shard, reduced_[p.reduced_slot].view(DType::kF32, {shard.numel()}));
  free_slot(full_grad_pool_, p.full_grad_slot,
            static_cast<size_t>(plan_.units[p.unit].padded_numel) * sizeof(float));
  if (last_micro_batch_ && groups_.replicate().size() > 1) {
    // HYBRID_SHARD: then sum the shard over the replicas (on the compute stream).
    groups_.replicate().set_context(unit_context(p.unit, "gradient all-reduce"));
    groups_.replicate().all_reduce(shard, ReduceOp::kSum);
  }
}

}  // namespace shardtrain
