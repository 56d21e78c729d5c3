// train.precision checks against the backend and the model, before anything is allocated:
// "fp8" needs a backend that runs FP8 matmuls (CUDA, compute capability 8.9+; Ops::
// fp8_unsupported_reason), and fp8.keep_bf16_layers must leave at least one block in FP8.
#pragma once

#include <string>

#include "model/model_config.h"
#include "ops/ops.h"
#include "train/train_config.h"

namespace shardtrain {

// Throws Error (exit 2: one line naming the key, why, and what to use instead) when the
// configured precision cannot run here; a no-op for bf16.
void require_precision_supported(const TrainConfig& config, const ModelConfig& model,
                                 const Ops& ops);
// The same with the backend's answer given: `fp8_unsupported_reason` as
// Ops::fp8_unsupported_reason() returns it ("" = FP8 runs).
void require_precision_supported(const TrainConfig& config, const ModelConfig& model,
                                 const std::string& fp8_unsupported_reason);

}  // namespace shardtrain
