#include "model/layers/moe_mlp.h"

#include "core/error.h"

namespace shardtrain {

MoeSaved MoeSaved::declare(ActivationPlan& plan, ActivationUse use, const LayerDims& d) {
  MoeSaved s;
  if (d.experts == 0) return s;
  const int64_t N = d.tokens(), K = d.experts_per_token, M = d.routed_rows();
  const int64_t C = d.hidden, F = d.expert_intermediate;
  s.logits_NE = plan.take(use, {N, d.experts});
  s.expert_NK = plan.take(use, DType::kI32, {N, K});
  s.weight_NK = plan.take(use, DType::kF32, {N, K});
  s.source_M = plan.take(use, DType::kI32, {M});
  s.row_NK = plan.take(use, DType::kI32, {N, K});
  s.x_MC = plan.take(use, {M, C});
  s.gate_MF = plan.take(use, {M, F});
  s.up_MF = plan.take(use, {M, F});
  s.act_MF = plan.take(use, {M, F});
  s.y_MC = plan.take(use, {M, C});
  s.rows_E = std::make_shared<std::vector<int64_t>>(d.experts, 0);
  s.expert_rows = std::make_shared<ExpertRowsSaved>();
  return s;
}

MoeSaved MoeSaved::sized(const LayerDims& d) const {
  if (d.experts == 0 || !rows_E) return MoeSaved{};
  const int64_t N = d.tokens(), K = d.experts_per_token, M = d.routed_rows();
  const int64_t C = d.hidden, F = d.expert_intermediate;
  MoeSaved s;
  s.logits_NE = fit(logits_NE, {N, d.experts});
  s.expert_NK = fit(expert_NK, {N, K});
  s.weight_NK = fit(weight_NK, {N, K});
  s.source_M = fit(source_M, {M});
  s.row_NK = fit(row_NK, {N, K});
  s.x_MC = fit(x_MC, {M, C});
  s.gate_MF = fit(gate_MF, {M, F});
  s.up_MF = fit(up_MF, {M, F});
  s.act_MF = fit(act_MF, {M, F});
  s.y_MC = fit(y_MC, {M, C});
  s.rows_E = rows_E;
  s.expert_rows = expert_rows;
  return s;
}

MoeScratch MoeScratch::declare(ActivationPlan& plan, const LayerDims& d) {
  MoeScratch s;
  if (d.experts == 0) return s;
  const ActivationUse use = ActivationUse::kScratch;
  const int64_t N = d.tokens(), M = d.routed_rows(), C = d.hidden, F = d.expert_intermediate;
  s.dy_MC = plan.take(use, {M, C});
  s.dx_MC = plan.take(use, {M, C});
  s.dact_MF = plan.take(use, {M, F});
  s.dgate_MF = plan.take(use, {M, F});
  s.dup_MF = plan.take(use, {M, F});
  s.dweight_NK = plan.take(use, DType::kF32, {N, d.experts_per_token});
  s.dlogits_NE = plan.take(use, {N, d.experts});
  s.expert_rows = std::make_shared<ExpertRowsScratch>();
  return s;
}

MoeScratch MoeScratch::sized(const LayerDims& d) const {
  if (d.experts == 0 || !dy_MC.defined()) return MoeScratch{};
  const int64_t N = d.tokens(), M = d.routed_rows(), C = d.hidden, F = d.expert_intermediate;
  return MoeScratch{fit(dy_MC, {M, C}),
                    fit(dx_MC, {M, C}),
                    fit(dact_MF, {M, F}),
                    fit(dgate_MF, {M, F}),
                    fit(dup_MF, {M, F}),
                    fit(dweight_NK, {N, d.experts_per_token}),
                    fit(dlogits_NE, {N, d.experts}),
                    expert_rows};
}

void MoeMlp::forward(Ops& ops, const MoeWeights& w, Tensor x_NC, Tensor residual_NC,
                     const MoeSaved& saved, const MoeScratch& scratch, const MoeAux& aux,
                     Tensor out_NC) const {
  SHARDTRAIN_CHECK(saved.rows_E != nullptr, "MoE block without its activations");
  w.router.forward(ops, x_NC, saved.logits_NE);
  ops.moe_route(saved.logits_NE, renormalize, saved.expert_NK, saved.weight_NK, aux.prob_sum_E);
  std::vector<int64_t>& rows = *saved.rows_E;
  // The router's E: all experts (with expert parallelism gate_EFC holds this rank's only).
  rows = ops.moe_dispatch(saved.expert_NK, w.router.weight_OI.dim(0), saved.source_M, saved.row_NK);
  if (aux.rows_E != nullptr) {
    SHARDTRAIN_CHECK(aux.rows_E->size() == rows.size(), "aux counts {} for {} experts",
                     aux.rows_E->size(), rows.size());
    for (size_t e = 0; e < rows.size(); ++e) (*aux.rows_E)[e] += rows[e];
  }
  ops.moe_gather(x_NC, saved.source_M, saved.x_MC);
  if (aux.dispatch != nullptr) {
    MoeExpertParallel::forward(ops, w, rows, saved.x_MC, *aux.dispatch, *saved.expert_rows,
                               *scratch.expert_rows, saved.y_MC);
  } else {
    ops.grouped_linear_forward(saved.x_MC, w.gate_EFC, rows, saved.gate_MF);
    ops.grouped_linear_forward(saved.x_MC, w.up_EFC, rows, saved.up_MF);
    ops.swiglu_forward(saved.gate_MF, saved.up_MF, saved.act_MF);
    ops.grouped_linear_forward(saved.act_MF, w.down_ECF, rows, saved.y_MC);
  }
  ops.moe_combine(saved.y_MC, saved.row_NK, saved.weight_NK, residual_NC, out_NC);
}

void MoeMlp::backward(Ops& ops, const MoeWeights& w, const MoeWeights& grad, bool accumulate,
                      Tensor dout_NC, Tensor x_NC, const MoeSaved& saved, const MoeScratch& scratch,
                      const MoeAux& aux, Tensor dx_NC) const {
  const std::vector<int64_t>& rows = *saved.rows_E;
  ops.moe_combine_backward(dout_NC, saved.y_MC, saved.row_NK, saved.weight_NK, scratch.dy_MC,
                           scratch.dweight_NK);
  if (aux.dispatch != nullptr) {
    const bool experts_accumulate =
        grad.experts_accumulate < 0 ? accumulate : grad.experts_accumulate != 0;
    MoeExpertParallel::backward(ops, w, grad, experts_accumulate, scratch.dy_MC, *aux.dispatch,
                                *saved.expert_rows, *scratch.expert_rows, scratch.dx_MC);
  } else {
    ops.grouped_linear_backward(scratch.dy_MC, saved.act_MF, w.down_ECF, rows, scratch.dact_MF,
                                grad.down_ECF, false, accumulate);
    ops.swiglu_backward(scratch.dact_MF, saved.gate_MF, saved.up_MF, scratch.dgate_MF,
                        scratch.dup_MF);
    // x_MC feeds gate and up: the second adds its part of d(x_MC) to the first's.
    ops.grouped_linear_backward(scratch.dgate_MF, saved.x_MC, w.gate_EFC, rows, scratch.dx_MC,
                                grad.gate_EFC, false, accumulate);
    ops.grouped_linear_backward(scratch.dup_MF, saved.x_MC, w.up_EFC, rows, scratch.dx_MC,
                                grad.up_EFC, true, accumulate);
  }
  ops.moe_gather_backward(scratch.dx_MC, saved.row_NK, dx_NC, false);
  ops.moe_route_backward(scratch.dweight_NK, saved.logits_NE, saved.expert_NK, saved.weight_NK,
                         renormalize, aux.grad_E, scratch.dlogits_NE);
  w.router.backward(ops, grad.router, accumulate, scratch.dlogits_NE, x_NC, dx_NC, true);
}

}  // namespace shardtrain
