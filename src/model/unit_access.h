// UnitAccess: how the model gets each unit's parameters and hands back its gradients.
//
// The model walks units in a fixed order (forward: root, blocks 0..L-1; backward: blocks
// L-1..0, root) and calls these hooks; it never communicates. LocalUnits (train/local_units.h:
// eval, generate, golden tests) implements them with plain buffers; FSDP (fsdp/fsdp_units.h, the
// trainer at every world size) with all-gather / reduce-scatter, using the known order to
// prefetch. Unit indices follow ParamLayout: kRootUnit = root, block_unit(l) = block l.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace shardtrain {

// A unit's gradient buffer for one backward. accumulate = false: the buffer holds nothing
// worth keeping (its last contents went into an optimizer step, or it was just taken from a
// pool), so backward overwrites every element instead of adding (no zero fill beforehand, and
// the weight-gradient GEMMs skip reading it); true: backward adds to it (micro-batches after
// the first, or a caller that zeroed it).
struct GradBuffer {
  Tensor flat;
  bool accumulate = true;
  // The unit element `flat` starts at. Parameters before it are frozen (ParamSpec::trainable
  // false, fsdp/shard_plan.h): no gradient is kept for them, so backward writes none and needs
  // no weight-gradient GEMM for them. 0 when the unit has no frozen parameters.
  int64_t offset = 0;
};

class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // Full (gathered) flat parameters of `unit`, 1-D, in the backend's activation dtype.
  // Valid until release_params(unit).
  virtual Tensor acquire_params(int unit) = 0;
  virtual void release_params(int unit) = 0;
  // Flat gradient buffer of `unit` (same layout as its params) that backward writes into, as
  // GradBuffer::accumulate says. REQUIRES (of the model): backward writes every parameter's
  // gradient of the unit, so an overwritten buffer leaves nothing stale.
  virtual GradBuffer acquire_grads(int unit) = 0;
  // Backward of `unit` is complete for this micro-batch: its gradients may be reduced.
  virtual void grads_ready(int unit) = 0;
};

}  // namespace shardtrain
