// RmsNorm: out = x / sqrt(mean(x^2) + eps) * weight over the last dimension (HF Llama / Qwen:
// normalised in fp32), or * (1 + weight) with one_plus_weight (Gemma: Ops::rmsnorm1p_*), on
// rows of C channels: the block norms (C = hidden) and the per-head q/k norms (rows = tokens x
// heads, C = head_dim).
//
// Saved activations (RmsNormSaved): the output (the next layer's input, which its backward
// reads) and 1/rms per row; backward also reads the input x, which the layer before saved.
#pragma once

#include <cstdint>

#include "model/layers/activation_plan.h"
#include "ops/ops.h"

namespace shardtrain {

struct RmsNormSaved {
  Tensor out_RC;  // (rows, C) in the activation dtype
  Tensor rstd_R;  // (rows) fp32

  static RmsNormSaved declare(ActivationPlan& plan, ActivationUse use, int64_t rows, int64_t C);
  // The views for `rows` rows (<= the declared ones).
  RmsNormSaved sized(int64_t rows, int64_t C) const;
};

struct RmsNorm {
  float eps = 1e-6f;
  bool one_plus_weight = false;  // scale by 1 + weight (the weight stores the offset from 1)

  void forward(Ops& ops, Tensor weight_C, Tensor x_RC, const RmsNormSaved& saved) const;
  // dx_RC overwritten (or added to when accumulate_dx); dweight_C overwritten (or added to when
  // accumulate_dweight).
  void backward(Ops& ops, Tensor weight_C, Tensor dweight_C, bool accumulate_dweight,
                Tensor dout_RC, Tensor x_RC, const RmsNormSaved& saved, Tensor dx_RC,
                bool accumulate_dx) const;
};

}  // namespace shardtrain
