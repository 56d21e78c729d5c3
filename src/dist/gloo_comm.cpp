#include "dist/gloo_comm.h"

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "dist/all_to_all_counts.h"
#include "dist/host_name.h"
#include "dist/join_roll.h"

namespace shardtrain {
namespace {

constexpr Store::Duration kRendezvousTimeout = std::chrono::minutes(5);

// gloo::rendezvous::Store over our Store, with all keys under `prefix`.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(shardtrain::Store& store, std::string prefix)
      : store_(store), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string value = store_.get(prefix_ + key, kRendezvousTimeout);
    return std::vector<char>(value.begin(), value.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, kRendezvousTimeout); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> prefixed;
    for (const std::string& k : keys) prefixed.push_back(prefix_ + k);
    store_.wait(prefixed, std::chrono::duration_cast<shardtrain::Store::Duration>(timeout));
  }

 private:
  shardtrain::Store& store_;
  std::string prefix_;
};

std::shared_ptr<gloo::transport::Device> make_device(const GlooCommOptions& options) {
  gloo::transport::tcp::attr attr;
  if (!options.iface.empty()) {
    attr.iface = options.iface;
  } else if (options.one_node) {
    attr.hostname = "127.0.0.1";
  } else {
    attr.hostname = host_name();
    require_host_resolves(attr.hostname);
  }
  return gloo::transport::tcp::CreateDevice(attr);
}

void check_cpu_f32(const Tensor& t, const char* what) {
  SHARDTRAIN_CHECK(t.device() == Device::kCpu && t.dtype() == DType::kF32,
                   "GlooComm::{} needs fp32 CPU tensors", what);
}

class GlooComm final : public Comm {
 public:
  GlooComm(Store& store, int rank, int size, std::string prefix, GlooCommOptions options)
      : store_(store),
        prefix_(std::move(prefix)),
        options_(std::move(options)),
        rank_(rank),
        size_(size) {
    SHARDTRAIN_CHECK(size >= 1 && rank >= 0 && rank < size, "rank {} size {}", rank, size);
    // Gloo's full-mesh handshake can lose a connection when hosts are loaded ("Connection
    // closed by peer"). Every rank publishes whether its handshake succeeded; if any failed,
    // all of them retry together under a fresh prefix, so the group never half-connects.
    constexpr int kAttempts = 3;
    for (int attempt = 0;; ++attempt) {
      const std::string attempt_prefix = prefix_ + "/gloo" + std::to_string(attempt);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, size);
      context->setTimeout(options_.timeout);
      GlooStoreAdapter adapter(store_, attempt_prefix + "/");
      std::shared_ptr<gloo::transport::Device> device = make_device(options_);
      std::string error;
      JoinRoll roll(store_, attempt_prefix, size);
      roll.mark(rank);
      try {
        context->connectFullMesh(adapter, device);
      } catch (const std::exception& e) {
        error = e.what();
      }
      store_.set(attempt_prefix + "/ok/" + std::to_string(rank), error.empty() ? "1" : "0");
      if (!error.empty()) fail_if_ranks_never_joined(roll);
      bool all_connected = true;
      for (int r = 0; r < size; ++r) {
        all_connected &=
            store_.get(attempt_prefix + "/ok/" + std::to_string(r), kRendezvousTimeout) == "1";
      }
      if (all_connected) {
        context_ = std::move(context);
        return;
      }
      if (attempt + 1 == kAttempts) {
        fail(
            "gloo: rank {} of {} could not connect to its peers through {} (prefix '{}') after "
            "{} attempts: {}; HINT: check that the hosts can reach each other on TCP",
            rank, size, store_.endpoint(), prefix_, kAttempts,
            error.empty() ? "a peer failed" : error);
      }
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend_name() const override { return "gloo"; }

  void all_gather(Tensor out, Tensor in) override {
    check_cpu_f32(out, "all_gather");
    check_cpu_f32(in, "all_gather");
    SHARDTRAIN_CHECK(out.numel() == in.numel() * size_, "all_gather sizes {} vs {} x {}",
                     out.numel(), in.numel(), size_);
    if (in.numel() == 0) return;
    float* out_data = static_cast<float*>(out.data());
    float* own_slice = out_data + static_cast<size_t>(rank_) * in.numel();
    // Gloo gathers in place when no input is set: the caller's slice is already in `out`.
    if (in.data() != own_slice) {
      std::memcpy(own_slice, in.data(), in.bytes());
    }
    if (size_ == 1) return;
    gloo::AllgatherOptions opts(context_);
    opts.setOutput(out_data, static_cast<size_t>(out.numel()));
    run("all_gather", [&] { gloo::allgather(opts); });
  }

  void reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    check_cpu_f32(out, "reduce_scatter");
    check_cpu_f32(in, "reduce_scatter");
    SHARDTRAIN_CHECK(in.numel() == out.numel() * size_, "reduce_scatter sizes {} vs {} x {}",
                     in.numel(), out.numel(), size_);
    // Gloo 0.5 has no reduce-scatter with a free output layout: all-reduce a copy, keep our
    // slice. Twice the bytes of a ring reduce-scatter; fine for CPU ranks and tests.
    scratch_.assign(static_cast<const float*>(in.data()),
                    static_cast<const float*>(in.data()) + in.numel());
    all_reduce_raw(scratch_.data(), scratch_.size());
    const float* slice = scratch_.data() + static_cast<size_t>(rank_) * out.numel();
    float* dst = static_cast<float*>(out.data());
    SHARDTRAIN_CHECK(op != ReduceOp::kMax, "reduce_scatter takes sums and averages");
    const float factor = op == ReduceOp::kAvg ? 1.0f / static_cast<float>(size_) : 1.0f;
    for (int64_t i = 0; i < out.numel(); ++i) dst[i] = slice[i] * factor;
  }

