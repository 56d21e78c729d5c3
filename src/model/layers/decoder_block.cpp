#include "model/layers/decoder_block.h"

namespace shardtrain {

BlockActivations BlockActivations::declare(ActivationPlan& plan, ActivationUse use,
                                           const LayerDims& d, bool qk_norm, bool sandwich_norms,
                                           bool save_mlp_product) {
  const int64_t N = d.tokens(), C = d.hidden;
  BlockActivations a;
  a.x_in_NC = plan.take(use, {N, C});
  a.norm1 = RmsNormSaved::declare(plan, use, N, C);
  a.attention = AttentionSaved::declare(plan, use, d, qk_norm);
  a.h_NC = plan.take(use, {N, C});
  a.norm2 = RmsNormSaved::declare(plan, use, N, C);
  a.mlp = MlpSaved::declare(plan, use, d, save_mlp_product);
  a.moe = MoeSaved::declare(plan, use, d);
  if (sandwich_norms) {
    a.attn_out_NC = plan.take(use, {N, C});
    a.post_attention_rstd_N = plan.take(use, DType::kF32, {N});
    a.mlp_out_NC = plan.take(use, {N, C});
    a.post_feedforward_rstd_N = plan.take(use, DType::kF32, {N});
  }
  return a;
}

BlockActivations BlockActivations::sized(const LayerDims& d) const {
  const int64_t N = d.tokens(), C = d.hidden;
  BlockActivations a;
  a.x_in_NC = fit(x_in_NC, {N, C});
  a.norm1 = norm1.sized(N, C);
  a.attention = attention.sized(d);
  a.h_NC = fit(h_NC, {N, C});
  a.norm2 = norm2.sized(N, C);
  a.mlp = mlp.sized(d);
  a.moe = moe.sized(d);
  if (attn_out_NC.defined()) {
    a.attn_out_NC = fit(attn_out_NC, {N, C});
    a.post_attention_rstd_N = fit(post_attention_rstd_N, {N});
    a.mlp_out_NC = fit(mlp_out_NC, {N, C});
    a.post_feedforward_rstd_N = fit(post_feedforward_rstd_N, {N});
  }
  return a;
}

BlockScratch BlockScratch::declare(ActivationPlan& plan, const LayerDims& d, bool qk_norm,
                                   bool sandwich_norms, bool mlp_product_saved) {
  BlockScratch s;
  s.dln_NC = plan.take(ActivationUse::kScratch, {d.tokens(), d.hidden});
  s.attention = AttentionScratch::declare(plan, d, qk_norm);
  s.mlp = MlpScratch::declare(plan, d, mlp_product_saved);
  s.moe = MoeScratch::declare(plan, d);
  if (sandwich_norms) s.dsublayer_NC = plan.take(ActivationUse::kScratch, {d.tokens(), d.hidden});
  return s;
}

BlockScratch BlockScratch::sized(const LayerDims& d) const {
  const Shape NC{d.tokens(), d.hidden};
  return BlockScratch{fit(dln_NC, NC), attention.sized(d), mlp.sized(d),
                      dsublayer_NC.defined() ? fit(dsublayer_NC, NC) : Tensor(), moe.sized(d)};
}

DecoderBlock::DecoderBlock(const LayerDims& d, const BlockRecipe& recipe, float norm_eps)
    : norm_{norm_eps, recipe.one_plus_norm_weights},
      attention_(d, recipe, norm_eps),
      mlp_{recipe.activation},
      sparse_(recipe.moe),
      moe_{recipe.moe_renormalize},
      sandwich_norms_(recipe.sandwich_norms) {}

void DecoderBlock::forward(Ops& ops, const BlockWeights& w, const BlockInputs& in,
                           const BlockActivations& a, const BlockScratch& s, Tensor out_NC,
                           bool reuse_attention) const {
  norm_.forward(ops, w.input_norm_C, a.x_in_NC, a.norm1);
  if (sandwich_norms_) {
    // h = x + post_attention_norm(attention): the norm writes h, then the residual is added.
    attention_.forward(ops, w.attention, in.positions_N, in.document_start_N, in.rope,
                       a.norm1.out_RC, Tensor(), a.attention, s.attention, a.attn_out_NC,
                       reuse_attention);
    norm_.forward(ops, w.post_attention_norm_C, a.attn_out_NC,
                  RmsNormSaved{a.h_NC, a.post_attention_rstd_N});
    ops.add(a.h_NC, a.h_NC, a.x_in_NC);
    norm_.forward(ops, w.pre_feedforward_norm_C, a.h_NC, a.norm2);
    mlp_.forward(ops, w.mlp, a.norm2.out_RC, Tensor(), a.mlp, s.mlp, a.mlp_out_NC);
    norm_.forward(ops, w.post_feedforward_norm_C, a.mlp_out_NC,
                  RmsNormSaved{out_NC, a.post_feedforward_rstd_N});
    ops.add(out_NC, out_NC, a.h_NC);
    return;
  }
  attention_.forward(ops, w.attention, in.positions_N, in.document_start_N, in.rope, a.norm1.out_RC,
                     a.x_in_NC, a.attention, s.attention, a.h_NC, reuse_attention);
  norm_.forward(ops, w.post_attention_norm_C, a.h_NC, a.norm2);
  if (sparse_) {
    moe_.forward(ops, w.moe, a.norm2.out_RC, a.h_NC, a.moe, s.moe, in.moe, out_NC);
  } else {
    mlp_.forward(ops, w.mlp, a.norm2.out_RC, a.h_NC, a.mlp, s.mlp, out_NC);
  }
}

void DecoderBlock::backward(Ops& ops, const BlockWeights& w, const BlockWeights& grad,
                            bool accumulate, const BlockInputs& in, const BlockActivations& a,
                            const BlockScratch& s, Tensor dresid_NC) const {
  if (sandwich_norms_) {
    sandwich_backward(ops, w, grad, accumulate, in, a, s, dresid_NC);
    return;
  }
  // MLP: dresid holds d(out) and becomes d(h).
  if (sparse_) {
    moe_.backward(ops, w.moe, grad.moe, accumulate, dresid_NC, a.norm2.out_RC, a.moe, s.moe,
                  in.moe, s.dln_NC);
  } else {
    mlp_.backward(ops, w.mlp, grad.mlp, accumulate, dresid_NC, a.norm2.out_RC, a.mlp, s.mlp,
                  s.dln_NC);
  }
  norm_.backward(ops, w.post_attention_norm_C, grad.post_attention_norm_C, accumulate, s.dln_NC,
                 a.h_NC, a.norm2, dresid_NC, true);
  // Attention: dresid becomes d(x).
  attention_.backward(ops, w.attention, grad.attention, accumulate, in.positions_N,
                      in.document_start_N, in.rope, dresid_NC, a.norm1.out_RC, a.attention,
                      s.attention, s.dln_NC);
  norm_.backward(ops, w.input_norm_C, grad.input_norm_C, accumulate, s.dln_NC, a.x_in_NC, a.norm1,
                 dresid_NC, true);
}

void DecoderBlock::sandwich_backward(Ops& ops, const BlockWeights& w, const BlockWeights& grad,
                                     bool accumulate, const BlockInputs& in,
                                     const BlockActivations& a, const BlockScratch& s,
                                     Tensor dresid_NC) const {
  // MLP: dresid holds d(out) and becomes d(h); d(mlp output) goes through its post-norm.
  norm_.backward(ops, w.post_feedforward_norm_C, grad.post_feedforward_norm_C, accumulate,
                 dresid_NC, a.mlp_out_NC, RmsNormSaved{Tensor(), a.post_feedforward_rstd_N},
                 s.dsublayer_NC, false);
  mlp_.backward(ops, w.mlp, grad.mlp, accumulate, s.dsublayer_NC, a.norm2.out_RC, a.mlp, s.mlp,
                s.dln_NC);
  norm_.backward(ops, w.pre_feedforward_norm_C, grad.pre_feedforward_norm_C, accumulate, s.dln_NC,
                 a.h_NC, a.norm2, dresid_NC, true);
  // Attention: dresid becomes d(x).
  norm_.backward(ops, w.post_attention_norm_C, grad.post_attention_norm_C, accumulate, dresid_NC,
                 a.attn_out_NC, RmsNormSaved{Tensor(), a.post_attention_rstd_N}, s.dsublayer_NC,
                 false);
  attention_.backward(ops, w.attention, grad.attention, accumulate, in.positions_N,
                      in.document_start_N, in.rope, s.dsublayer_NC, a.norm1.out_RC, a.attention,
                      s.attention, s.dln_NC);
  norm_.backward(ops, w.input_norm_C, grad.input_norm_C, accumulate, s.dln_NC, a.x_in_NC, a.norm1,
                 dresid_NC, true);
}

}  // namespace shardtrain
