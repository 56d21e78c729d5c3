// The layers' contracts that the next features build on: a frozen Linear runs no weight-gradient
// GEMM and leaves its gradient untouched (LoRA's base weights), and the activation memory the
// model reserves is exactly what the layers declare, q/k-norm tensors and Gemma's sandwich
// norms and soft-capped logits included.
#include <gtest/gtest.h>

#include <vector>

#include "core/host_buffer.h"
#include "model/layers/linear.h"
#include "model/decoder_model.h"
#include "ops/cpu/cpu_ops.h"

namespace shardtrain {
namespace {

HostTensor filled(Shape shape, float first) {
  HostTensor t(DType::kF32, shape);
  for (int64_t i = 0; i < t.tensor.numel(); ++i) t.tensor.f32()[i] = first + 0.01f * (i % 17);
  return t;
}

TEST(LinearTest, FrozenComputesDxAndLeavesTheGradientAlone) {
  CpuOps ops;
  const int64_t N = 3, I = 4, O = 2;
  HostTensor x = filled({N, I}, 0.5f), w = filled({O, I}, -0.3f), b = filled({O}, 0.1f);
  HostTensor dout = filled({N, O}, 0.2f);
  HostTensor dw = filled({O, I}, 7.0f), db = filled({O}, 7.0f);  // sentinels
  HostTensor dx_frozen(DType::kF32, {N, I}), dx(DType::kF32, {N, I});
  const Linear grad{dw.tensor, db.tensor, false};
  Linear frozen{w.tensor, b.tensor, true};
  frozen.backward(ops, grad, /*accumulate_grad=*/false, dout.tensor, x.tensor, dx_frozen.tensor,
                  false);
  for (int64_t i = 0; i < O * I; ++i) EXPECT_EQ(dw.tensor.f32()[i], 7.0f + 0.01f * (i % 17));
  for (int64_t i = 0; i < O; ++i) EXPECT_EQ(db.tensor.f32()[i], 7.0f + 0.01f * (i % 17));

  Linear trained{w.tensor, b.tensor, false};
  trained.backward(ops, grad, false, dout.tensor, x.tensor, dx.tensor, false);
  for (int64_t i = 0; i < N * I; ++i) EXPECT_EQ(dx_frozen.tensor.f32()[i], dx.tensor.f32()[i]);
  // Trained: dW = dout^T x overwrote the sentinel; db = column sums of dout.
  double dw00 = 0, db0 = 0;
  for (int64_t n = 0; n < N; ++n) {
    dw00 += double{dout.tensor.f32()[n * O]} * x.tensor.f32()[n * I];
    db0 += dout.tensor.f32()[n * O];
  }
  EXPECT_NEAR(dw.tensor.f32()[0], dw00, 1e-6);
  EXPECT_NEAR(db.tensor.f32()[0], db0, 1e-6);
}

ModelConfig tiny(const char* model_type) {
  ModelConfig c;
  c.model_type = model_type;
  c.vocab_size = 96;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.max_position_embeddings = 128;
  return c;
}

TEST(ActivationPlanTest, ReservedBytesAreTheDeclaredOnesAndQkNormsKeepNoMoreThanLlama) {
  using Checkpointing = DecoderModel::Checkpointing;
  const int64_t B = 2, T = 24, N = B * T, H = 4, K = 2, D = 32;
  for (Checkpointing mode : {Checkpointing::kNone, Checkpointing::kFull}) {
    for (const char* family : {"llama", "qwen3"}) {
      CpuOps ops;
      DecoderModel model(tiny(family), ops);
      model.set_activation_checkpointing(mode);
      model.reserve(B, T);
      EXPECT_EQ(model.activation_bytes(),
                DecoderModel::activation_bytes_for(tiny(family), B, T, DType::kF32, mode))
          << family;
    }
    const auto llama = DecoderModel::activation_breakdown_for(tiny("llama"), B, T, DType::kF32, mode);
    const auto qwen3 = DecoderModel::activation_breakdown_for(tiny("qwen3"), B, T, DType::kF32, mode);
    // Per stored block, q and k before their norms take the place of the rotated q and k (the
    // backward remakes those from them): the same bytes as Llama's.
    const size_t pad = Arena::kAlignment;
    EXPECT_EQ(qwen3.block_sets, llama.block_sets);
    EXPECT_EQ(qwen3.checkpoints, llama.checkpoints);
    // Scratch: the normed and rotated q and k, made in forward and again in backward.
    EXPECT_EQ(qwen3.scratch - llama.scratch, (N * H * D + N * K * D) * 4 + 2 * pad);
    EXPECT_EQ(qwen3.head_logits, llama.head_logits);
  }
}

// Gemma 3 against Qwen3 (the same attention with q/k norms): per stored block the attention
// and MLP outputs before their post-norms and those norms' 1/rms; one more scratch for
// d(sublayer output); with a final soft cap a second logits chunk of half the rows, so the
// logits' memory stays within the head's budget.
TEST(ActivationPlanTest, GemmaSandwichNormsAndSoftCapAreDeclared) {
  using Checkpointing = DecoderModel::Checkpointing;
  const int64_t B = 2, T = 24, N = B * T, C = 64, L = 3;
  ModelConfig gemma = tiny("gemma3_text");
  gemma.hidden_activation = HiddenActivation::kGeluTanh;
  gemma.layer_types = {LayerAttention::kSliding, LayerAttention::kSliding, LayerAttention::kFull};
  gemma.sliding_window = 8;
  gemma.rope_local.theta = 10000;
  for (Checkpointing mode : {Checkpointing::kNone, Checkpointing::kFull}) {
    for (double cap : {0.0, 30.0}) {
      gemma.final_logit_softcapping = cap;
      CpuOps ops;
      DecoderModel model(gemma, ops);
      model.set_activation_checkpointing(mode);
      model.reserve(B, T);
      EXPECT_EQ(model.activation_bytes(),
                DecoderModel::activation_bytes_for(gemma, B, T, DType::kF32, mode));
    }
    const size_t pad = Arena::kAlignment;
    const int64_t stored_blocks = mode == Checkpointing::kNone ? L : 1;
    gemma.final_logit_softcapping = 0;
    const auto qwen3 =
        DecoderModel::activation_breakdown_for(tiny("qwen3"), B, T, DType::kF32, mode);
    const auto plain = DecoderModel::activation_breakdown_for(gemma, B, T, DType::kF32, mode);
    EXPECT_EQ(plain.block_sets - qwen3.block_sets,
              stored_blocks * ((2 * N * C + 2 * N) * 4 + 4 * pad));
    EXPECT_EQ(plain.scratch - qwen3.scratch, N * C * 4 + pad);
    EXPECT_EQ(plain.head_logits, qwen3.head_logits);
    // A budget of 1024 logits: 10 rows of the 96-token vocabulary, 5 rows per chunk when capped.
    const auto uncapped =
        DecoderModel::activation_breakdown_for(gemma, B, T, DType::kF32, mode, 1024);
    gemma.final_logit_softcapping = 30;
    const auto capped =
        DecoderModel::activation_breakdown_for(gemma, B, T, DType::kF32, mode, 1024);
    EXPECT_EQ(uncapped.head_logits, 10u * 96 * 4);
    EXPECT_EQ(capped.head_logits, 2u * 5 * 96 * 4);
  }
}

}  // namespace
}  // namespace shardtrain
