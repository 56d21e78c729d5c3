// ActivationPlan: the one declaration of the model's activation memory.
//
// Every layer declares what it saves for backward and the scratch it needs by calling take()
// for each tensor, in a function that depends only on the config and the micro-batch shape.
// DecoderModel::reserve() runs those declarations against its arena (the tensors it computes
// with); DecoderModel::activation_bytes_for (`shardtrain plan`, train/memory_fit) runs the same
// declarations on a counting plan. So memory is counted once, by the code that uses it.
//
// Counting: each tensor costs its bytes plus the arena's alignment (the most padding a take can
// add), so an arena of total() bytes always fits the same takes.
#pragma once

#include <cstddef>

#include "core/tensor.h"
#include "ops/device_buffer.h"

namespace shardtrain {

// What a tensor is for, the categories `shardtrain plan` reports.
enum class ActivationUse {
  kBlockSet,    // a block's saved activations (every block's, or the one recomputed set)
  kCheckpoint,  // what activation checkpointing keeps per block
  kHeadLogits,  // one lm-head chunk of logits
  kScratch,     // backward's gradient buffers, the final norm, the batch, the rest
};

struct ActivationBytes {
  size_t block_sets = 0;   // every block's saved activations (one shared set if checkpointed)
  size_t checkpoints = 0;  // what checkpointing keeps per block (inputs; selective: + attn)
  size_t head_logits = 0;  // one lm-head chunk of logits (rows x vocab)
  size_t scratch = 0;      // backward's gradient buffers, the final norm, the rest
  size_t total() const { return block_sets + checkpoints + head_logits + scratch; }
};

class ActivationPlan {
 public:
  // Counting only: take() returns undefined tensors.
  explicit ActivationPlan(DType activation_dtype) : act_(activation_dtype) {}
  // Taking from `arena` (and counting).
  ActivationPlan(DType activation_dtype, Arena& arena) : act_(activation_dtype), arena_(&arena) {}

  DType activation_dtype() const { return act_; }
  Tensor take(ActivationUse use, DType dtype, Shape shape);
  // A tensor in the activation dtype.
  Tensor take(ActivationUse use, Shape shape) { return take(use, act_, shape); }
  const ActivationBytes& bytes() const { return bytes_; }

 private:
  DType act_;
  Arena* arena_ = nullptr;
  ActivationBytes bytes_;
};

}  // namespace shardtrain
