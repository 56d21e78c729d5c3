// ShardOptimizer: what FsdpUnits::apply_optimizer runs over this rank's fp32 shards.
//
// FSDP owns the step's sequence (gradient norm, update, what the gradient buffers hold
// afterwards); the optimizer owns the update rule (train/optimizer.h AdamW implements it). The
// buffers are views into FsdpUnits' shards, described unit by unit with their place in the unit's
// flat layout, so a rule that treats parameters differently (weight decay) can map them.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/param_layout.h"

namespace shardtrain {

// One unit's fp32 optimizer view. `offset` is where these buffers start within the unit's flat
// layout (0 for a whole unit; a shard's start for FSDP), `numel` their length.
struct UnitBuffers {
  const UnitLayout* layout = nullptr;
  int64_t offset = 0;
  Tensor param, grad, exp_avg, exp_avg_sq;  // each (numel) fp32
  // Optional (numel) compute-dtype copy of param (bf16 on CUDA): the step writes the updated
  // parameters into it, which replaces a separate cast pass. Padding between and after the
  // parameters is not written; the masters there never change.
  Tensor compute_param;
};

// What a step leaves in the gradient buffers (FsdpUnits decides; see fsdp/fsdp_units.h).
enum class GradsAfterStep {
  kKeep,
  // Each parameter's gradient range is zeroed as the update reads it (no separate zero pass
  // before the next step). Padding ranges are not written: backward never writes them, so they
  // stay zero and the whole buffer is zero after the step.
  kZero,
};

class ShardOptimizer {
 public:
  virtual ~ShardOptimizer() = default;
  // One update (1-based `step`) of every buffer of `units`, gradients multiplied by grad_scale
  // first (the clip coefficient), leaving the gradients as `grads_after` says.
  virtual void step(const std::vector<UnitBuffers>& units, double lr, int64_t step,
                    float grad_scale, GradsAfterStep grads_after) = 0;
  // The same update enqueued aside (Ops::adamw_multi_aside): later ops may run beside it until
  // Ops::wait_aside(the returned ticket); none may touch the buffers before that wait. Default:
  // step(), in order (ticket 0).
  virtual int64_t step_aside(const std::vector<UnitBuffers>& units, double lr, int64_t step,
                             float grad_scale, GradsAfterStep grads_after) {
    this->step(units, lr, step, grad_scale, grads_after);
    return 0;
  }
};

}  // namespace shardtrain
