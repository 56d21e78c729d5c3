#include "train/optimizer.h"

#include <algorithm>

namespace shardtrain {

AdamW::AdamW(Ops& ops, AdamWSettings settings) : ops_(ops), settings_(settings) {}

float AdamW::clip_coefficient(double grad_norm, double max_norm) {
  if (max_norm <= 0) return 1.0f;
  const double coefficient = max_norm / (grad_norm + 1e-6);
  return static_cast<float>(std::min(coefficient, 1.0));
}

AdamWStep AdamW::step_scalars(double lr, int64_t step, float grad_scale) const {
  AdamWStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(settings_.beta1);
  s.beta2 = static_cast<float>(settings_.beta2);
  s.eps = static_cast<float>(settings_.eps);
  s.step = step;
  s.grad_scale = grad_scale;
  return s;
}

std::vector<AdamWSegment> AdamW::segments_of(const std::vector<UnitBuffers>& units,
                                             GradsAfterStep grads_after) const {
  std::vector<AdamWSegment> segments;
  for (const UnitBuffers& u : units) {
    const int64_t begin = u.offset, end = u.offset + u.param.numel();
    for (const ParamSpec& spec : u.layout->params) {
      // The part of this parameter inside [begin, end), relative to the buffers.
      const int64_t lo = std::max(begin, spec.offset);
      const int64_t hi = std::min(end, spec.offset + spec.numel());
      if (lo >= hi) continue;
      const int64_t rel = lo - begin, n = hi - lo;
      AdamWSegment segment;
      segment.param = u.param.rows(rel, rel + n);
      segment.grad = u.grad.rows(rel, rel + n);
      segment.exp_avg = u.exp_avg.rows(rel, rel + n);
      segment.exp_avg_sq = u.exp_avg_sq.rows(rel, rel + n);
      segment.weight_decay = (spec.decay || settings_.decay_norms_and_biases)
                                 ? static_cast<float>(settings_.weight_decay)
                                 : 0.0f;
      if (u.compute_param.defined()) segment.compute_param = u.compute_param.rows(rel, rel + n);
      segment.zero_grad = grads_after == GradsAfterStep::kZero;
      segments.push_back(segment);
    }
  }
  return segments;
}

void AdamW::step(const std::vector<UnitBuffers>& units, double lr, int64_t step, float grad_scale,
                 GradsAfterStep grads_after) {
  ops_.adamw_multi(segments_of(units, grads_after), step_scalars(lr, step, grad_scale));
}

int64_t AdamW::step_aside(const std::vector<UnitBuffers>& units, double lr, int64_t step,
                          float grad_scale, GradsAfterStep grads_after) {
  return ops_.adamw_multi_aside(segments_of(units, grads_after),
                                step_scalars(lr, step, grad_scale));
}

}  // namespace shardtrain
