#include "model/layers/decoder_block.h"

namespace shardtrain {

BlockActivations BlockActivations::declare(ActivationPlan& plan, ActivationUse use,
                                           const LayerDims& d, bool qk_norm) {
  const int64_t N = d.tokens(), C = d.hidden;
  BlockActivations a;
  a.x_in_NC = plan.take(use, {N, C});
  a.norm1 = RmsNormSaved::declare(plan, use, N, C);
  a.attention = AttentionSaved::declare(plan, use, d, qk_norm);
  a.h_NC = plan.take(use, {N, C});
  a.norm2 = RmsNormSaved::declare(plan, use, N, C);
  a.mlp = MlpSaved::declare(plan, use, d);
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
  return a;
}

BlockScratch BlockScratch::declare(ActivationPlan& plan, const LayerDims& d, bool qk_norm) {
  BlockScratch s;
  s.dln_NC = plan.take(ActivationUse::kScratch, {d.tokens(), d.hidden});
  s.attention = AttentionScratch::declare(plan, d, qk_norm);
  s.mlp = MlpScratch::declare(plan, d);
  return s;
}

BlockScratch BlockScratch::sized(const LayerDims& d) const {
  return BlockScratch{fit(dln_NC, {d.tokens(), d.hidden}), attention.sized(d), mlp.sized(d)};
}

DecoderBlock::DecoderBlock(const LayerDims& d, const BlockRecipe& recipe, float norm_eps)
    : norm_{norm_eps}, attention_(d, recipe, norm_eps) {}

void DecoderBlock::forward(Ops& ops, const BlockWeights& w, const BlockInputs& in,
                           const BlockActivations& a, const BlockScratch& s, Tensor out_NC,
                           bool reuse_attention) const {
  norm_.forward(ops, w.input_norm_C, a.x_in_NC, a.norm1);
  attention_.forward(ops, w.attention, in.positions_N, in.document_start_N, in.rope, a.norm1.out_RC,
                     a.x_in_NC, a.attention, s.attention, a.h_NC, reuse_attention);
  norm_.forward(ops, w.post_attention_norm_C, a.h_NC, a.norm2);
  mlp_.forward(ops, w.mlp, a.norm2.out_RC, a.h_NC, a.mlp, out_NC);
}

void DecoderBlock::backward(Ops& ops, const BlockWeights& w, const BlockWeights& grad,
                            bool accumulate, const BlockInputs& in, const BlockActivations& a,
                            const BlockScratch& s, Tensor dresid_NC) const {
  // MLP: dresid holds d(out) and becomes d(h).
  mlp_.backward(ops, w.mlp, grad.mlp, accumulate, dresid_NC, a.norm2.out_RC, a.mlp, s.mlp,
                s.dln_NC);
  norm_.backward(ops, w.post_attention_norm_C, grad.post_attention_norm_C, accumulate, s.dln_NC,
                 a.h_NC, a.norm2, dresid_NC, true);
  // Attention: dresid becomes d(x).
  attention_.backward(ops, w.attention, grad.attention, accumulate, in.positions_N,
                      in.document_start_N, in.rope, dresid_NC, a.norm1.out_RC, a.attention,
                      s.attention, s.dln_NC);
  norm_.backward(ops, w.input_norm_C, grad.input_norm_C, accumulate, s.dln_NC, a.x_in_NC, a.norm1,
                 dresid_NC, true);
}

}  // namespace shardtrain
