// AttentionMask: which keys each query may attend to, the one mask spec every attention kernel
// reads (forward and backward).
//
// Always causal: query t sees keys <= t. window > 0 adds a sliding window: query t sees the
// `window` keys t - window + 1 .. t (transformers' sliding_window: Mistral, Gemma 3's local
// layers). document_start_BT adds document boundaries for packed sequences (data.packing =
// documents, data/batch.h): query t of sequence b sees only keys >= document_start[b, t], the
// position where its document begins. The starts never decrease along a sequence, so a tile
// of queries [q0, q1) and keys [k0, k1) is fully masked when k1 <= document_start[b, q0] (or
// k0 > q1 - 1, the causal skip), and a row needs one compare per key. The three combine:
// query t's keys are max(window start, document start) .. t.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/tensor.h"

namespace shardtrain {

struct AttentionMask {
  int64_t window = 0;  // 0: no window (plain causal)
  // i32 (B, T) on the backend's device; undefined = every sequence is one document.
  Tensor document_start_BT;
  // Gemma's attn_logit_softcapping: each score (q.k * scale) becomes cap * tanh(score / cap)
  // before the mask and the softmax; 0: none. Not a mask, but it is per layer and read by the
  // same kernels, so it travels in the same spec; a kernel that cannot apply it refuses it.
  float logit_softcap = 0;

  static AttentionMask causal() { return {}; }
  // A window that already covers every key of a sequence of seq_len masks nothing, so it is
  // the plain causal mask (and kernels without window support can run it).
  static AttentionMask sliding_window(int64_t window, int64_t seq_len) {
    AttentionMask mask;
    mask.window = window > 0 && window < seq_len ? window : 0;
    return mask;
  }
  bool has_documents() const { return document_start_BT.defined(); }
  bool has_softcap() const { return logit_softcap > 0; }
  bool is_causal_only() const { return window <= 0 && !has_documents(); }
  // The first key query t may attend to by the window alone (its last is t).
  int64_t first_key(int64_t query) const {
    return window > 0 ? std::max<int64_t>(0, query - window + 1) : 0;
  }
  // ... and within its document, which begins at `document_start` (<= query).
  int64_t first_key(int64_t query, int64_t document_start) const {
    return std::max(first_key(query), document_start);
  }
};

}  // namespace shardtrain
