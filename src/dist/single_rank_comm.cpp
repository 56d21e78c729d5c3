#include "dist/single_rank_comm.h"

#include <cstring>

#include "core/error.h"
#include "dist/all_to_all_counts.h"

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
  void all_to_all_v(Tensor out, const std::vector<int64_t>& recv_counts, Tensor in,
                    const std::vector<int64_t>& send_counts) override {
    check_all_to_all_counts(1, out, recv_counts, in, send_counts);
    if (in.numel() > 0) copy(out, in);
  }
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

}  // namespace shardtrain
