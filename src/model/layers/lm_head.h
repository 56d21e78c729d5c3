// LmHead: the final norm, the lm head (a Linear over the vocabulary, the embedding table when
// tied) and the cross-entropy loss, run over chunks of token rows so full logits never exist.
//
// With a final soft cap (Gemma's final_logit_softcapping) the logits are cap * tanh(head / cap)
// and the loss is taken on them.
//
// Scratch (HeadScratch, declared once): the final norm's output and 1/rms, d(its output), and one
// chunk of logits (rows x vocab), which cross-entropy overwrites with its gradient; with a soft
// cap a second chunk holds the capped logits (backward needs the head's output as well), so
// the model halves the chunk rows to keep the logits' memory.
#pragma once

#include <cstdint>

#include "model/layers/activation_plan.h"
#include "model/layers/layer_dims.h"
#include "model/layers/rms_norm.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace shardtrain {

// Logit rows per chunk of the lm head for `tokens` rows: at most max_logits / vocab rows (at
// least one), split evenly over the chunks and rounded up to a multiple of 128 (GEMM tiles).
int64_t head_chunk_rows(int64_t tokens, int64_t vocab, int64_t max_logits);

struct HeadScratch {
  RmsNormSaved final_norm;  // (N, C) and (N)
  Tensor dxf_NC;            // d(final norm output)
  Tensor logits_RV;         // one chunk: R = chunk rows
  Tensor capped_RV;         // with a soft cap: the capped chunk, then its gradient

  static HeadScratch declare(ActivationPlan& plan, const LayerDims& d, int64_t chunk_rows,
                             bool softcap = false);
};

class LmHead {
 public:
  // d: the current micro-batch's sizes.
  // final_softcap: 0 for none; one_plus_norm_weight: the final norm scales by 1 + weight.
  LmHead(const LayerDims& d, int64_t chunk_rows, float norm_eps, bool one_plus_norm_weight = false,
         float final_softcap = 0)
      : d_(d),
        chunk_rows_(chunk_rows),
        norm_{norm_eps, one_plus_norm_weight},
        final_softcap_(final_softcap) {}

  // Final norm of last_NC, head and loss. loss_sum_1 (when defined) += summed cross-entropy;
  // logits_host_NV (when non-null) receives the logits. With grads (non-null): d(last_NC) goes
  // to dlast_NC (overwritten) and the head and final-norm gradients are added to
  // (accumulate_grads) or overwritten, each target's scaled by grad_scale.
  void run(Ops& ops, const RootWeights& root, const RootWeights* grads, bool accumulate_grads,
           float grad_scale, Tensor last_NC, Tensor targets_N, const HeadScratch& scratch,
           Tensor loss_sum_1, float* logits_host_NV, Tensor dlast_NC) const;
  // The logits of each sequence's last position only (B rows of V), for generation.
  void last_logits(Ops& ops, const RootWeights& root, Tensor last_NC, const HeadScratch& scratch,
                   float* logits_host_BV) const;

 private:
  LayerDims d_;
  int64_t chunk_rows_;
  RmsNorm norm_;
  float final_softcap_;
};

// Copies device logits (any float dtype) to fp32 host memory.
void copy_logits_to_host(Ops& ops, Tensor logits, float* host);

}  // namespace shardtrain
