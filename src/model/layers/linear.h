// Linear: the one type every weight matmul of the model goes through (attention and MLP
// projections, the lm head), so what attaches to a weight matmul (LoRA adapters, FP8 scaling)
// attaches here.
//
//   forward:          out_NO = x_NI @ weight_OI^T (+ bias_O)
//   forward_residual: out_NO = x_NI @ weight_OI^T + residual_NO (the add in the GEMM epilogue)
//   backward:         dx_NI = dout_NO @ weight_OI (skipped when dx_NI is undefined);
//                     grad.weight_OI (+ grad.bias_O) = or += dout_NO^T @ x_NI
// A packed q/k/v projection is one Linear over the three weights back to back
// (model/weights.h BlockWeights::qkv_proj).
// With a LoRA adapter (model/layers/lora.h; the base then frozen): the adapters run first and
// write out_NO (and d(x)), and the base GEMM adds its product to it in its epilogue; backward
// also writes the gradients of A and B.
//
// Saved activations: none of its own. Backward reads the input x_NI, which the layer that
// produced it saved (a norm's output, the attention output, the SwiGLU product).
#pragma once

#include "core/tensor.h"
#include "model/layers/lora.h"
#include "ops/ops.h"

namespace shardtrain {

struct Linear {
  Tensor weight_OI;     // (O, I)
  Tensor bias_O;        // (O) or undefined
  bool frozen = false;  // a weight that is not trained: backward runs no weight-gradient GEMM
  LoraAdapter lora{};   // undefined: none (in `grad`: the adapters' gradient views)
  // The GEMMs in FP8 (Ops::linear_*_fp8; train.precision = "fp8", set per block by
  // DecoderModel, which also numbers the linear in fp8_site for delayed scaling). The adapters
  // stay bf16.
  bool fp8 = false;
  Fp8Site fp8_site{};

  void forward(Ops& ops, Tensor x_NI, Tensor out_NO) const;
  // REQUIRES: no bias (the fused epilogue adds the residual only). out_NO may alias residual_NO.
  void forward_residual(Ops& ops, Tensor x_NI, Tensor residual_NO, Tensor out_NO) const;
  // `grad` holds the gradient views of weight_OI and bias_O (unused when frozen) and of the
  // LoRA adapters; they are overwritten, or added to when accumulate_grad (UnitAccess
  // GradBuffer::accumulate). dx_NI is overwritten, or added to when accumulate_dx.
  void backward(Ops& ops, const Linear& grad, bool accumulate_grad, Tensor dout_NO, Tensor x_NI,
                Tensor dx_NI, bool accumulate_dx) const;

 private:
  // out_NO = x_NI @ weight_OI^T (+ bias_O) (+ residual_NO), in FP8 when fp8.
  void base_forward(Ops& ops, Tensor x_NI, Tensor bias_O, Tensor residual_NO, Tensor out_NO) const;
};

}  // namespace shardtrain
