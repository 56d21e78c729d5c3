// MoeAuxLoss: the load-balancing auxiliary loss of a mixture-of-experts model, exactly as
// transformers' load_balancing_loss_func computes it for one forward call (no attention mask:
// every token counts), over all R = N x (sparse blocks) router rows of the micro-batch at once:
//   aux = E * sum_e f_e * P_e,  f_e = (rows routed to e) / R,  P_e = (sum of p_e over rows) / R
// (p = softmax of the router logits; the rows routed are the top-k, the routing's own choice).
// Its gradient with respect to each router probability is E * f_e / R per expert, the same on
// every row, so backward adds weight * E * f_e / R into each block's routing backward
// (MoeAux::grad_E); f is known once every block's forward has run.
//
// Usage per micro-batch: begin_forward() before the blocks (their MoeAux collects the counts
// and the router mass), end_forward() after them (the value, and the MoeAux for backward).
#pragma once

#include <cstdint>
#include <vector>

#include "model/layers/moe_mlp.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

class MoeAuxLoss {
 public:
  // experts: E; on: whether the loss (and its gradient) is computed at all.
  void configure(int64_t experts, bool on, float gradient_weight);
  bool on() const { return on_; }

  // The MoeAux forward hands every sparse block (collecting), or an empty one when off.
  MoeAux begin_forward(Ops& ops);
  // After every block's forward of `tokens` tokens through `sparse_blocks` sparse blocks:
  // computes the value (synchronises) and returns the MoeAux backward hands every block (the
  // gradient of gradient_weight * aux; empty when off).
  MoeAux end_forward(Ops& ops, int64_t tokens, int64_t sparse_blocks);
  // The last micro-batch's aux (without any coefficient); 0 when off.
  double value() const { return value_; }

 private:
  int64_t experts_ = 0;
  bool on_ = false;
  float gradient_weight_ = 0;
  DeviceBuffer prob_sum_, grad_;
  std::vector<int64_t> rows_;
  double value_ = 0;
};

}  // namespace shardtrain
