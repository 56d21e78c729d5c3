// The layers' contracts that the next features build on: a frozen Linear runs no weight-gradient
// GEMM and leaves its gradient untouched (LoRA's base weights), and the activation memory the
// model reserves is exactly what the layers declare, q/k-norm tensors included.
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

TEST(ActivationPlanTest, ReservedBytesAreTheDeclaredOnesWithQkNormTensorsCountedOnce) {
  using Checkpointing = DecoderModel::Checkpointing;
  const int64_t B = 2, T = 24, N = B * T, L = 3, H = 4, K = 2, D = 32;
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
    // Per stored block: q and k before their norms, and 1/rms per head; each tensor padded once.
    const size_t pad = Arena::kAlignment;
    const size_t per_block = (N * H * D + N * K * D) * 4 + (N * H + N * K) * 4 + 4 * pad;
    const int64_t stored_blocks = mode == Checkpointing::kNone ? L : 1;
    EXPECT_EQ(qwen3.block_sets - llama.block_sets, stored_blocks * per_block);
    EXPECT_EQ(qwen3.checkpoints, llama.checkpoints);
    // Scratch: d(q), d(k) before the norms, and the all-zero positions.
    EXPECT_EQ(qwen3.scratch - llama.scratch, (N * H * D + N * K * D) * 4 + N * 4 + 3 * pad);
    EXPECT_EQ(qwen3.head_logits, llama.head_logits);
  }
}

}  // namespace
}  // namespace shardtrain
