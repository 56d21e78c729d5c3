// DecoderBlock: one transformer block, as its recipe (model/family_table.h BlockRecipe) says:
//   h   = x + attention(input_norm(x))
//   out = h + mlp(post_attention_norm(h))
// or, with sandwich norms (Gemma), each sublayer's output normalised before its residual add:
//   h   = x + post_attention_norm(attention(input_norm(x)))
//   out = h + post_feedforward_norm(mlp(pre_feedforward_norm(h)))
// BlockActivations is what a block saves for backward (with activation checkpointing only its
// input, plus the attention output under selective recompute, and one shared set is recomputed);
// BlockScratch is backward's scratch, shared by every block.
#pragma once

#include "model/family_table.h"
#include "model/layers/activation_plan.h"
#include "model/layers/attention.h"
#include "model/layers/layer_dims.h"
#include "model/layers/mlp.h"
#include "model/layers/moe_mlp.h"
#include "model/layers/rms_norm.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace shardtrain {

struct BlockActivations {
  Tensor x_in_NC;         // block input (residual stream)
  RmsNormSaved norm1;     // input_layernorm output and 1/rms
  AttentionSaved attention;
  Tensor h_NC;            // residual after attention
  RmsNormSaved norm2;     // the MLP's input norm (Gemma: pre_feedforward_layernorm): out, 1/rms
  MlpSaved mlp;
  MoeSaved moe;  // sparse blocks (LayerDims::experts > 0)
  // Sandwich norms: the attention and MLP outputs before their norms, and the norms' 1/rms
  // (their outputs go straight into h_NC and the block output).
  Tensor attn_out_NC, post_attention_rstd_N, mlp_out_NC, post_feedforward_rstd_N;

  static BlockActivations declare(ActivationPlan& plan, ActivationUse use, const LayerDims& d,
                                  bool qk_norm, bool sandwich_norms = false,
                                  bool save_mlp_product = true);
  BlockActivations sized(const LayerDims& d) const;
};

struct BlockScratch {
  Tensor dln_NC;  // d(a norm's output): the MLP's and the attention's input gradient
  AttentionScratch attention;
  MlpScratch mlp;
  Tensor dsublayer_NC;  // sandwich norms: d(a sublayer's output), before its post-norm
  MoeScratch moe;       // sparse blocks

  static BlockScratch declare(ActivationPlan& plan, const LayerDims& d, bool qk_norm,
                              bool sandwich_norms = false, bool mlp_product_saved = true);
  BlockScratch sized(const LayerDims& d) const;
};

// Per micro-batch inputs every block reads.
struct BlockInputs {
  Tensor positions_N;   // rope position of each token (restarting per packed document)
  RopeTablesView rope;  // this block's rope tables
  // i32: where each token's document begins in its sequence; undefined = one document per
  // sequence (data/batch.h document_start_BT).
  Tensor document_start_N;
  MoeAux moe;  // sparse blocks: the load-balancing loss's state
};

class DecoderBlock {
 public:
  // d: the current micro-batch's sizes.
  DecoderBlock(const LayerDims& d, const BlockRecipe& recipe, float norm_eps);

  // a and s sized for d. With reuse_attention (selective recompute), a.attention's attn_NHD and
  // lse_BHT already hold the attention output.
  void forward(Ops& ops, const BlockWeights& w, const BlockInputs& in, const BlockActivations& a,
               const BlockScratch& s, Tensor out_NC, bool reuse_attention = false) const;
  // dresid_NC holds d(out) and becomes d(x). Gradients are added to (accumulate) or overwritten.
  void backward(Ops& ops, const BlockWeights& w, const BlockWeights& grad, bool accumulate,
                const BlockInputs& in, const BlockActivations& a, const BlockScratch& s,
                Tensor dresid_NC) const;

 private:
  void sandwich_backward(Ops& ops, const BlockWeights& w, const BlockWeights& grad,
                         bool accumulate, const BlockInputs& in, const BlockActivations& a,
                         const BlockScratch& s, Tensor dresid_NC) const;

  RmsNorm norm_;
  Attention attention_;
  Mlp mlp_;
  bool sparse_;  // the MLP slot holds moe_ (BlockRecipe::moe)
  MoeMlp moe_;
  bool sandwich_norms_;
};

}  // namespace shardtrain
