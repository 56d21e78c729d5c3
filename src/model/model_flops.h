// Training FLOPs per token of a Llama-family model, the MFU numerator (bench/RESULTS.md's
// definition, also bench/benchlib.py): 6 x matmul parameters (lm head included, embedding
// lookup excluded) + 6 x layers x seq_len x heads x head_dim (attention scores and values,
// forward and backward). Activation recompute is not counted (MFU, not hardware FLOPs).
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace shardtrain {

double training_flops_per_token(const ModelConfig& config, int64_t seq_len);

}  // namespace shardtrain
