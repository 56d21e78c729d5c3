// Batch: one micro-batch of training sequences, laid out for the model as flat (B, T) arrays.
//
// make_batch() turns examples (input_ids and per-token labels, each seq_len long, and where
// packed documents begin) into the causal-LM form the model consumes:
//   targets[b, t] = labels[b, t + 1]  for t < T - 1,   targets[b, T - 1] = -100 (kIgnoreIndex)
//   targets[b, t] = -100 also where t + 1 begins a document (its first token is never a target)
//   positions[b, t] = t - (start of the document holding t)   (rope restarts per document)
// which is exactly Hugging Face's shifted causal-LM loss with `labels` applied to each document
// alone: the logits at position t predict token t + 1, and the label of a document's first
// token is never a target. target_count is the number of targets that are not kIgnoreIndex
// (the loss denominator).
//
// Document boundaries reach attention as document_start_BT: for every token, the position in
// its sequence where its document begins. A query at t may attend to keys in
// [document_start[t], t] only. The values are non-decreasing along a sequence, so a kernel tile
// of queries [q0, q1) x keys [k0, k1) is fully masked when k1 <= document_start[q0], and a row
// needs one integer compare per key: the representation costs one int32 per token and no search.
// It is empty when every sequence of the batch is one document (the plain causal mask).
#pragma once

#include <cstdint>
#include <vector>

#include "data/dataset.h"

namespace shardtrain {

struct Batch {
  std::vector<int32_t> input_ids;  // (B, T)
  std::vector<int32_t> targets;    // (B, T); kIgnoreIndex where no loss is computed
  std::vector<int32_t> positions;  // (B, T); position of each token within its document
  // (B, T) where each token's document begins in its sequence; empty = one document per sequence.
  std::vector<int32_t> document_start_BT;
  int64_t batch_size = 0;  // B
  int64_t seq_len = 0;     // T
  int64_t target_count = 0;
  int64_t max_documents = 1;  // the most documents any sequence of the batch holds

  bool has_documents() const { return !document_start_BT.empty(); }
};

// REQUIRES: examples non-empty; every example's input_ids and labels have the same length >= 1;
// document_starts increasing inside (0, length).
Batch make_batch(const std::vector<Example>& examples);

}  // namespace shardtrain
