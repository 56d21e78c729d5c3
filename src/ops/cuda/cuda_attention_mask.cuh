// The attention mask (ops/attention_mask.h) as the CUDA kernels read it from AttentionShape
// (cuda_kernels.h): query q of sequence b attends to keys first_key(b, q) .. q, and key k is seen
// by queries k .. query_end(b, k) - 1. Both bounds never decrease (document starts and ends never
// do, and a window slides forward), so a tile of queries [q0, q1) needs keys from first_key(q0)
// only and a tile of keys [k0, k1) is seen by queries before query_end(k1 - 1) only: the kernels
// bound their tile loops with these and mask elements only in the tiles at the bounds. The soft
// cap (AttentionShape::logit_softcap) is read here too: soft_capped and its slope.
// Internal to ops/cuda (.cu files only).
#pragma once

#include <cstdint>

#include "ops/cuda/cuda_kernels.h"

namespace shardtrain::cuda_kernels::attention_mask {

// Causal only: no window, no documents (the kernels' bounds and masks reduce to the causal ones).
__host__ __device__ __forceinline__ bool causal_only(const AttentionShape& s) {
  return s.window <= 0 && s.document_start_BT == nullptr;
}

// The first key query `query` of sequence b may attend to. Queries at or past seq (padding rows
// of the last tile) read as the last real query.
__device__ __forceinline__ int first_key(const AttentionShape& s, int b, int query) {
  query = min(query, s.seq - 1);
  int first = s.window > 0 ? max(0, query - s.window + 1) : 0;
  if (s.document_start_BT != nullptr) {
    first = max(first, __ldg(s.document_start_BT + int64_t{b} * s.seq + query));
  }
  return first;
}

// One past the last query that may attend to key `key` of sequence b (keys at or past seq read
// as the last real key). REQUIRES: document_end_BT set when document_start_BT is.
__device__ __forceinline__ int query_end(const AttentionShape& s, int b, int key) {
  key = min(key, s.seq - 1);
  int end = s.seq;
  if (s.window > 0) end = min(end, key + s.window);
  if (s.document_end_BT != nullptr) {
    end = min(end, __ldg(s.document_end_BT + int64_t{b} * s.seq + key));
  }
  return end;
}

// Gemma's soft cap on a scaled score: cap * tanh(score / cap) when s.logit_softcap > 0, else the
// score itself. Every kernel that applies the cap calls this, forward and backward, so the
// backward's probabilities are the forward's.
__device__ __forceinline__ float soft_capped(const AttentionShape& s, float score) {
  return s.logit_softcap > 0 ? s.logit_softcap * tanhf(score / s.logit_softcap) : score;
}

// d soft_capped / d score, from the capped score c: 1 - tanh^2 = 1 - (c / cap)^2 (1 uncapped).
// The backward multiplies the gradient of the capped score by it.
__device__ __forceinline__ float soft_cap_slope(const AttentionShape& s, float capped) {
  if (s.logit_softcap <= 0) return 1.0f;
  const float tanh_value = capped / s.logit_softcap;
  return 1.0f - tanh_value * tanh_value;
}

}  // namespace shardtrain::cuda_kernels::attention_mask
