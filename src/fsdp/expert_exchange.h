// ExpertExchange: the model's ExpertDispatch (model/expert_dispatch.h) over the mesh's expert
// group (dist/mesh.h Mesh::expert(): N consecutive ranks of a shard group), with
// Comm::all_to_all_v: NCCL's grouped send/receive on GPUs, Gloo's alltoallv on CPU ranks
// (host-staged for GPU ranks on Gloo). Counts travel as fp32 in a small device buffer (the
// collectives take device tensors), rows in the activation dtype.
#pragma once

#include <memory>
#include <vector>

#include "dist/comm.h"
#include "model/expert_dispatch.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

class ExpertExchange final : public ExpertDispatch {
 public:
  // `expert` (the expert group's Comm) and `ops` must outlive this object.
  ExpertExchange(Comm& expert, Ops& ops) : expert_(expert), ops_(ops) {}

  int size() const override { return expert_.size(); }
  int rank() const override { return expert_.rank(); }
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& sent, int64_t per_rank) override;
  void exchange_rows(Tensor out_RC, const std::vector<int64_t>& recv_rows, Tensor in_MC,
                     const std::vector<int64_t>& send_rows) override;

 private:
  Comm& expert_;
  Ops& ops_;
  DeviceBuffer counts_;  // [sent | received] as fp32, grown as needed
};

}  // namespace shardtrain
