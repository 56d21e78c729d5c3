// Test support (header-only): CpuOps whose aside work really is deferred, so a CPU test sees what
// a second CUDA stream would make of a missing wait. adamw_multi_aside queues the update instead
// of running it; wait_aside(ticket) runs the queued updates up to that ticket, join_aside and the
// synchronising calls (copy_to_host, read_scalar, synchronize) run all of them. An op that reads
// a unit's parameters before waiting for its update reads the old values, and the training it
// belongs to diverges from in-order training by the first bit. With honour_waits = false,
// wait_aside does nothing (the updates run at the next join): the control that shows the
// deferral is observable.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <vector>

#include "ops/cpu/cpu_ops.h"

namespace shardtrain::testing {

class DeferredAsideCpuOps final : public CpuOps {
 public:
  // report: at destruction, one line on stderr says how many updates ran at their wait (what a
  // test reads from a worker process's log).
  explicit DeferredAsideCpuOps(bool honour_waits = true, bool report = false)
      : honour_waits_(honour_waits), report_(report) {}
  ~DeferredAsideCpuOps() override {
    if (report_) {
      std::fprintf(stderr, "deferred aside: %lld of %lld updates ran at their unit's wait\n",
                   static_cast<long long>(run_by_waits_), static_cast<long long>(issued()));
    }
  }

  bool runs_aside() const override { return true; }
  int64_t adamw_multi_aside(const std::vector<AdamWSegment>& segments,
                            const AdamWStep& step) override {
    queue_.push_back({next_ticket_, segments, step});
    return next_ticket_++;
  }
  void wait_aside(int64_t ticket) override {
    if (!honour_waits_) return;
    while (!queue_.empty() && queue_.front().ticket <= ticket) {
      run_front();
      ++run_by_waits_;
    }
  }
  void join_aside() override {
    while (!queue_.empty()) run_front();
  }
  void copy_to_host(void* dst, Tensor src) override {
    join_aside();
    CpuOps::copy_to_host(dst, src);
  }
  float read_scalar(Tensor x_1) override {
    join_aside();
    return CpuOps::read_scalar(x_1);
  }
  void synchronize() override { join_aside(); }

  // Updates enqueued aside so far, and those of them run by wait_aside (not by a join: a host
  // synchronisation before the wait would have made the update run in order).
  int64_t issued() const { return next_ticket_ - 1; }
  int64_t run_by_waits() const { return run_by_waits_; }

 private:
  struct Update {
    int64_t ticket;
    std::vector<AdamWSegment> segments;
    AdamWStep step;
  };
  void run_front() {
    const Update update = queue_.front();
    queue_.pop_front();
    adamw_multi(update.segments, update.step);
  }

  bool honour_waits_;
  bool report_;
  std::deque<Update> queue_;
  int64_t next_ticket_ = 1;
  int64_t run_by_waits_ = 0;
};

}  // namespace shardtrain::testing
