// AdamW over flat units, with global-norm gradient clipping, as torch.optim.AdamW and
// torch.nn.utils.clip_grad_norm_ compute them.
//
// Weight decay applies to parameters whose ParamSpec::decay is true (norms and biases are
// excluded unless decay_norms_and_biases). Works on any set of fp32 buffers laid out by
// UnitLayout, so FSDP applies it to shards (with the norm summed across ranks by the caller).
#pragma once

#include <cstdint>
#include <vector>

#include "model/param_layout.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  bool decay_norms_and_biases = false;
};

// One unit's fp32 optimizer view. `offset` is where these buffers start within the unit's
// flat layout (0 for a whole unit; a shard's start for FSDP), `numel` their length.
struct UnitBuffers {
  const UnitLayout* layout = nullptr;
  int64_t offset = 0;
  Tensor param, grad, exp_avg, exp_avg_sq;  // each (numel) fp32
  // Optional (numel) compute-dtype copy of param (bf16 on CUDA): step() writes the updated
  // parameters into it, which replaces a separate cast pass. Padding between and after the
  // parameters is not written; the masters there never change.
  Tensor compute_param;
};

// What step() leaves in the gradient buffers.
enum class GradsAfterStep {
  kKeep,
  // Each parameter's gradient range is zeroed as the update reads it (no separate zero pass
  // before the next step). Padding ranges are not written: backward never writes them, so they
  // stay zero and the whole buffer is zero after the step.
  kZero,
};

class AdamW {
 public:
  AdamW(Ops& ops, AdamWSettings settings);

  // Sum of squared gradients over all buffers, as a device f32 [1] scalar (not synchronised).
  Tensor grad_square_sum(const std::vector<UnitBuffers>& units);
  // Clip coefficient for a global gradient norm (1 when no clipping is needed).
  static float clip_coefficient(double grad_norm, double max_norm);
  // One AdamW step (1-based `step`) with gradients multiplied by grad_scale first: a single
  // Ops::adamw_multi call over every parameter range of every unit (weight decay per parameter).
  void step(const std::vector<UnitBuffers>& units, double lr, int64_t step, float grad_scale,
            GradsAfterStep grads_after = GradsAfterStep::kKeep);

 private:
  Ops& ops_;
  AdamWSettings settings_;
  DeviceBuffer norm_scalar_;
};

}  // namespace shardtrain
