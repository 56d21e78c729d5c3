// Comm: collective communication among the ranks of one process group. Implementations: Gloo
// (CPU tensors; dist/gloo_comm.h) and NCCL (CUDA tensors; dist/nccl_comm.h).
//
// All ranks of the group must call the same collectives in the same order with the same
// sizes. Tensors are contiguous on the backend's device; dtype f32 or bf16 (bf16 reductions
// accumulate in fp32 where the backend allows). Calls are blocking on Gloo; on NCCL they are
// enqueued on the stream given at construction.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace shardtrain {

// kMax: f32 only (the FP8 all-gather's amaxes, fsdp/fp8_gather.h).
enum class ReduceOp { kSum, kAvg, kMax };

// A collective started by Comm::start_*; Comm::finish orders later compute after it.
struct CommWork {
  int64_t id = -1;  // -1: already complete (blocking backends)
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // out (size * n) = concatenation over ranks of in (n), in rank order. in may alias
  // out's own slice [rank * n, (rank + 1) * n).
  virtual void all_gather(Tensor out, Tensor in) = 0;
  // out (n) = op over ranks of in[rank * n, (rank + 1) * n); in has size * n elements.
  virtual void reduce_scatter(Tensor out, Tensor in, ReduceOp op) = 0;
  virtual void all_reduce(Tensor inout, ReduceOp op) = 0;
  virtual void broadcast(Tensor inout, int root) = 0;
  virtual void barrier() = 0;
  // All-to-all with variable sizes (MoE token dispatch). `in` holds this rank's elements for
  // every rank back to back in rank order, send_counts[r] of them for rank r; `out` receives
  // recv_counts[r] elements from rank r, back to back in rank order. REQUIRES: both vectors
  // have size() entries, their sums are in.numel() and out.numel(), every rank's
  // send_counts[r] equals rank r's recv_counts[this rank], in and out do not overlap, and
  // out and in have the same dtype. Blocking like the other collectives (enqueued on the
  // compute stream on NCCL).
  virtual void all_to_all_v(Tensor out, const std::vector<int64_t>& recv_counts, Tensor in,
                            const std::vector<int64_t>& send_counts) = 0;

  // Overlap (FSDP prefetch and gradient reduction). start_* enqueues the collective so that it
  // runs after all work already enqueued on the backend's compute stream, on the comm's own
  // stream, and returns at once; finish(work) makes compute enqueued afterwards wait for it
  // (an event, not a host wait). Until finish, compute must not touch the buffers. Every
  // started work must be finished exactly once. Blocking backends (Gloo) run the collective
  // inside start_* and finish is a no-op: these defaults.
  virtual CommWork start_all_gather(Tensor out, Tensor in) {
    all_gather(out, in);
    return {};
  }
  virtual CommWork start_reduce_scatter(Tensor out, Tensor in, ReduceOp op) {
    reduce_scatter(out, in, op);
    return {};
  }
  virtual CommWork start_all_reduce(Tensor inout, ReduceOp op) {
    all_reduce(inout, op);
    return {};
  }
  virtual void finish(CommWork work) {}
  // Exposed communication: seconds the compute stream has stood still in finish() waiting for
  // collectives, summed over the waits that completed since the last call (CUDA events around
  // each wait). nullopt when the backend does not measure it: blocking backends, whose
  // collectives all show in the step time, and NCCL unless SHARDTRAIN_MEASURE_COMM_WAIT=1.
  virtual std::optional<double> take_compute_wait_seconds() { return std::nullopt; }

  // A sub-group of the ranks with the same `color`, ordered by `key` (then by rank). Every
  // rank of this group must call it. Used for the 2-D mesh of HYBRID_SHARD.
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;
  virtual std::string backend_name() const = 0;

  // Names what the following collectives are for (e.g. "unit 3 (layers.2)"), so a timeout or
  // an error can say where the job was; "" clears it. Local: no communication.
  virtual void set_context(std::string context) {}
};

}  // namespace shardtrain
