// FP8 memory of a model (train.precision = "fp8"): the bytes the FP8 linears hold besides the
// activations, for `shardtrain plan` and the trainer's fit check (train/memory_fit.h). The CUDA
// backend keeps the FP8 copies of one linear at a time (the largest of a block's q/k/v, o,
// gate, up and down at `tokens` rows: ops/fp8_workspace.h) plus the FP8 GEMM's cuBLASLt
// workspace.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/model_config.h"

namespace shardtrain {

size_t fp8_workspace_bytes(const ModelConfig& config, int64_t tokens);

}  // namespace shardtrain
