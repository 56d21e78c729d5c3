#include "model/layers/moe_expert_parallel.h"

#include <algorithm>

#include "core/error.h"

namespace shardtrain {
namespace {

// A view of `rows` x `width` elements of `buffer`, grown first when too small (never shrunk:
// the largest micro-batch's R sets the size, and steady steps allocate nothing).
Tensor rows_of(Ops& ops, DeviceBuffer& buffer, DType dtype, int64_t rows, int64_t width) {
  const size_t bytes = static_cast<size_t>(rows * width) * dtype_size(dtype);
  // Never left empty: a rank may receive no rows, and an unallocated buffer has no device.
  if (buffer.bytes() < bytes || buffer.data() == nullptr) {
    buffer = DeviceBuffer(ops, std::max<size_t>(bytes, 256));
  }
  return buffer.view(dtype, {rows, width});
}

Tensor saved_rows(const DeviceBuffer& buffer, DType dtype, int64_t rows, int64_t width) {
  return buffer.view(dtype, {rows, width});
}

// out_RC[i] = in_RC[index_R[i]]: a row permutation (moe_gather with one slot per token).
void permute_rows(Ops& ops, Tensor in_RC, Tensor index_R, Tensor out_RC) {
  if (in_RC.dim(0) > 0) ops.moe_gather(in_RC, index_R, out_RC);
}

}  // namespace

void MoeExpertParallel::forward(Ops& ops, const MoeWeights& w, const std::vector<int64_t>& rows_E,
                                Tensor x_MC, ExpertDispatch& dispatch, ExpertRowsSaved& saved,
                                ExpertRowsScratch& scratch, Tensor y_MC) {
  const int ranks = dispatch.size();
  const int64_t local = w.gate_EFC.dim(0), C = x_MC.dim(1), F = w.gate_EFC.dim(1);
  const DType act = x_MC.dtype();
  SHARDTRAIN_CHECK(static_cast<int64_t>(rows_E.size()) == local * ranks,
                   "{} expert counts for {} ranks x {} local experts", rows_E.size(), ranks, local);
  // Rank r holds global experts [r * local, (r + 1) * local): rows_E is already rank-major.
  const std::vector<int64_t> received_SE = dispatch.exchange_counts(rows_E, local);
  saved.send_rows.assign(ranks, 0);
  saved.recv_rows.assign(ranks, 0);
  saved.local_rows.assign(local, 0);
  for (int r = 0; r < ranks; ++r) {
    for (int64_t e = 0; e < local; ++e) {
      saved.send_rows[r] += rows_E[r * local + e];
      saved.recv_rows[r] += received_SE[r * local + e];
      saved.local_rows[e] += received_SE[r * local + e];
    }
  }
  int64_t R = 0;
  for (int64_t n : saved.recv_rows) R += n;
  saved.received = R;

  // Received rows are source-major (then expert within a source); the grouped GEMMs need them
  // expert-major. permute[i] = the received row that expert-major row i is; restore inverts it.
  std::vector<int32_t> permute(R), restore(R);
  {
    std::vector<int64_t> source_start(ranks, 0);  // first received row of each source
    for (int s = 1; s < ranks; ++s) source_start[s] = source_start[s - 1] + saved.recv_rows[s - 1];
    std::vector<int64_t> block_start(ranks * local, 0);  // (source, expert) within the source
    for (int s = 0; s < ranks; ++s) {
      int64_t at = source_start[s];
      for (int64_t e = 0; e < local; ++e) {
        block_start[s * local + e] = at;
        at += received_SE[s * local + e];
      }
    }
    int64_t i = 0;
    for (int64_t e = 0; e < local; ++e) {
      for (int s = 0; s < ranks; ++s) {
        for (int64_t j = 0; j < received_SE[s * local + e]; ++j, ++i) {
          const int64_t row = block_start[s * local + e] + j;
          permute[i] = static_cast<int32_t>(row);
          restore[row] = static_cast<int32_t>(i);
        }
      }
    }
  }
  const Tensor permute_R = rows_of(ops, saved.permute, DType::kI32, R, 1).reshaped({R});
  const Tensor restore_R = rows_of(ops, saved.restore, DType::kI32, R, 1).reshaped({R});
  if (R > 0) {
    ops.copy_from_host(permute_R, permute.data());
    ops.copy_from_host(restore_R, restore.data());
  }

  const Tensor xr_RC = rows_of(ops, scratch.exchange_a, act, R, C);
  dispatch.exchange_rows(xr_RC, saved.recv_rows, x_MC, saved.send_rows);
  const Tensor xe_RC = rows_of(ops, saved.xe, act, R, C);
  permute_rows(ops, xr_RC, permute_R, xe_RC);
  const Tensor gate_RF = rows_of(ops, saved.gate, act, R, F);
  const Tensor up_RF = rows_of(ops, saved.up, act, R, F);
  const Tensor act_RF = rows_of(ops, saved.act, act, R, F);
  const Tensor ye_RC = rows_of(ops, scratch.exchange_b, act, R, C);
  if (R > 0) {
    ops.grouped_linear_forward(xe_RC, w.gate_EFC, saved.local_rows, gate_RF);
    ops.grouped_linear_forward(xe_RC, w.up_EFC, saved.local_rows, up_RF);
    ops.swiglu_forward(gate_RF, up_RF, act_RF);
    ops.grouped_linear_forward(act_RF, w.down_ECF, saved.local_rows, ye_RC);
  }
  // xr's buffer is free again: the outputs in received order go back through it.
  permute_rows(ops, ye_RC, restore_R, xr_RC);
  dispatch.exchange_rows(y_MC, saved.send_rows, xr_RC, saved.recv_rows);
}

void MoeExpertParallel::backward(Ops& ops, const MoeWeights& w, const MoeWeights& grad,
                                 bool accumulate, Tensor dy_MC, ExpertDispatch& dispatch,
                                 const ExpertRowsSaved& saved, ExpertRowsScratch& scratch,
                                 Tensor dx_MC) {
  const int64_t R = saved.received, C = dy_MC.dim(1), F = w.gate_EFC.dim(1);
  const DType act = dy_MC.dtype();
  const Tensor permute_R = saved.permute.view(DType::kI32, {R});
  const Tensor restore_R = saved.restore.view(DType::kI32, {R});
  const Tensor xe_RC = saved_rows(saved.xe, act, R, C);
  const Tensor gate_RF = saved_rows(saved.gate, act, R, F);
  const Tensor up_RF = saved_rows(saved.up, act, R, F);
  const Tensor act_RF = saved_rows(saved.act, act, R, F);

  const Tensor a_RC = rows_of(ops, scratch.rows_a, act, R, C);
  const Tensor b_RC = rows_of(ops, scratch.rows_b, act, R, C);
  dispatch.exchange_rows(a_RC, saved.recv_rows, dy_MC, saved.send_rows);
  permute_rows(ops, a_RC, permute_R, b_RC);  // dye, expert-major
  const Tensor dact_RF = rows_of(ops, scratch.dact, act, R, F);
  const Tensor dgate_RF = rows_of(ops, scratch.dgate, act, R, F);
  const Tensor dup_RF = rows_of(ops, scratch.dup, act, R, F);
  // With no rows the weight gradients are still written (zero, or left as accumulated).
  ops.grouped_linear_backward(b_RC, act_RF, w.down_ECF, saved.local_rows, dact_RF, grad.down_ECF,
                              false, accumulate);
  if (R > 0) ops.swiglu_backward(dact_RF, gate_RF, up_RF, dgate_RF, dup_RF);
  // xe feeds gate and up: the second adds its part of d(xe) to the first's.
  ops.grouped_linear_backward(dgate_RF, xe_RC, w.gate_EFC, saved.local_rows, a_RC, grad.gate_EFC,
                              false, accumulate);
  ops.grouped_linear_backward(dup_RF, xe_RC, w.up_EFC, saved.local_rows, a_RC, grad.up_EFC, true,
                              accumulate);
  permute_rows(ops, a_RC, restore_R, b_RC);  // dxr, received order
  dispatch.exchange_rows(dx_MC, saved.send_rows, b_RC, saved.recv_rows);
}

}  // namespace shardtrain
