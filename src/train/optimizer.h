// AdamW over flat units, with global-norm gradient clipping, as torch.optim.AdamW and
// torch.nn.utils.clip_grad_norm_ compute them.
//
// Weight decay applies to parameters whose ParamSpec::decay is true (norms and biases are
// excluded unless decay_norms_and_biases). Works on any set of fp32 buffers laid out by
// UnitLayout (a whole unit or a shard of one). FSDP runs it over this rank's shards
// (FsdpUnits::apply_optimizer, which also computes the global gradient norm and decides what the
// gradient buffers hold after the step).
#pragma once

#include <cstdint>
#include <vector>

#include "fsdp/shard_optimizer.h"
#include "model/param_layout.h"
#include "ops/ops.h"

namespace shardtrain {

struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.0;
  bool decay_norms_and_biases = false;
};

class AdamW final : public ShardOptimizer {
 public:
  AdamW(Ops& ops, AdamWSettings settings);

  // Clip coefficient for a global gradient norm (1 when no clipping is needed).
  static float clip_coefficient(double grad_norm, double max_norm);
  // One AdamW step (1-based `step`) with gradients multiplied by grad_scale first: a single
  // Ops::adamw_multi call over every parameter range of every unit (weight decay per parameter).
  void step(const std::vector<UnitBuffers>& units, double lr, int64_t step, float grad_scale,
            GradsAfterStep grads_after) override;
  // The same single Ops::adamw_multi_aside call.
  int64_t step_aside(const std::vector<UnitBuffers>& units, double lr, int64_t step,
                     float grad_scale, GradsAfterStep grads_after) override;

 private:
  // The step's scalars and every parameter range of `units` as adamw_multi takes them.
  AdamWStep step_scalars(double lr, int64_t step, float grad_scale) const;
  std::vector<AdamWSegment> segments_of(const std::vector<UnitBuffers>& units,
                                        GradsAfterStep grads_after) const;

  Ops& ops_;
  AdamWSettings settings_;
};

}  // namespace shardtrain
