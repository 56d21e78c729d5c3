// MoeExpertParallel: the expert half of a sparse block under expert parallelism. Between the
// routing (the rows of this rank's tokens grouped by global expert, x_MC) and the weighted
// combine, it sends each row to the rank that holds its expert, runs that rank's experts and
// brings the outputs back (ExpertDispatch: model/expert_dispatch.h):
//   counts per (rank, local expert) exchanged          received_SE (host)
//   x_MC --exchange--> xr_RC (source-major)  --permute--> xe_RC (expert-major, R rows)
//   ye_RC = down(silu(gate(xe)) * up(xe))    three grouped GEMMs over this rank's E/N experts
//   ye_RC --permute--> yr_RC --exchange--> y_MC (back in this rank's row order)
// Backward runs the same exchanges in reverse for dy and dx; the experts' weight gradients
// are this rank's tokens' and its peers' (fsdp/ then sums them over the ranks that hold the
// same experts). R varies per micro-batch (dropless: up to N x M), so the expert-side
// activations live in buffers that grow to the largest R seen (ExpertRowsSaved); the plan
// counts their worst case (model/moe_memory.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/expert_dispatch.h"
#include "model/weights.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

// One block's expert-side activations, saved from forward for backward.
struct ExpertRowsSaved {
  DeviceBuffer xe, gate, up, act;             // (R, C), (R, F) x 3, activation dtype
  DeviceBuffer permute, restore;              // i32 (R): expert-major row -> received row, and back
  std::vector<int64_t> send_rows, recv_rows;  // per rank of the expert group
  std::vector<int64_t> local_rows;            // per local expert (the grouped GEMMs' counts)
  int64_t received = 0;                       // R
};

// Backward's scratch, shared by every block.
struct ExpertRowsScratch {
  DeviceBuffer rows_a, rows_b;          // (R, C)
  DeviceBuffer dact, dgate, dup;        // (R, F)
  DeviceBuffer exchange_a, exchange_b;  // forward's (R, C) exchange buffers
};

struct MoeExpertParallel {
  // rows_E: this rank's rows per global expert (moe_dispatch); x_MC grouped by them. Writes
  // y_MC (this rank's rows' expert outputs, same order).
  static void forward(Ops& ops, const MoeWeights& w, const std::vector<int64_t>& rows_E,
                      Tensor x_MC, ExpertDispatch& dispatch, ExpertRowsSaved& saved,
                      ExpertRowsScratch& scratch, Tensor y_MC);
  // dy_MC -> dx_MC (overwritten) and the local experts' weight gradients (overwritten or
  // added to, as `accumulate` says).
  static void backward(Ops& ops, const MoeWeights& w, const MoeWeights& grad, bool accumulate,
                       Tensor dy_MC, ExpertDispatch& dispatch, const ExpertRowsSaved& saved,
                       ExpertRowsScratch& scratch, Tensor dx_MC);
};

}  // namespace shardtrain
