// HostStagedComm over real GlooComms (N threads, one rank each, FileStore rendezvous) and the CPU
// Ops backend. The CPU backend's "device" memory is host memory, so to show that collectives
// really go through the staging buffers, the wrapped Gloo comm is itself wrapped in a probe that
// records every pointer and dtype Gloo is handed: none may lie in the caller's buffers, and all
// must be fp32 (GlooComm rejects anything else). Values are small integers or exact bf16
// numbers, so every expected result is exact.
#include "dist/host_staged_comm.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/testing/test_support.h"
#include "dist/file_store.h"
#include "dist/gloo_comm.h"
#include "ops/cpu/cpu_ops.h"
#include "ops/device_buffer.h"

namespace shardtrain {
namespace {

// What the probe saw of the tensors passed to the wrapped (host) Comm.
struct HostSide {
  std::vector<const void*> pointers;
  bool all_f32_on_cpu = true;
  std::string context;
};

// Forwards to a host Comm, recording what it is handed.
class ProbeComm final : public Comm {
 public:
  ProbeComm(std::unique_ptr<Comm> inner, HostSide& seen) : inner_(std::move(inner)), seen_(seen) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_gather(Tensor out, Tensor in) override {
    record(out);
    record(in);
    inner_->all_gather(out, in);
  }
  void reduce_scatter(Tensor out, Tensor in, ReduceOp op) override {
    record(out);
    record(in);
    inner_->reduce_scatter(out, in, op);
  }
  void all_reduce(Tensor inout, ReduceOp op) override {
    record(inout);
    inner_->all_reduce(inout, op);
  }
  void broadcast(Tensor inout, int root) override {
    record(inout);
    inner_->broadcast(inout, root);
  }
  void barrier() override { inner_->barrier(); }
  void all_to_all_v(Tensor out, const std::vector<int64_t>& recv_counts, Tensor in,
                    const std::vector<int64_t>& send_counts) override {
    record(out);
    record(in);
    inner_->all_to_all_v(out, recv_counts, in, send_counts);
  }
  std::unique_ptr<Comm> split(int color, int key) override {
    return std::make_unique<ProbeComm>(inner_->split(color, key), seen_);
  }
  std::string backend_name() const override { return inner_->backend_name(); }
  void set_context(std::string context) override {
    seen_.context = context;
    inner_->set_context(std::move(context));
  }

