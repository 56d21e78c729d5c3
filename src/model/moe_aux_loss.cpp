#include "model/moe_aux_loss.h"

#include "core/error.h"

namespace shardtrain {

void MoeAuxLoss::configure(int64_t experts, bool on, float gradient_weight) {
  experts_ = experts;
  on_ = on && experts > 0;
  gradient_weight_ = gradient_weight;
}

MoeAux MoeAuxLoss::begin_forward(Ops& ops) {
  value_ = 0;
  if (!on_) return MoeAux{};
  const size_t bytes = static_cast<size_t>(experts_) * sizeof(float);
  if (prob_sum_.bytes() != bytes) {
    prob_sum_ = DeviceBuffer(ops, bytes);
    grad_ = DeviceBuffer(ops, bytes);
  }
  const Tensor prob_sum = prob_sum_.view(DType::kF32, {experts_});
  ops.fill_zero(prob_sum);
  rows_.assign(experts_, 0);
  return MoeAux{prob_sum, &rows_, Tensor()};
}

MoeAux MoeAuxLoss::end_forward(Ops& ops, int64_t tokens, int64_t sparse_blocks) {
  if (!on_ || sparse_blocks == 0) return MoeAux{};  // no router ran (every block dense)
  SHARDTRAIN_CHECK(tokens > 0, "aux loss over {} tokens", tokens);
  std::vector<float> prob_sum(experts_);
  ops.copy_to_host(prob_sum.data(), prob_sum_.view(DType::kF32, {experts_}));
  const double R = static_cast<double>(tokens) * static_cast<double>(sparse_blocks);
  const double E = static_cast<double>(experts_);
  std::vector<float> grad(experts_);
  double sum = 0;
  for (int64_t e = 0; e < experts_; ++e) {
    const double f = static_cast<double>(rows_[e]) / R;
    sum += f * (prob_sum[e] / R);
    grad[e] = static_cast<float>(gradient_weight_ * E * f / R);
  }
  value_ = E * sum;
  const Tensor grad_E = grad_.view(DType::kF32, {experts_});
  ops.copy_from_host(grad_E, grad.data());
  return MoeAux{Tensor(), nullptr, grad_E};
}

}  // namespace shardtrain
