// LocalUnits: every unit's parameters (and, optionally, gradients and AdamW moments) held whole
// by one process (no sharding), on the Ops device. It is the UnitAccess that `eval` and
// `generate` (train/inference_model.h) and the golden and parity tests hand to the model. The
// trainer uses FSDP's sharded equivalent at every world size (fsdp/fsdp_units.h), which also
// owns the optimizer step; nothing here steps an optimizer.
//
// Master parameters, gradients and moments are fp32. When the backend computes in another
// dtype (bf16 on CUDA), a compute copy of the parameters is kept, refreshed from the masters by
// `refresh_compute_params()` (after loading them). acquire_grads always accumulates: a caller
// that runs a backward zeroes the gradients first (zero_grads()).
#pragma once

#include <vector>

#include "model/param_layout.h"
#include "model/unit_access.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

class LocalUnits final : public UnitAccess {
 public:
  // with_optimizer_state: allocate gradients and moments (training); false for eval.
  LocalUnits(Ops& ops, const ParamLayout& layout, bool with_optimizer_state);

  int unit_count() const { return static_cast<int>(master_.size()); }
  Tensor master(int unit) const;      // fp32 (unit numel)
  Tensor grads(int unit) const;       // fp32
  Tensor exp_avg(int unit) const;     // fp32
  Tensor exp_avg_sq(int unit) const;  // fp32
  Tensor compute(int unit) const;     // compute dtype; undefined when that is fp32 (no copy)

  // Copies host fp32 values (unit numel) into a unit's master parameters.
  void upload_master(int unit, const float* values);
  void download_master(int unit, float* values) const;
  void zero_grads();
  // Re-derives the compute-dtype parameters from the masters (no-op when compute is fp32).
  void refresh_compute_params();

  Tensor acquire_params(int unit) override;
  void release_params(int unit) override {}
  GradBuffer acquire_grads(int unit) override { return {grads(unit), true}; }
  void grads_ready(int unit) override {}

 private:
  Ops& ops_;
  std::vector<DeviceBuffer> master_, grads_, exp_avg_, exp_avg_sq_, compute_;
  std::vector<int64_t> numel_;
};

}  // namespace shardtrain
