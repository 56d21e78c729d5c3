#include "dist/fsdp_groups.h"

#include <cstring>

#include "core/error.h"

namespace shardtrain {
namespace {

class SingleRankComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend_name() const override { return "single"; }
  void all_gather(Tensor out, Tensor in) override { copy(out, in); }
  void reduce_scatter(Tensor out, Tensor in, ReduceOp) override { copy(out, in); }
  void all_reduce(Tensor, ReduceOp) override {}
  void broadcast(Tensor, int) override {}
  void barrier() override {}
  std::unique_ptr<Comm> split(int, int) override { return make_single_rank_comm(); }

 private:
  static void copy(Tensor out, Tensor in) {
    SHARDTRAIN_CHECK(out.bytes() == in.bytes(), "single-rank collective sizes");
    if (out.data() == in.data()) return;
    SHARDTRAIN_CHECK(out.device() == Device::kCpu, "single-rank copy of device tensors");
    std::memcpy(out.data(), in.data(), in.bytes());
  }
};

}  // namespace

std::unique_ptr<Comm> make_single_rank_comm() { return std::make_unique<SingleRankComm>(); }

FsdpGroups::FsdpGroups(Comm& world, int group_size) : world_(world) {
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
}

}  // namespace shardtrain
