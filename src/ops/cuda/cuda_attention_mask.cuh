// The attention mask (ops/attention_mask.h) as the CUDA kernels read it from AttentionShape
// (cuda_kernels.h): query q of sequence b attends to keys first_key(b, q) .. q, and key k is seen
// by queries k .. query_end(b, k) - 1. Both bounds never decrease (document starts and ends never
// do, and a window slides forward), so a tile of queries [q0, q1) needs keys from first_key(q0)
// only and a tile of keys [k0, k1) is seen by queries before query_end(k1 - 1) only: the kernels
// bound their tile loops with these and mask elements only in the tiles at the bounds.
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

}  // namespace shardtrain::cuda_kernels::attention_mask
