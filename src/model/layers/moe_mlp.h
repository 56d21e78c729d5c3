// MoeMlp: the mixture-of-experts feed-forward (Qwen3-MoE, Mixtral) in a block's MLP slot
// (BlockRecipe::moe), dropless (every token reaches its k experts; no capacity, no drops):
//   logits = router(x)                                  the router is a Linear (E, C)
//   (expert_NK, weight_NK) = top-k of softmax(logits)   fp32, renormalised if configured
//   x_MC = x[token of each row], rows grouped by expert  M = N*k rows (moe_dispatch, moe_gather)
//   y_MC = down_e(silu(gate_e(x_MC)) * up_e(x_MC))       three grouped GEMMs over all experts
//                                    (expert parallelism: on the ranks that hold them, through
//                                    an ExpertDispatch: model/layers/moe_expert_parallel.h)
//   out = residual + sum_k weight_NK * y_MC[row of (token, k)]
// Backward reverses it, the routing weights' gradient through the top-k softmax into the router;
// the load-balancing loss adds its gradient there (MoeAux::grad_E: model/moe_aux_loss.h).
// Backward writes d(x) into dx_NC (overwritten) and the weights' gradients (overwritten or added
// to, as `accumulate` says); dout_NC is read only.
//
// Saved activations (MoeSaved): the router logits, the routing, the permutation and the
// per-expert row counts (host), the gathered input, gate/up/act rows and the experts' outputs.
// All are sized by M = N*k, which dropless routing fixes, so the plan is exact.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/expert_dispatch.h"
#include "model/layers/activation_plan.h"
#include "model/layers/layer_dims.h"
#include "model/layers/moe_expert_parallel.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace shardtrain {

struct MoeSaved {
  Tensor logits_NE;         // router output (activation dtype)
  Tensor expert_NK;         // i32: each token's experts
  Tensor weight_NK;         // f32: their weights
  Tensor source_M, row_NK;  // i32: the grouping permutation and its inverse
  Tensor x_MC;              // the input, one row per (token, expert)
  Tensor gate_MF, up_MF, act_MF;
  Tensor y_MC;  // the experts' outputs, before weighting
  // Rows per expert (moe_dispatch), on the host: forward writes them, backward reads them.
  std::shared_ptr<std::vector<int64_t>> rows_E;
  // Expert parallelism: the expert-side rows, in buffers that grow with the rows received.
  std::shared_ptr<ExpertRowsSaved> expert_rows;

  // Undefined tensors when d.experts == 0 (a dense block).
  static MoeSaved declare(ActivationPlan& plan, ActivationUse use, const LayerDims& d);
  MoeSaved sized(const LayerDims& d) const;
};

// Backward's scratch, shared by every block.
struct MoeScratch {
  Tensor dy_MC, dx_MC;
  Tensor dact_MF, dgate_MF, dup_MF;
  Tensor dweight_NK;  // f32
  Tensor dlogits_NE;
  std::shared_ptr<ExpertRowsScratch> expert_rows;  // expert parallelism

  static MoeScratch declare(ActivationPlan& plan, const LayerDims& d);
  MoeScratch sized(const LayerDims& d) const;
};

// What the decoder hands every sparse block of a micro-batch for the load-balancing loss.
struct MoeAux {
  Tensor prob_sum_E;                       // forward: += router mass per expert (f32), or undefined
  std::vector<int64_t>* rows_E = nullptr;  // forward: += rows per expert, or null
  Tensor grad_E;  // backward: d(loss) / d(router probability) per expert (f32), or undefined
  // Expert parallelism: moves rows to the ranks holding their experts; null runs every expert
  // here (MoeWeights then holds all E).
  ExpertDispatch* dispatch = nullptr;
};

struct MoeMlp {
  bool renormalize = false;  // MoeConfig::renormalize

  // scratch: only expert parallelism's exchange buffers are used in forward.
  void forward(Ops& ops, const MoeWeights& w, Tensor x_NC, Tensor residual_NC,
               const MoeSaved& saved, const MoeScratch& scratch, const MoeAux& aux,
               Tensor out_NC) const;
  void backward(Ops& ops, const MoeWeights& w, const MoeWeights& grad, bool accumulate,
                Tensor dout_NC, Tensor x_NC, const MoeSaved& saved, const MoeScratch& scratch,
                const MoeAux& aux, Tensor dx_NC) const;
};

}  // namespace shardtrain
