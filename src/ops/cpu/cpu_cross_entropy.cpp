// CpuOps cross-entropy over one chunk of logits: fp32 max-subtracted log-sum-exp per row (sums
// in double), loss summed into an fp32 accumulator, gradient written over the logits.
#include <cmath>

#include "ops/cpu/cpu_ops.h"
#include "ops/op_checks.h"

namespace shardtrain {

namespace {
constexpr int32_t kIgnoreIndex = -100;
}  // namespace

void CpuOps::cross_entropy(Tensor logits_NV, Tensor targets_N, float grad_scale, Tensor loss_sum_1,
                           bool compute_grad) {
  const int64_t rows = op_checks::row_count(logits_NV);
  const int64_t vocab = op_checks::row_width(logits_NV);
  SHARDTRAIN_CHECK(targets_N.numel() == rows, "cross_entropy: logits {} targets {}",
                   logits_NV.shape().to_string(), targets_N.shape().to_string());
  const int32_t* targets = targets_N.i32();
  float* logits = logits_NV.f32();
  double loss_sum = 0;
  for (int64_t n = 0; n < rows; ++n) {
    float* row = logits + n * vocab;
    const int32_t target = targets[n];
    if (target == kIgnoreIndex) {
      if (compute_grad) {
        for (int64_t j = 0; j < vocab; ++j) row[j] = 0;
      }
      continue;
    }
    SHARDTRAIN_CHECK(target >= 0 && target < vocab, "target {} outside [0, {}) and not -100",
                     target, vocab);
    const float target_logit = row[target];
    float row_max = row[0];
    for (int64_t j = 1; j < vocab; ++j) row_max = row[j] > row_max ? row[j] : row_max;
    double exp_sum = 0;
    if (compute_grad) {  // keep exp(x - max) in place: one exp per logit
      for (int64_t j = 0; j < vocab; ++j) {
        row[j] = std::exp(row[j] - row_max);
        exp_sum += row[j];
      }
    } else {
      for (int64_t j = 0; j < vocab; ++j) exp_sum += std::exp(row[j] - row_max);
    }
    loss_sum += row_max + std::log(exp_sum) - target_logit;
    if (compute_grad) {
      const float prob_scale = static_cast<float>(grad_scale / exp_sum);
      for (int64_t j = 0; j < vocab; ++j) row[j] *= prob_scale;
      row[target] -= grad_scale;
    }
  }
  loss_sum_1.f32()[0] += static_cast<float>(loss_sum);
}

}  // namespace shardtrain
