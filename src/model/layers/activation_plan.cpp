#include "model/layers/activation_plan.h"

namespace shardtrain {

Tensor ActivationPlan::take(ActivationUse use, DType dtype, Shape shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  const size_t padding = Arena::kAlignment;
  switch (use) {
    case ActivationUse::kBlockSet:
      bytes_.block_sets += bytes + padding;
      break;
    case ActivationUse::kCheckpoint:
      bytes_.checkpoints += bytes + padding;
      break;
    case ActivationUse::kHeadLogits:  // the logits exactly; their padding counts as scratch
      bytes_.head_logits += bytes;
      bytes_.scratch += padding;
      break;
    case ActivationUse::kScratch:
      bytes_.scratch += bytes + padding;
      break;
  }
  return arena_ != nullptr ? arena_->take(dtype, shape) : Tensor();
}

}  // namespace shardtrain
