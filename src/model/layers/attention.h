// Attention: the q/k/v projections (one packed Linear), optional per-head RMSNorm of q and k
// (Qwen3), the rotary embedding (this block's rope tables), grouped-query attention under the
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
#include "model/layers/rms_norm.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace shardtrain {

// Saved for backward, per block.
struct AttentionSaved {
  Tensor q_NHD, k_NKD, v_NKD;  // q and k as attention reads them (after norm and rope)
  Tensor attn_NHD;             // attention output (the o projection's input)
  Tensor lse_BHT;              // fp32 log-sum-exp per query row
  // With q/k norms: q and k as the projection wrote them, and 1/rms per head (fp32).
  Tensor q_raw_NHD, k_raw_NKD, q_rstd_NH, k_rstd_NK;

  static AttentionSaved declare(ActivationPlan& plan, ActivationUse use, const LayerDims& d,
                                bool qk_norm);
  AttentionSaved sized(const LayerDims& d) const;
};

// Scratch shared by every block: the packed projection (forward) and its gradient (backward),
// and the gradients of attention's inputs.
struct AttentionScratch {
  Tensor qkv_NX;  // X = (H + 2K) * D
  Tensor dattn_NHD, dq_NHD, dk_NKD, dv_NKD;
  // With q/k norms: d(q), d(k) before the norm, and all-zero positions (the identity rotation:
  // split q/k/v without rotating, rotate after the norm).
  Tensor dq_raw_NHD, dk_raw_NKD, zero_positions_N;

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
  Shape bthd(int64_t heads) const { return {d_.batch, d_.seq, heads, d_.head_dim}; }
  // The block's mask with this micro-batch's document boundaries.
  AttentionMask mask_for(Tensor document_start_N) const;

  LayerDims d_;
  BlockRecipe recipe_;
  RmsNorm qk_norm_;
  float scale_;
  AttentionMask mask_;
};

}  // namespace shardtrain