  void all_reduce(Tensor inout, ReduceOp op) override {
    check_cpu_f32(inout, "all_reduce");
    float* data = static_cast<float*>(inout.data());
    all_reduce_raw(data, static_cast<size_t>(inout.numel()), op == ReduceOp::kMax);
    if (op == ReduceOp::kAvg) {
      const float factor = 1.0f / static_cast<float>(size_);
      for (int64_t i = 0; i < inout.numel(); ++i) data[i] *= factor;
    }
  }

  void broadcast(Tensor inout, int root) override {
    check_cpu_f32(inout, "broadcast");
    SHARDTRAIN_CHECK(root >= 0 && root < size_, "broadcast root {}", root);
    if (size_ == 1 || inout.numel() == 0) return;
    gloo::BroadcastOptions opts(context_);
    opts.setOutput(static_cast<float*>(inout.data()), static_cast<size_t>(inout.numel()));
    opts.setRoot(root);
    run("broadcast", [&] { gloo::broadcast(opts); });
  }

  void all_to_all_v(Tensor out, const std::vector<int64_t>& recv_counts, Tensor in,
                    const std::vector<int64_t>& send_counts) override {
    check_cpu_f32(out, "all_to_all_v");
    check_cpu_f32(in, "all_to_all_v");
    check_all_to_all_counts(size_, out, recv_counts, in, send_counts);
    if (size_ == 1) {
      if (in.numel() > 0) std::memcpy(out.data(), in.data(), in.bytes());
      return;
    }
    // Gloo needs a buffer even where this rank sends or receives nothing.
    float empty = 0;
    float* in_data = in.numel() > 0 ? static_cast<float*>(in.data()) : &empty;
    float* out_data = out.numel() > 0 ? static_cast<float*>(out.data()) : &empty;
    gloo::AlltoallvOptions opts(context_);
    opts.setInput(in_data, send_counts);
    opts.setOutput(out_data, recv_counts);
    run("all_to_all_v", [&] { gloo::alltoallv(opts); });
  }

  void barrier() override {
    if (size_ == 1) return;
    gloo::BarrierOptions opts(context_);
    run("barrier", [&] { gloo::barrier(opts); });
  }

  std::unique_ptr<Comm> split(int color, int key) override {
    const std::string base = prefix_ + "/split" + std::to_string(++split_count_);
    store_.set(base + "/member/" + std::to_string(rank_),
               std::to_string(color) + " " + std::to_string(key));
    struct Member {
      int key, rank;
    };
    std::vector<Member> members;
    for (int r = 0; r < size_; ++r) {
      const std::string value =
          store_.get(base + "/member/" + std::to_string(r), kRendezvousTimeout);
      int other_color = 0, other_key = 0;
      if (std::sscanf(value.c_str(), "%d %d", &other_color, &other_key) != 2) {
        fail("gloo split: malformed member record '{}' in {}", value, store_.endpoint());
      }
      if (other_color == color) members.push_back({other_key, r});
    }
    std::sort(members.begin(), members.end(), [](const Member& a, const Member& b) {
      return a.key != b.key ? a.key < b.key : a.rank < b.rank;
    });
    int new_rank = 0;
    while (members[new_rank].rank != rank_) ++new_rank;
    return std::make_unique<GlooComm>(store_, new_rank, static_cast<int>(members.size()),
                                      base + "/color" + std::to_string(color), options_);
  }

 private:
  // After this rank's handshake failed: when some ranks never reached it (a rank still loading,
  // stopped, or stuck on a file system), says which at once; a retry cannot help, and waiting
  // for their handshake results would double the wait.
  void fail_if_ranks_never_joined(const JoinRoll& roll) {
    const std::string missing = roll.describe_missing();
    if (missing.empty()) return;
    fail("gloo: rank {} of {}: {} the process group within {:g} s (store {}, prefix '{}'); "
         "HINT: {}",
         rank_, size_, missing, std::chrono::duration<double>(options_.timeout).count(),
         store_.endpoint(), prefix_, kJoinHint);
  }

  void all_reduce_raw(float* data, size_t count, bool max = false) {
    if (size_ == 1 || count == 0) return;
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(data, count);
    using Reduce = void (*)(void*, const void*, const void*, size_t);
    const Reduce reduce =
        max ? static_cast<Reduce>(&gloo::max<float>) : static_cast<Reduce>(&gloo::sum<float>);
    opts.setReduceFunction(reduce);
    run("all_reduce", [&] { gloo::allreduce(opts); });
  }

  // A collective whose peer went away (its connection closed or timed out: Gloo's IoException)
  // means another rank died or hangs, neither a bug here nor a user error: one line naming the
  // collective and this rank, and the process ends with code 1 at once (the launcher restarts
  // or reports the group; waiting on would only hang), as a failed NCCL collective aborts.
  template <typename Collective>
  void run(const char* name, Collective&& collective) {
    try {
      collective();
    } catch (const gloo::IoException& e) {
      std::fprintf(stderr,
                   "shardtrain: Gloo %s failed on rank %d of %d (group '%s'): %s\nHINT: another "
                   "rank probably died or is stuck: check its log first\n",
                   name, rank_, size_, prefix_.c_str(), e.what());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }

  Store& store_;
  std::string prefix_;
  GlooCommOptions options_;
  int rank_, size_;
  int split_count_ = 0;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::vector<float> scratch_;
};

}  // namespace

std::unique_ptr<Comm> make_gloo_comm(Store& store, int rank, int size, std::string prefix,
                                     GlooCommOptions options) {
  return std::make_unique<GlooComm>(store, rank, size, std::move(prefix), std::move(options));
}

}  // namespace shardtrain
