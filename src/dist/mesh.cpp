#include "dist/mesh.h"

#include <cmath>

#include "core/error.h"
#include "dist/single_rank_comm.h"

namespace shardtrain {

Mesh::Mesh(Comm& world, int group_size, Ops& ops, int expert_parallel) : world_(world), ops_(ops) {
  SHARDTRAIN_CHECK(group_size >= 1 && world.size() % group_size == 0, "group {} world {}",
                   group_size, world.size());
  if (group_size == world.size()) {
    shard_ = &world;
    owned_replicate_ = make_single_rank_comm();
    replicate_ = owned_replicate_.get();
  } else if (group_size == 1) {
    owned_shard_ = make_single_rank_comm();
    shard_ = owned_shard_.get();
    replicate_ = &world;
  } else {
    const int rank = world.rank();
    owned_shard_ = world.split(rank / group_size, rank);
    owned_replicate_ = world.split(rank % group_size, rank);
    shard_ = owned_shard_.get();
    replicate_ = owned_replicate_.get();
  }
  SHARDTRAIN_CHECK(expert_parallel >= 1 && group_size % expert_parallel == 0,
                   "expert parallel {} in a shard group of {}", expert_parallel, group_size);
  const int rank = world.rank();
  if (expert_parallel == 1) {
    owned_expert_ = make_single_rank_comm();
    expert_ = owned_expert_.get();
    expert_shard_ = shard_;
    return;
  }
  // Every split is collective over the world: all ranks take the same branches.
  if (expert_parallel == world.size()) {
    expert_ = &world;
  } else {
    owned_expert_ = world.split(rank / expert_parallel, rank);
    expert_ = owned_expert_.get();
  }
  if (expert_parallel == group_size) {
    owned_expert_shard_ = make_single_rank_comm();
  } else {
    // Same shard group, same expert rank.
    owned_expert_shard_ =
        world.split((rank / group_size) * expert_parallel + rank % expert_parallel, rank);
  }
  expert_shard_ = owned_expert_shard_.get();
}

std::vector<double> Mesh::sum(const std::vector<double>& values, const std::string& what) {
  // Two floats per value (the value and its rounding error) keep ~48 bits through an fp32
  // all-reduce; every value goes in one collective.
  std::vector<float> parts;
  parts.reserve(2 * values.size());
  for (double value : values) {
    const float high = static_cast<float>(value);
    parts.push_back(high);
    parts.push_back(static_cast<float>(value - high));
  }
  // One rank: the same split values, without the device round trip, whose copy back would make
  // the host wait for every op enqueued so far (the update running aside included).
  if (world_size() > 1) {
    const size_t bytes = parts.size() * sizeof(float);
    if (scratch_.bytes() < bytes) scratch_ = DeviceBuffer(ops_, bytes);
    const Tensor parts_tensor = scratch_.view(DType::kF32, {static_cast<int64_t>(parts.size())});
    ops_.copy_from_host(parts_tensor, parts.data());
    world_.set_context(what);
    world_.all_reduce(parts_tensor, ReduceOp::kSum);
    ops_.copy_to_host(parts.data(), parts_tensor);
  }
  std::vector<double> sums(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    sums[i] = static_cast<double>(parts[2 * i]) + static_cast<double>(parts[2 * i + 1]);
  }
  return sums;
}

int Mesh::count(bool mine, const std::string& what) {
  return static_cast<int>(std::lround(sum(mine ? 1.0 : 0.0, what)));
}

}  // namespace shardtrain
