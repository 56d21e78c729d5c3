// HeartbeatComm must pass the overlapped collectives (Comm::start_* / finish) through as such:
// Comm's defaults would turn them into blocking calls, which on NCCL serialises every FSDP
// gather and reduce-scatter with compute (this once removed all overlap on GPUs).
#include "train/heartbeat.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace shardtrain {
namespace {

// Records which entry points were called.
class RecordingComm final : public Comm {
 public:
  explicit RecordingComm(std::vector<std::string>& calls) : calls_(calls) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_gather(Tensor, Tensor) override { calls_.push_back("all_gather"); }
  void reduce_scatter(Tensor, Tensor, ReduceOp) override { calls_.push_back("reduce_scatter"); }
  void all_reduce(Tensor, ReduceOp) override { calls_.push_back("all_reduce"); }
  void broadcast(Tensor, int) override { calls_.push_back("broadcast"); }
  void barrier() override { calls_.push_back("barrier"); }
  void all_to_all_v(Tensor, const std::vector<int64_t>&, Tensor,
                    const std::vector<int64_t>&) override {
    calls_.push_back("all_to_all_v");
  }
  CommWork start_all_gather(Tensor, Tensor) override {
    calls_.push_back("start_all_gather");
    return {1};
  }
  CommWork start_reduce_scatter(Tensor, Tensor, ReduceOp) override {
    calls_.push_back("start_reduce_scatter");
    return {2};
  }
  CommWork start_all_reduce(Tensor, ReduceOp) override {
    calls_.push_back("start_all_reduce");
    return {3};
  }
  void finish(CommWork work) override { calls_.push_back("finish " + std::to_string(work.id)); }
  std::optional<double> take_compute_wait_seconds() override { return 0.25; }
  std::unique_ptr<Comm> split(int, int) override { return std::make_unique<RecordingComm>(calls_); }
  std::string backend_name() const override { return "recording"; }

 private:
  std::vector<std::string>& calls_;
};

TEST(HeartbeatComm, ForwardsOverlappedCollectivesAsSuch) {
  std::vector<std::string> calls;
  Heartbeat heartbeat(nullptr, 0);  // no store: phases are recorded, nothing is published
  std::unique_ptr<Comm> comm = with_heartbeat(std::make_unique<RecordingComm>(calls), heartbeat);
  const CommWork gather = comm->start_all_gather(Tensor(), Tensor());
  const CommWork reduce = comm->start_reduce_scatter(Tensor(), Tensor(), ReduceOp::kSum);
  const CommWork all_reduce = comm->start_all_reduce(Tensor(), ReduceOp::kSum);
  comm->finish(gather);
  comm->finish(reduce);
  comm->finish(all_reduce);
  // The same through a split group (HYBRID_SHARD's sub-groups are wrapped too).
  std::unique_ptr<Comm> child = comm->split(0, 0);
  child->finish(child->start_all_gather(Tensor(), Tensor()));
  const std::vector<std::string> want = {
      "start_all_gather", "start_reduce_scatter", "start_all_reduce", "finish 1", "finish 2",
      "finish 3",         "start_all_gather",     "finish 1"};
  EXPECT_EQ(calls, want);
  EXPECT_EQ(comm->take_compute_wait_seconds(), std::optional<double>(0.25));
}

}  // namespace
}  // namespace shardtrain
