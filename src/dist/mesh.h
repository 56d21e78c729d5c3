// Mesh: the 2-D mesh of process groups one training job uses, built from the world Comm, and the
// few collectives the layers above fsdp/ may call (train/: step totals, evaluation sums, the
// checkpoint protocol's agreement). Everything else that communicates lives in fsdp/.
//
// Shard group = ranks [g*G, (g+1)*G) (consecutive ranks: one node's ranks under the launcher's
// numbering); replicate group = ranks with the same index inside their shard group. G = world:
// the shard group is the world and the replicate group has one rank; G = 1: the reverse.
//
// The collectives are over the world (every rank reads its own data, so the data-parallel group
// is the world), blocking, and must be called by every rank in the same order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/comm.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

class Mesh {
 public:
  // Collective over `world` (splits it). `world` and `ops` must outlive the mesh; `ops` holds
  // the few floats sum() reduces (NCCL reduces device memory).
  // REQUIRES: group_size >= 1 and world.size() % group_size == 0.
  Mesh(Comm& world, int group_size, Ops& ops);
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  Comm& world() { return world_; }
  Comm& shard() { return *shard_; }
  Comm& replicate() { return *replicate_; }
  // This rank's index in the world, in its shard group and in its replicate group.
  int world_rank() const { return world_.rank(); }
  int world_size() const { return world_.size(); }
  int shard_rank() const { return shard_->rank(); }
  int shard_size() const { return shard_->size(); }
  int replicate_rank() const { return replicate_->rank(); }
  int replicate_size() const { return replicate_->size(); }

  // Element-wise sums over all ranks of several values, in one collective. Each value keeps
  // ~48 bits (it travels as two floats: the value and its rounding error). `what` names the
  // collective in timeouts and the hang watchdog's report ("step totals (tokens, loss)").
  std::vector<double> sum(const std::vector<double>& values, const std::string& what);
  double sum(double value, const std::string& what) { return sum(std::vector{value}, what)[0]; }
  // How many ranks pass true: agreement on an action (a count of failed ranks; any(): some
  // rank asked; all(): every rank is ready).
  int count(bool mine, const std::string& what);
  bool any(bool mine, const std::string& what) { return count(mine, what) > 0; }
  bool all(bool mine, const std::string& what) { return count(mine, what) == world_size(); }
  // Returns once every rank has called it.
  void barrier() { world_.barrier(); }

 private:
  Comm& world_;
  Ops& ops_;
  std::unique_ptr<Comm> owned_shard_, owned_replicate_;
  Comm* shard_ = nullptr;
  Comm* replicate_ = nullptr;
  // Kept across calls: a device allocation per call would stall CUDA (cudaFree synchronises).
  DeviceBuffer scratch_;
};

}  // namespace shardtrain
