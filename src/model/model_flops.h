// Training FLOPs per token of a Llama-family model, the MFU numerator (bench/RESULTS.md's
// definition, also bench/benchlib.py): 6 x matmul parameters (lm head included, embedding
// lookup excluded) + 6 x layers x seq_len x heads x head_dim (attention scores and values,
// forward and backward). Activation recompute is not counted (MFU, not hardware FLOPs).
// Mixture-of-experts blocks count active parameters: the router and the k experts each token is
// routed to (not all E).
//
// With LoRA (lora.enabled) the work done is counted, not a full fine-tune's: the frozen base's
// matmuls (lm head included) run forward and the input-gradient GEMM only, 4 x their parameters
// (no weight-gradient GEMM), and each adapter (A (r, I), B (O, r)) 6 x its r (I + O) parameters.
#pragma once

#include <cstdint>

#include "model/lora_config.h"
#include "model/model_config.h"

namespace shardtrain {

double training_flops_per_token(const ModelConfig& config, int64_t seq_len,
                                const LoraConfig& lora = LoraConfig());

}  // namespace shardtrain
