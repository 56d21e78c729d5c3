// FsdpGroups: the 2-D mesh of process groups one FSDP job uses, built from the world Comm.
//
// Shard group = ranks [g*G, (g+1)*G) (consecutive ranks: one node's ranks under the launcher's
// numbering); replicate group = ranks with the same index inside their shard group. G = world:
// the shard group is the world and the replicate group has one rank; G = 1: the reverse.
#pragma once

#include <memory>

#include "dist/comm.h"

namespace shardtrain {

// A Comm of one rank: collectives are identities. For world size 1 and for size-1 groups.
std::unique_ptr<Comm> make_single_rank_comm();

class FsdpGroups {
 public:
  // Collective over `world` (splits it). REQUIRES: world.size() % group_size == 0.
  FsdpGroups(Comm& world, int group_size);
  Comm& world() { return world_; }
  Comm& shard() { return *shard_; }
  Comm& replicate() { return *replicate_; }

 private:
  Comm& world_;
  std::unique_ptr<Comm> owned_shard_, owned_replicate_;
  Comm* shard_ = nullptr;
  Comm* replicate_ = nullptr;
};

}  // namespace shardtrain
