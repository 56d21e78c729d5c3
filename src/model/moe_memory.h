// Expert parallelism's memory beyond the activation plan (fsdp.expert_parallel = N > 1), for
// `shardtrain plan` and the trainer's fit check (train/memory_fit.h): the buffers of
// model/layers/moe_expert_parallel.h that grow with R, the rows a rank receives in one sparse
// block. Per block whose activations are kept (one set with activation checkpointing: the
// recompute reuses it) the received inputs and the gate, up and activation rows plus two i32
// permutations, R x (C + 3F) x act + 8R bytes; shared by every block the exchange and backward
// scratch, R x (4C + 3F) x act. Dropless routing bounds R by N x tokens x k (every peer's rows
// routed to this rank's experts); balanced routing gives tokens x k.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "model/model_config.h"

namespace shardtrain {

struct ExpertExchangeBytes {
  size_t worst = 0;     // R = N x tokens x k
  size_t balanced = 0;  // R = tokens x k
};

// 0 for a dense model or N = 1. tokens: one micro-batch's on one rank.
ExpertExchangeBytes expert_exchange_bytes(const ModelConfig& config, int64_t tokens,
                                          int expert_parallel, DType activation_dtype,
                                          bool checkpointing);

}  // namespace shardtrain
