// ExpertDispatch: how a sparse block moves its routed rows to the ranks that hold their experts
// and back (expert parallelism, fsdp.expert_parallel; docs/fsdp.md). The model never
// communicates: fsdp/ implements this over the mesh's expert group (fsdp/expert_exchange.h)
// and the trainer hands it to the model (DecoderModel::set_expert_dispatch).
//
// Every call is collective over the expert group: all its ranks make the same calls in the same
// order (every rank runs every sparse block's forward and backward, and the same recomputes).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace shardtrain {

class ExpertDispatch {
 public:
  virtual ~ExpertDispatch() = default;
  // N: ranks of the expert group, and this rank's index in it (which experts it holds:
  // model/param_layout.h ExpertPlacement).
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // sent (size() x per_rank): counts this rank sends each rank, rank-major. Returns received
  // (size() x per_rank): what each rank sent this one, rank-major. REQUIRES: every value below
  // 2^24 (they travel as fp32).
  virtual std::vector<int64_t> exchange_counts(const std::vector<int64_t>& sent,
                                               int64_t per_rank) = 0;
  // Rows of width C: in_MC holds send_rows[r] rows for rank r back to back in rank order;
  // out_RC receives recv_rows[s] rows from rank s, back to back in rank order.
  virtual void exchange_rows(Tensor out_RC, const std::vector<int64_t>& recv_rows, Tensor in_MC,
                             const std::vector<int64_t>& send_rows) = 0;
};

}  // namespace shardtrain
