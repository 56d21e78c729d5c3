// Batch: one micro-batch of training sequences, laid out for the model as flat (B, T) arrays.
//
// make_batch() turns examples (input_ids and per-token labels, each seq_len long) into the
// causal-LM form the model consumes:
//   targets[b, t] = labels[b, t + 1]  for t < T - 1,   targets[b, T - 1] = -100 (kIgnoreIndex)
//   positions[b, t] = t
// which is exactly Hugging Face's shifted causal-LM loss with `labels`: the logits at position t
// predict token t + 1, and the label of a sequence's first token is never a target.
// target_count is the number of targets that are not kIgnoreIndex (the loss denominator).
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"

namespace shardtrain {

struct Batch {
  std::vector<int32_t> input_ids;  // (B, T)
  std::vector<int32_t> targets;    // (B, T); kIgnoreIndex where no loss is computed
  std::vector<int32_t> positions;  // (B, T); position of each token within its sequence
  int64_t batch_size = 0;          // B
  int64_t seq_len = 0;             // T
  int64_t target_count = 0;
};

// REQUIRES: examples non-empty; every example's input_ids and labels have the same length >= 1.
Batch make_batch(const std::vector<Example>& examples);

}  // namespace shardtrain
