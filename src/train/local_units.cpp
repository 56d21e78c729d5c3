#include "train/local_units.h"

namespace shardtrain {

LocalUnits::LocalUnits(Ops& ops, const ParamLayout& layout, bool with_optimizer_state)
    : ops_(ops) {
  const bool separate_compute = ops.activation_dtype() != DType::kF32;
  for (const UnitLayout& unit : layout.units) {
    const size_t bytes = static_cast<size_t>(unit.numel) * sizeof(float);
    numel_.push_back(unit.numel);
    master_.emplace_back(ops, bytes);
    grads_.emplace_back(ops, with_optimizer_state ? bytes : 0);
    exp_avg_.emplace_back(ops, with_optimizer_state ? bytes : 0);
    exp_avg_sq_.emplace_back(ops, with_optimizer_state ? bytes : 0);
    compute_.emplace_back(ops, separate_compute
                                   ? static_cast<size_t>(unit.numel) *
                                         dtype_size(ops.activation_dtype())
                                   : 0);
  }
}

Tensor LocalUnits::master(int unit) const {
  return master_[unit].view(DType::kF32, {numel_[unit]});
}
Tensor LocalUnits::grads(int unit) const {
  return grads_[unit].view(DType::kF32, {numel_[unit]});
}
Tensor LocalUnits::exp_avg(int unit) const {
  return exp_avg_[unit].view(DType::kF32, {numel_[unit]});
}
Tensor LocalUnits::exp_avg_sq(int unit) const {
  return exp_avg_sq_[unit].view(DType::kF32, {numel_[unit]});
}

Tensor LocalUnits::compute(int unit) const {
  if (ops_.activation_dtype() == DType::kF32) return Tensor();
  return compute_[unit].view(ops_.activation_dtype(), {numel_[unit]});
}

void LocalUnits::upload_master(int unit, const float* values) {
  ops_.copy_from_host(master(unit), values);
}

void LocalUnits::download_master(int unit, float* values) const {
  ops_.copy_to_host(values, master(unit));
}

void LocalUnits::zero_grads() {
  for (int u = 0; u < unit_count(); ++u) ops_.fill_zero(grads(u));
}

void LocalUnits::refresh_compute_params() {
  if (ops_.activation_dtype() == DType::kF32) return;
  for (int u = 0; u < unit_count(); ++u) {
    ops_.cast(compute(u), master(u));
  }
}

Tensor LocalUnits::acquire_params(int unit) {
  if (ops_.activation_dtype() == DType::kF32) return master(unit);
  return compute(unit);
}

}  // namespace shardtrain
