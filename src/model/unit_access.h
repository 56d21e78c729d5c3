// UnitAccess: how the model gets each unit's parameters and hands back its gradients.
//
// The model walks units in a fixed order (forward: root, blocks 0..L-1; backward: blocks
// L-1..0, root) and calls these hooks; it never communicates. The single-process trainer
// implements them with plain buffers; FSDP implements them with all-gather / reduce-scatter
// (and uses the known order to prefetch). Unit indices follow ParamLayout: 0 = root,
// 1 + l = block l.
#pragma once

#include "core/tensor.h"

namespace shardtrain {

class UnitAccess {
 public:
  virtual ~UnitAccess() = default;
  // Full (gathered) flat parameters of `unit`, 1-D, in the backend's activation dtype.
  // Valid until release_params(unit).
  virtual Tensor acquire_params(int unit) = 0;
  virtual void release_params(int unit) = 0;
  // Flat gradient buffer of `unit` (same layout as its params) that backward accumulates into.
  virtual Tensor acquire_grads(int unit) = 0;
  // Backward of `unit` is complete for this micro-batch: its gradients may be reduced.
  virtual void grads_ready(int unit) = 0;
};

}  // namespace shardtrain
