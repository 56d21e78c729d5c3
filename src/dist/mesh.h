// Mesh: the 2-D mesh of process groups one training job uses, built from the world Comm, and the
// few collectives the layers above fsdp/ may call (train/: step totals, evaluation sums, the
// checkpoint protocol's agreement). Everything else that communicates lives in fsdp/.
//
// Shard group = ranks [g*G, (g+1)*G) (consecutive ranks: one node's ranks under the launcher's
// numbering); replicate group = ranks with the same index inside their shard group. G = world:
// the shard group is the world and the replicate group has one rank; G = 1: the reverse.
//
// Expert parallelism (fsdp.expert_parallel = N, docs/fsdp.md): each shard group is split into
// G / N expert groups of N consecutive ranks; rank r's expert rank is r % N. An expert group
// exchanges tokens with all-to-all (expert()); the ranks of a shard group with the same expert
// rank hold the same experts and shard them among themselves (expert_shard(), size G / N); the
// replicate group already joins ranks with the same expert rank. N = 1: expert() is a group of
// one and expert_shard() is the shard group.
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
  // REQUIRES: group_size >= 1, world.size() % group_size == 0, expert_parallel >= 1 and
  // group_size % expert_parallel == 0.
  Mesh(Comm& world, int group_size, Ops& ops, int expert_parallel = 1);
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
  // Expert parallelism (header comment): the all-to-all group and the expert shard group.
  Comm& expert() { return *expert_; }
  Comm& expert_shard() { return *expert_shard_; }
  int expert_rank() const { return expert_->rank(); }
  int expert_size() const { return expert_->size(); }
  int expert_shard_rank() const { return expert_shard_->rank(); }
  int expert_shard_size() const { return expert_shard_->size(); }

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
  std::unique_ptr<Comm> owned_shard_, owned_replicate_, owned_expert_, owned_expert_shard_;
  Comm* shard_ = nullptr;
  Comm* replicate_ = nullptr;
  Comm* expert_ = nullptr;
  Comm* expert_shard_ = nullptr;
  // Kept across calls: a device allocation per call would stall CUDA (cudaFree synchronises).
  DeviceBuffer scratch_;
};

}  // namespace shardtrain
