#include "fsdp/unit_shards.h"

#include "core/error.h"

namespace shardtrain {

UnitShards::UnitShards(Ops& ops, const ParamLayout& layout, const ShardPlan& plan, int shard_rank,
                       int expert_shard_rank, bool keep_compute_copy, bool keep_grad_shards)
    : ops_(ops),
      layout_(layout),
      plan_(plan),
      shard_rank_(shard_rank),
      expert_shard_rank_(expert_shard_rank),
      act_(ops.activation_dtype()),
      keep_compute_copy_(keep_compute_copy),
      keep_grad_shards_(keep_grad_shards) {
  SHARDTRAIN_CHECK(keep_compute_copy || (plan.group_size == 1 && !plan.has_frozen()),
                   "a compute copy built on demand needs G = 1 and no frozen parameters");
  const bool fp32 = act_ == DType::kF32;
  for (const UnitShard& unit : plan_.units) {
    const size_t trainable = static_cast<size_t>(unit.shard_numel);
    const size_t frozen = static_cast<size_t>(unit.frozen_shard_numel);
    // fp32: the master lives in the forward buffer, after the frozen shard.
    const size_t forward_elems = fp32 || keep_compute_copy ? frozen + trainable : 0;
    forward_.emplace_back(ops, forward_elems * dtype_size(act_));
    master_.emplace_back(ops, fp32 ? 0 : trainable * sizeof(float));
    grad_.emplace_back(ops, keep_grad_shards ? trainable * sizeof(float) : 0);
    exp_avg_.emplace_back(ops, trainable * sizeof(float));
    exp_avg_sq_.emplace_back(ops, trainable * sizeof(float));
  }
  for (int u = 0; u < unit_count(); ++u) {
    optimizer_view_.push_back({&layout_.units[u], plan_.units[u].frozen_numel + shard_begin(u),
                               master_shard(u), grad_shard(u), exp_avg_shard(u),
                               exp_avg_sq_shard(u), compute_shard(u)});
  }
  // Grad shards start zero: the padding after a unit's elements is never written by backward
  // (G = 1 overwrites only the elements) yet is summed into the gradient norm.
  for (int u = 0; u < unit_count(); ++u) {
    if (keep_grad_shards_) ops_.fill_zero(grad_shard(u));
  }
}

Tensor UnitShards::frozen_shard(int unit) const {
  const int64_t frozen = plan_.units[unit].frozen_shard_numel;
  if (frozen == 0) return Tensor();
  return forward_[unit].view(act_, {frozen});
}

Tensor UnitShards::master_shard(int unit) const {
  const UnitShard& shard = plan_.units[unit];
  if (act_ == DType::kF32) {
    return forward_[unit]
        .view(DType::kF32, {shard.frozen_shard_numel + shard.shard_numel})
        .rows(shard.frozen_shard_numel, shard.frozen_shard_numel + shard.shard_numel);
  }
  return master_[unit].view(DType::kF32, {shard.shard_numel});
}

Tensor UnitShards::grad_shard(int unit) const {
  if (!keep_grad_shards_) return Tensor();
  return grad_[unit].view(DType::kF32, {plan_.units[unit].shard_numel});
}

Tensor UnitShards::exp_avg_shard(int unit) const {
  return exp_avg_[unit].view(DType::kF32, {plan_.units[unit].shard_numel});
}

Tensor UnitShards::exp_avg_sq_shard(int unit) const {
  return exp_avg_sq_[unit].view(DType::kF32, {plan_.units[unit].shard_numel});
}

Tensor UnitShards::compute_shard(int unit) const {
  if (act_ == DType::kF32 || !keep_compute_copy_) return Tensor();
  const UnitShard& shard = plan_.units[unit];
  return forward_[unit]
      .view(act_, {shard.frozen_shard_numel + shard.shard_numel})
      .rows(shard.frozen_shard_numel, shard.frozen_shard_numel + shard.shard_numel);
}

Tensor UnitShards::trainable_forward_shard(int unit) const {
  return act_ == DType::kF32 ? master_shard(unit) : compute_shard(unit);
}

Tensor UnitShards::whole_unit(int unit) const {
  SHARDTRAIN_CHECK(!plan_.sharded(unit) && forward_[unit].bytes() > 0,
                   "the whole unit is held only at G = 1 with a forward buffer");
  return forward_[unit].view(act_, {layout_.units[unit].numel});
}

void UnitShards::refresh_compute_params() {
  if (act_ == DType::kF32 || !keep_compute_copy_) return;
  for (int u = 0; u < unit_count(); ++u) {
    if (plan_.units[u].shard_numel > 0) ops_.cast(compute_shard(u), master_shard(u));
  }
}

void UnitShards::upload_frozen(int unit, const float* values_f32) {
  const Tensor frozen = frozen_shard(unit);
  if (!frozen.defined()) return;
  if (act_ == DType::kF32) {
    ops_.copy_from_host(frozen, values_f32);
    return;
  }
  // Through an fp32 device buffer, so the rounding is the backend's cast, as for the masters.
  DeviceBuffer staging(ops_, static_cast<size_t>(frozen.numel()) * sizeof(float));
  const Tensor staged = staging.view(DType::kF32, {frozen.numel()});
  ops_.copy_from_host(staged, values_f32);
  ops_.cast(frozen, staged);
}

FsdpMemory UnitShards::memory() const {
  FsdpMemory m;
  const size_t act = dtype_size(act_);
  for (int u = 0; u < unit_count(); ++u) {
    const size_t trainable = static_cast<size_t>(plan_.units[u].shard_numel);
    m.master_bytes += trainable * sizeof(float);
    m.moment_bytes += exp_avg_[u].bytes() + exp_avg_sq_[u].bytes();
    m.grad_shard_bytes += grad_[u].bytes();
    m.frozen_shard_bytes += static_cast<size_t>(plan_.units[u].frozen_shard_numel) * act;
    if (compute_shard(u).defined()) m.compute_shard_bytes += trainable * act;
  }
  return m;
}

}  // namespace shardtrain
