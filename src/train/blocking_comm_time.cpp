#include "train/blocking_comm_time.h"

#include <chrono>
#include <utility>

namespace shardtrain {
namespace {

class BlockingCommTime final : public Comm {
 public:
  explicit BlockingCommTime(std::unique_ptr<Comm> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_gather(Tensor out, Tensor in) override {
    timed([&] { inner_->all_gather(out, in); });
  }
  void reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    timed([&] { inner_->reduce_scatter(out, in, op); });
  }
  void all_reduce(Tensor inout, ReduceOp op) override {
    timed([&] { inner_->all_reduce(inout, op); });
  }
  void broadcast(Tensor inout, int root) override {
    timed([&] { inner_->broadcast(inout, root); });
  }
  void barrier() override {
    timed([&] { inner_->barrier(); });
  }
  void all_to_all_v(Tensor out, const std::vector<int64_t>& recv_counts, Tensor in,
                    const std::vector<int64_t>& send_counts) override {
    timed([&] { inner_->all_to_all_v(out, recv_counts, in, send_counts); });
  }
  CommWork start_all_gather(Tensor out, Tensor in) override {
    CommWork work;
    timed([&] { work = inner_->start_all_gather(out, in); });
    return work;
  }
  CommWork start_reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    CommWork work;
    timed([&] { work = inner_->start_reduce_scatter(out, in, op); });
    return work;
  }
  CommWork start_all_reduce(Tensor inout, ReduceOp op) override {
    CommWork work;
    timed([&] { work = inner_->start_all_reduce(inout, op); });
    return work;
  }
  void finish(CommWork work) override {
    timed([&] { inner_->finish(work); });
  }
  std::optional<double> take_compute_wait_seconds() override {
    return std::exchange(seconds_, 0.0);
  }
  std::unique_ptr<Comm> split(int color, int key) override {
    return std::make_unique<BlockingCommTime>(inner_->split(color, key));
  }
  std::string backend_name() const override { return inner_->backend_name(); }
  void set_context(std::string context) override { inner_->set_context(std::move(context)); }

 private:
  template <typename F>
  void timed(F&& call) {
    const auto start = std::chrono::steady_clock::now();
    call();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  std::unique_ptr<Comm> inner_;
  double seconds_ = 0;
};

}  // namespace

std::unique_ptr<Comm> with_blocking_comm_time(std::unique_ptr<Comm> comm) {
  if (comm->backend_name().rfind("gloo", 0) != 0) return comm;
  return std::make_unique<BlockingCommTime>(std::move(comm));
}

}  // namespace shardtrain
