#include "model/layers/attention.h"

#include <cmath>

namespace shardtrain {

AttentionSaved AttentionSaved::declare(ActivationPlan& plan, ActivationUse use, const LayerDims& d,
                                       bool qk_norm) {
  const int64_t N = d.tokens();
  AttentionSaved s;
  if (qk_norm) {
    s.q_raw_NHD = plan.take(use, {N, d.q_width()});
    s.k_raw_NKD = plan.take(use, {N, d.kv_width()});
  } else {
    s.q_NHD = plan.take(use, {N, d.q_width()});
    s.k_NKD = plan.take(use, {N, d.kv_width()});
  }
  s.v_NKD = plan.take(use, {N, d.kv_width()});
  s.attn_NHD = plan.take(use, {N, d.q_width()});
  s.lse_BHT = plan.take(use, DType::kF32, {d.batch, d.heads, d.seq});
  return s;
}

AttentionSaved AttentionSaved::sized(const LayerDims& d) const {
  const int64_t N = d.tokens();
  AttentionSaved s;
  if (q_raw_NHD.defined()) {
    s.q_raw_NHD = fit(q_raw_NHD, {N, d.q_width()});
    s.k_raw_NKD = fit(k_raw_NKD, {N, d.kv_width()});
  } else {
    s.q_NHD = fit(q_NHD, {N, d.q_width()});
    s.k_NKD = fit(k_NKD, {N, d.kv_width()});
  }
  s.v_NKD = fit(v_NKD, {N, d.kv_width()});
  s.attn_NHD = fit(attn_NHD, {N, d.q_width()});
  s.lse_BHT = fit(lse_BHT, {d.batch, d.heads, d.seq});
  return s;
}

AttentionScratch AttentionScratch::declare(ActivationPlan& plan, const LayerDims& d, bool qk_norm) {
  const int64_t N = d.tokens();
  const ActivationUse use = ActivationUse::kScratch;
  AttentionScratch s;
  s.dattn_NHD = plan.take(use, {N, d.q_width()});
  s.dq_NHD = plan.take(use, {N, d.q_width()});
  s.dk_NKD = plan.take(use, {N, d.kv_width()});
  s.dv_NKD = plan.take(use, {N, d.kv_width()});
  s.qkv_NX = plan.take(use, {N, d.q_width() + 2 * d.kv_width()});
  if (qk_norm) {
    s.q_NHD = plan.take(use, {N, d.q_width()});
    s.k_NKD = plan.take(use, {N, d.kv_width()});
  }
  return s;
}

AttentionScratch AttentionScratch::sized(const LayerDims& d) const {
  const int64_t N = d.tokens();
  AttentionScratch s;
  s.qkv_NX = fit(qkv_NX, {N, d.q_width() + 2 * d.kv_width()});
  s.dattn_NHD = fit(dattn_NHD, {N, d.q_width()});
  s.dq_NHD = fit(dq_NHD, {N, d.q_width()});
  s.dk_NKD = fit(dk_NKD, {N, d.kv_width()});
  s.dv_NKD = fit(dv_NKD, {N, d.kv_width()});
  if (q_NHD.defined()) {
    s.q_NHD = fit(q_NHD, {N, d.q_width()});
    s.k_NKD = fit(k_NKD, {N, d.kv_width()});
  }
  return s;
}

Attention::Attention(const LayerDims& d, const BlockRecipe& recipe, float norm_eps)
    : d_(d),
      recipe_(recipe),
      norm_eps_(norm_eps),
      scale_(recipe.attention_scale > 0 ? static_cast<float>(recipe.attention_scale)
                                        : 1.0f / std::sqrt(static_cast<float>(d.head_dim))),
      mask_(AttentionMask::sliding_window(recipe.sliding_window, d.seq)) {
  mask_.logit_softcap = static_cast<float>(recipe.attn_logit_softcap);
}

// q, k, v of x: v into saved; q and k normed (q/k norms) and rotated where attention reads them.
void Attention::project(Ops& ops, const AttentionWeights& w, Tensor positions_N,
                        const RopeTablesView& rope, Tensor x_NC, const AttentionSaved& saved,
                        const AttentionScratch& scratch) const {
  const int64_t N = d_.tokens(), H = d_.heads, K = d_.kv_heads, D = d_.head_dim;
  // One GEMM for q, k and v (packed weights), then one pass splits them, normalising (q/k
  // norms) and rotating q and k.
  w.qkv.forward(ops, x_NC, scratch.qkv_NX);
  if (!recipe_.qk_norm) {
    ops.split_qkv_rope(scratch.qkv_NX, positions_N, rope.cos_PR, rope.sin_PR,
                       saved.q_NHD.reshaped({N, H, D}), saved.k_NKD.reshaped({N, K, D}),
                       saved.v_NKD.reshaped({N, K, D}));
    return;
  }
  ops.split_qkv_norm_rope(scratch.qkv_NX, qk_norm(w), positions_N, rope.cos_PR, rope.sin_PR,
                          saved.q_raw_NHD.reshaped({N, H, D}), saved.k_raw_NKD.reshaped({N, K, D}),
                          saved.v_NKD.reshaped({N, K, D}), scratch.q_NHD.reshaped({N, H, D}),
                          scratch.k_NKD.reshaped({N, K, D}));
}

AttentionMask Attention::mask_for(Tensor document_start_N) const {
  AttentionMask mask = mask_;
  if (document_start_N.defined()) {
    mask.document_start_BT = document_start_N.reshaped({d_.batch, d_.seq});
  }
  return mask;
}

void Attention::forward(Ops& ops, const AttentionWeights& w, Tensor positions_N,
                        Tensor document_start_N, const RopeTablesView& rope, Tensor x_NC,
                        Tensor residual_NC, const AttentionSaved& saved,
                        const AttentionScratch& scratch, Tensor out_NC,
                        bool reuse_attention) const {
  project(ops, w, positions_N, rope, x_NC, saved, scratch);
  if (!reuse_attention) {
    ops.attention_forward(rotated_q(saved, scratch).reshaped(bthd(d_.heads)),
                          rotated_k(saved, scratch).reshaped(bthd(d_.kv_heads)),
                          saved.v_NKD.reshaped(bthd(d_.kv_heads)), scale_,
                          saved.attn_NHD.reshaped(bthd(d_.heads)), saved.lse_BHT,
                          mask_for(document_start_N));
  }
  if (!residual_NC.defined()) {  // Gemma: the output is normalised before its residual add
    w.o.forward(ops, saved.attn_NHD, out_NC);
    return;
  }
  w.o.forward_residual(ops, saved.attn_NHD, residual_NC, out_NC);  // out = residual + o(attn)
}

void Attention::backward(Ops& ops, const AttentionWeights& w, const AttentionWeights& grad,
                         bool accumulate, Tensor positions_N, Tensor document_start_N,
                         const RopeTablesView& rope, Tensor dout_NC, Tensor x_NC,
                         const AttentionSaved& saved, const AttentionScratch& scratch,
                         Tensor dx_NC) const {
  const int64_t N = d_.tokens(), H = d_.heads, K = d_.kv_heads, D = d_.head_dim;
  const AttentionScratch& s = scratch;
  if (recipe_.qk_norm) {  // attention's q and k again, from the saved projections
    ops.qk_norm_rope(saved.q_raw_NHD.reshaped({N, H, D}), saved.k_raw_NKD.reshaped({N, K, D}),
                     qk_norm(w), positions_N, rope.cos_PR, rope.sin_PR, s.q_NHD.reshaped({N, H, D}),
                     s.k_NKD.reshaped({N, K, D}));
  }
  w.o.backward(ops, grad.o, accumulate, dout_NC, saved.attn_NHD, s.dattn_NHD, false);
  ops.attention_backward(s.dattn_NHD.reshaped(bthd(H)), rotated_q(saved, s).reshaped(bthd(H)),
                         rotated_k(saved, s).reshaped(bthd(K)), saved.v_NKD.reshaped(bthd(K)),
                         saved.attn_NHD.reshaped(bthd(H)), saved.lse_BHT, scale_,
                         s.dq_NHD.reshaped(bthd(H)), s.dk_NKD.reshaped(bthd(K)),
                         s.dv_NKD.reshaped(bthd(K)), mask_for(document_start_N));
  const Tensor dqkv_NX = s.qkv_NX;
  if (!recipe_.qk_norm) {
    ops.pack_qkv_rope_backward(s.dq_NHD.reshaped({N, H, D}), s.dk_NKD.reshaped({N, K, D}),
                               s.dv_NKD.reshaped({N, K, D}), positions_N, rope.cos_PR, rope.sin_PR,
                               dqkv_NX);
  } else {
    ops.pack_qkv_norm_rope_backward(
        s.dq_NHD.reshaped({N, H, D}), s.dk_NKD.reshaped({N, K, D}), s.dv_NKD.reshaped({N, K, D}),
        saved.q_raw_NHD.reshaped({N, H, D}), saved.k_raw_NKD.reshaped({N, K, D}), qk_norm(w),
        positions_N, rope.cos_PR, rope.sin_PR, grad.q_norm_D, grad.k_norm_D, accumulate, dqkv_NX);
  }
  w.qkv.backward(ops, grad.qkv, accumulate, dqkv_NX, x_NC, dx_NC, false);
}

}  // namespace shardtrain