 private:
  void record(const Tensor& t) {
    seen_.pointers.push_back(t.data());
    seen_.all_f32_on_cpu &= t.dtype() == DType::kF32 && t.device() == Device::kCpu;
  }
  std::unique_ptr<Comm> inner_;
  HostSide& seen_;
};

// One rank's view: its staged Comm, its compute backend and what the host Comm was handed.
struct Rank {
  Comm& comm;
  Ops& ops;
  HostSide& host_side;
};

// Runs body on `world` threads, each with a HostStagedComm over (probe over) its own GlooComm;
// rethrows the first failure.
void run_ranks(int world, const std::function<void(Rank&)>& body) {
  testing::TempDir dir("shardtrain_staged_");
  FileStore store(dir.path());
  testing::run_threads(world, [&](int r) {
    std::unique_ptr<Ops> ops = make_cpu_ops();
    HostSide host_side;
    std::unique_ptr<Comm> comm = make_host_staged_comm(
        std::make_unique<ProbeComm>(make_gloo_comm(store, r, world, "test"), host_side), *ops);
    Rank rank{*comm, *ops, host_side};
    body(rank);
  });
}

// A "device" tensor of `dtype` holding `values` (exactly representable in dtype).
struct DeviceTensor {
  DeviceBuffer buffer;
  Tensor tensor;
  DeviceTensor(Ops& ops, DType dtype, const std::vector<float>& values)
      : buffer(ops, values.size() * dtype_size(dtype)),
        tensor(buffer.view(dtype, {static_cast<int64_t>(values.size())})) {
    std::vector<char> bytes(tensor.bytes());
    convert_from_f32(values.data(), dtype, bytes.data(), values.size());
    ops.copy_from_host(tensor, bytes.data());
  }
  std::vector<float> read(Ops& ops) const { return read_tensor(ops, tensor); }
  static std::vector<float> read_tensor(Ops& ops, const Tensor& t) {
    std::vector<char> bytes(t.bytes());
    ops.copy_to_host(bytes.data(), t);
    std::vector<float> values(static_cast<size_t>(t.numel()));
    convert_to_f32(bytes.data(), t.dtype(), values.data(), values.size());
    return values;
  }
  bool contains(const void* p) const {
    const char* begin = static_cast<const char*>(buffer.data());
    return p >= begin && p < begin + buffer.bytes();
  }
};

// The host Comm saw only fp32 host staging buffers, never the caller's tensors.
void expect_staged(const Rank& rank, std::initializer_list<const DeviceTensor*> callers) {
  EXPECT_TRUE(rank.host_side.all_f32_on_cpu);
  EXPECT_FALSE(rank.host_side.pointers.empty());
  for (const void* p : rank.host_side.pointers)
    for (const DeviceTensor* t : callers) EXPECT_FALSE(t->contains(p)) << "unstaged pointer";
}

class HostStagedCommTest : public ::testing::TestWithParam<DType> {};

TEST_P(HostStagedCommTest, AllGatherInRankOrderAndInPlace) {
  const DType dtype = GetParam();
  for (int world : {2, 4}) {
    run_ranks(world, [&](Rank& rank) {
      const int me = rank.comm.rank();
      // 0.5-steps are exact in bf16.
      DeviceTensor in(rank.ops, dtype, {1.5f * me, -0.5f * me - 3});
      DeviceTensor out(rank.ops, dtype, std::vector<float>(2 * world, -7.0f));
      rank.comm.all_gather(out.tensor, in.tensor);
      const std::vector<float> got = out.read(rank.ops);
      for (int r = 0; r < world; ++r) {
        EXPECT_EQ(got[2 * r], 1.5f * r);
        EXPECT_EQ(got[2 * r + 1], -0.5f * r - 3);
      }
      expect_staged(rank, {&in, &out});

      // In place: the input is this rank's slice of the output (FSDP's compute shard layout).
      std::vector<float> initial(3 * world, 0.0f);
      for (int i = 0; i < 3; ++i) initial[3 * me + i] = 10.0f * me + i;
      DeviceTensor inplace(rank.ops, dtype, initial);
      rank.comm.all_gather(inplace.tensor, inplace.tensor.rows(3 * me, 3 * me + 3));
      const std::vector<float> gathered = inplace.read(rank.ops);
      for (int r = 0; r < world; ++r)
        for (int i = 0; i < 3; ++i) EXPECT_EQ(gathered[3 * r + i], 10.0f * r + i);
      expect_staged(rank, {&inplace});
    });
  }
}

TEST_P(HostStagedCommTest, AllToAllVMovesEachRanksSliceToItsPeer) {
  const DType dtype = GetParam();
  for (int world : {2, 4}) {
    run_ranks(world, [&](Rank& rank) {
      const int me = rank.comm.rank();
      // Rank s sends s + d + 1 elements to rank d, valued 8 s + d + 0.5 i (exact in bf16).
      std::vector<int64_t> send(world), recv(world);
      std::vector<float> values;
      int64_t received = 0;
      for (int d = 0; d < world; ++d) {
        send[d] = me + d + 1;
        recv[d] = d + me + 1;
        received += recv[d];
        for (int64_t i = 0; i < send[d]; ++i) values.push_back(8.0f * me + d + 0.5f * i);
      }
      DeviceTensor in(rank.ops, dtype, values);
      DeviceTensor out(rank.ops, dtype, std::vector<float>(received, -1.0f));
      rank.comm.all_to_all_v(out.tensor, recv, in.tensor, send);
      const std::vector<float> got = out.read(rank.ops);
      size_t at = 0;
      for (int s = 0; s < world; ++s)
        for (int64_t i = 0; i < recv[s]; ++i) EXPECT_EQ(got[at++], 8.0f * s + me + 0.5f * i);
      expect_staged(rank, {&in, &out});
    });
  }
}

TEST_P(HostStagedCommTest, ReduceScatterSumsAndAveragesSlices) {
  const DType dtype = GetParam();
  constexpr int kWorld = 4;
  run_ranks(kWorld, [&](Rank& rank) {
    const int me = rank.comm.rank();
    // Element i of rank r's input: r + 1 + 8 * i (sums stay exact in bf16: below 256).
    std::vector<float> values(2 * kWorld);
    for (size_t i = 0; i < values.size(); ++i) values[i] = me + 1 + 8.0f * i;
    DeviceTensor in(rank.ops, dtype, values);
    DeviceTensor out(rank.ops, dtype, {0, 0});
    rank.comm.reduce_scatter(out.tensor, in.tensor, ReduceOp::kSum);
    std::vector<float> got = out.read(rank.ops);
    const float rank_sum = kWorld * (kWorld + 1) / 2.0f;
    for (int j = 0; j < 2; ++j) EXPECT_EQ(got[j], rank_sum + 8.0f * (2 * me + j) * kWorld);
    rank.comm.reduce_scatter(out.tensor, in.tensor, ReduceOp::kAvg);
    got = out.read(rank.ops);
    for (int j = 0; j < 2; ++j)
      EXPECT_EQ(got[j], (rank_sum + 8.0f * (2 * me + j) * kWorld) / kWorld);
    expect_staged(rank, {&in, &out});
  });
}

TEST_P(HostStagedCommTest, AllReduceBroadcastAndContext) {
  const DType dtype = GetParam();
  constexpr int kWorld = 2;
  run_ranks(kWorld, [&](Rank& rank) {
    const int me = rank.comm.rank();
    rank.comm.set_context("unit 1 (layers.0) parameter all-gather");
    EXPECT_EQ(rank.host_side.context, "unit 1 (layers.0) parameter all-gather");
    DeviceTensor sum(rank.ops, dtype, {1.0f + me, -2.0f * me, 0.25f});
    rank.comm.all_reduce(sum.tensor, ReduceOp::kSum);
    EXPECT_EQ(sum.read(rank.ops), (std::vector<float>{3.0f, -2.0f, 0.5f}));
    DeviceTensor avg(rank.ops, dtype, {2.0f * me});
    rank.comm.all_reduce(avg.tensor, ReduceOp::kAvg);
    EXPECT_EQ(avg.read(rank.ops), std::vector<float>{1.0f});
    DeviceTensor most(rank.ops, dtype, {0.5f * me, -1.0f * me});
    rank.comm.all_reduce(most.tensor, ReduceOp::kMax);
    EXPECT_EQ(most.read(rank.ops), (std::vector<float>{0.5f, 0.0f}));
    DeviceTensor b(rank.ops, dtype, {me == 1 ? 42.0f : 0.0f, 7.0f * me});
    rank.comm.broadcast(b.tensor, 1);
    EXPECT_EQ(b.read(rank.ops), (std::vector<float>{42.0f, 7.0f}));
    rank.comm.barrier();
    expect_staged(rank, {&sum, &avg, &most, &b});
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HostStagedCommTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(HostStagedComm, Bf16SumsAccumulateInFp32AndRoundOnce) {
  // 256 + 1 + 1 + 1 = 259, which rounds (to nearest even) to 260 in bf16. Summing in bf16 would
  // lose every 1 (256 + 1 rounds back to 256) and give 256.
  run_ranks(4, [](Rank& rank) {
    DeviceTensor x(rank.ops, DType::kBF16, {rank.comm.rank() == 0 ? 256.0f : 1.0f});
    rank.comm.all_reduce(x.tensor, ReduceOp::kSum);
    EXPECT_EQ(x.read(rank.ops), std::vector<float>{260.0f});
  });
}

TEST(HostStagedComm, SplitReturnsStagedSubGroups) {
  run_ranks(4, [](Rank& rank) {
    EXPECT_EQ(rank.comm.backend_name(), "gloo (host-staged)");
    const int me = rank.comm.rank();
    // Shard groups {0,1}, {2,3}; replicate groups {0,2}, {1,3} (the Mesh's groups, dist/mesh.h).
    std::unique_ptr<Comm> shard = rank.comm.split(me / 2, me);
    std::unique_ptr<Comm> replicate = rank.comm.split(me % 2, me);
    EXPECT_EQ(shard->backend_name(), "gloo (host-staged)");
    EXPECT_EQ(shard->size(), 2);
    EXPECT_EQ(shard->rank(), me % 2);
    EXPECT_EQ(replicate->rank(), me / 2);
    rank.host_side.pointers.clear();
    DeviceTensor value(rank.ops, DType::kBF16, {static_cast<float>(me)});
    shard->all_reduce(value.tensor, ReduceOp::kSum);
    EXPECT_EQ(value.read(rank.ops), std::vector<float>{me < 2 ? 1.0f : 5.0f});
    DeviceTensor gathered(rank.ops, DType::kF32, {0, 0});
    DeviceTensor mine(rank.ops, DType::kF32, {10.0f * me});
    replicate->all_gather(gathered.tensor, mine.tensor);
    EXPECT_EQ(gathered.read(rank.ops),
              (std::vector<float>{10.0f * (me % 2), 10.0f * (me % 2 + 2)}));
    expect_staged(rank, {&value, &gathered, &mine});
  });
}

TEST(HostStagedComm, StagingBuffersAreReusedAndEmptyTensorsAreNoOps) {
  run_ranks(2, [](Rank& rank) {
    DeviceTensor x(rank.ops, DType::kF32, std::vector<float>(64, 1.0f));
    rank.comm.all_reduce(x.tensor, ReduceOp::kSum);
    rank.comm.all_reduce(x.tensor.rows(0, 32), ReduceOp::kSum);  // smaller: same buffer
    rank.comm.all_reduce(x.tensor, ReduceOp::kSum);
    ASSERT_EQ(rank.host_side.pointers.size(), 3u);
    EXPECT_EQ(rank.host_side.pointers[0], rank.host_side.pointers[1]);
    EXPECT_EQ(rank.host_side.pointers[0], rank.host_side.pointers[2]);
    const std::vector<float> got = x.read(rank.ops);
    EXPECT_EQ(got[0], 8.0f);   // 1 -> 2 -> 4 -> 8
    EXPECT_EQ(got[63], 4.0f);  // 1 -> 2 -> 4 (outside the smaller all-reduce)

    const Tensor empty = x.tensor.rows(0, 0);
    rank.comm.all_reduce(empty, ReduceOp::kSum);
    rank.comm.broadcast(empty, 0);
    rank.comm.all_gather(empty, empty);
    rank.comm.reduce_scatter(empty, empty, ReduceOp::kSum);
    EXPECT_EQ(rank.host_side.pointers.size(), 3u) << "empty collectives reached the host comm";
  });
}

}  // namespace
}  // namespace shardtrain
