// Attention: the q/k/v projections (one packed Linear), optional per-head RMSNorm of q and k
// (Qwen3, Gemma 3: fused with the split and the rotation, Ops::split_qkv_norm_rope), the rotary
// embedding (this block's rope tables), grouped-query attention under the
// block's mask (ops/attention_mask.h: causal, optionally a sliding window, and the micro-batch's
// packed documents when document_start_N is defined) and the output projection with the
// residual add in its epilogue:
//   out = residual + o(attn(rope(norm_q(q(x))), rope(norm_k(k(x))), v(x)))
// (out = o(...) without a residual: Gemma normalises it first). The scale is the recipe's
// (Gemma: query_pre_attn_scalar^-1/2) or head_dim^-1/2; scores are soft-capped when the
// recipe says so (AttentionMask::logit_softcap).
// Backward writes d(x) into dx_NC (overwritten) and the weights' gradients (overwritten or
// added to, as `accumulate` says); dout_NC is read only.
#pragma once

#include <cstdint>

#include "model/family_table.h"
#include "model/layers/activation_plan.h"
#include "model/layers/layer_dims.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace shardtrain {

// Saved for backward, per block.
struct AttentionSaved {
  // q and k as attention reads them (rotated); undefined with q/k norms, whose backward remakes
  // them in AttentionScratch from q_raw and k_raw (Ops::qk_norm_rope) instead of keeping both.
  Tensor q_NHD, k_NKD;
  Tensor v_NKD;
  Tensor attn_NHD;  // attention output (the o projection's input)
  Tensor lse_BHT;   // fp32 log-sum-exp per query row
  // With q/k norms: q and k as the projection wrote them (before the norm).
  Tensor q_raw_NHD, k_raw_NKD;

  static AttentionSaved declare(ActivationPlan& plan, ActivationUse use, const LayerDims& d,
                                bool qk_norm);
  AttentionSaved sized(const LayerDims& d) const;
};

// Scratch shared by every block: the packed projection (forward) and its gradient (backward),
// and the gradients of attention's inputs.
struct AttentionScratch {
  Tensor qkv_NX;  // X = (H + 2K) * D
  Tensor dattn_NHD, dq_NHD, dk_NKD, dv_NKD;
  // With q/k norms: q and k as attention reads them (normed and rotated), made by the forward
  // and made again by the backward.
  Tensor q_NHD, k_NKD;

  static AttentionScratch declare(ActivationPlan& plan, const LayerDims& d, bool qk_norm);
  AttentionScratch sized(const LayerDims& d) const;
};

struct RopeTablesView {
  Tensor cos_PR, sin_PR;  // fp32 (positions, D/2), model/rope.h
};

class Attention {
 public:
  // d: the current micro-batch's sizes.
  Attention(const LayerDims& d, const BlockRecipe& recipe, float norm_eps);

  // With reuse_attention (selective recompute), saved.attn_NHD and saved.lse_BHT already hold
  // the attention output and attention is not run again.
  // document_start_N (i32): where each token's document begins in its sequence (data/batch.h);
  // undefined = every sequence is one document.
  void forward(Ops& ops, const AttentionWeights& w, Tensor positions_N, Tensor document_start_N,
               const RopeTablesView& rope, Tensor x_NC, Tensor residual_NC,
               const AttentionSaved& saved, const AttentionScratch& scratch, Tensor out_NC,
               bool reuse_attention) const;
  void backward(Ops& ops, const AttentionWeights& w, const AttentionWeights& grad, bool accumulate,
                Tensor positions_N, Tensor document_start_N, const RopeTablesView& rope,
                Tensor dout_NC, Tensor x_NC, const AttentionSaved& saved,
                const AttentionScratch& scratch, Tensor dx_NC) const;

 private:
  void project(Ops& ops, const AttentionWeights& w, Tensor positions_N, const RopeTablesView& rope,
               Tensor x_NC, const AttentionSaved& saved, const AttentionScratch& scratch) const;
  // The q/k norms' weights and settings (recipe qk_norm).
  QkNorm qk_norm(const AttentionWeights& w) const {
    return QkNorm{w.q_norm_D, w.k_norm_D, norm_eps_, recipe_.one_plus_norm_weights};
  }
  // Attention's q and k inputs: saved, or in scratch with q/k norms.
  Tensor rotated_q(const AttentionSaved& saved, const AttentionScratch& scratch) const {
    return recipe_.qk_norm ? scratch.q_NHD : saved.q_NHD;
  }
  Tensor rotated_k(const AttentionSaved& saved, const AttentionScratch& scratch) const {
    return recipe_.qk_norm ? scratch.k_NKD : saved.k_NKD;
  }
  Shape bthd(int64_t heads) const { return {d_.batch, d_.seq, heads, d_.head_dim}; }
  // The block's mask with this micro-batch's document boundaries.
  AttentionMask mask_for(Tensor document_start_N) const;

  LayerDims d_;
  BlockRecipe recipe_;
  float norm_eps_;
  float scale_;
  AttentionMask mask_;
};

}  // namespace shardtrain
