// GlooComm over a FileStore: N threads, each one rank with its own Comm, check every
// collective's values exactly (small integers, so fp32 sums are exact).
#include "dist/gloo_comm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <functional>
#include <thread>
#include <vector>

#include "core/testing/test_support.h"
#include "dist/file_store.h"

namespace shardtrain {
namespace {

// Runs body(comm) on `world` threads, each with its own GlooComm; rethrows the first failure.
void run_ranks(int world, const std::function<void(Comm&)>& body) {
  testing::TempDir dir("shardtrain_gloo_");
  FileStore store(dir.path());
  testing::run_threads(world, [&](int r) {
    std::unique_ptr<Comm> comm = make_gloo_comm(store, r, world, "test");
    body(*comm);
  });
}

Tensor view(std::vector<float>& v) {
  return Tensor(v.data(), DType::kF32, {static_cast<int64_t>(v.size())});
}

class GlooCommTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooCommTest, AllGatherConcatenatesInRankOrder) {
  const int world = GetParam();
  run_ranks(world, [world](Comm& comm) {
    std::vector<float> in = {10.0f * comm.rank(), 10.0f * comm.rank() + 1};
    std::vector<float> out(2 * world, -1);
    comm.all_gather(view(out), view(in));
    for (int r = 0; r < world; ++r) {
      EXPECT_EQ(out[2 * r], 10.0f * r);
      EXPECT_EQ(out[2 * r + 1], 10.0f * r + 1);
    }
    // In place: the input is this rank's slice of the output.
    std::vector<float> inplace(2 * world, 0);
    inplace[2 * comm.rank()] = 5.0f + comm.rank();
    comm.all_gather(view(inplace), view(inplace).rows(2 * comm.rank(), 2 * comm.rank() + 2));
    for (int r = 0; r < world; ++r) EXPECT_EQ(inplace[2 * r], 5.0f + r);
  });
}

TEST_P(GlooCommTest, ReduceScatterSumsAndAveragesSlices) {
  const int world = GetParam();
  run_ranks(world, [world](Comm& comm) {
    // Element i of rank r's input: r + 1 + 100 * i.
    std::vector<float> in(3 * world);
    for (size_t i = 0; i < in.size(); ++i) in[i] = comm.rank() + 1 + 100.0f * i;
    std::vector<float> out(3);
    comm.reduce_scatter(view(out), view(in), ReduceOp::kSum);
    const float rank_sum = world * (world + 1) / 2.0f;
    for (int j = 0; j < 3; ++j) {
      const int i = 3 * comm.rank() + j;
      EXPECT_EQ(out[j], rank_sum + 100.0f * i * world) << "element " << j;
    }
    comm.reduce_scatter(view(out), view(in), ReduceOp::kAvg);
    for (int j = 0; j < 3; ++j) {
      const int i = 3 * comm.rank() + j;
      EXPECT_FLOAT_EQ(out[j], (rank_sum + 100.0f * i * world) / world);
    }
  });
}

TEST_P(GlooCommTest, AllReduceBroadcastBarrier) {
  const int world = GetParam();
  run_ranks(world, [world](Comm& comm) {
    std::vector<float> values = {1.0f + comm.rank(), -2.0f * comm.rank()};
    comm.all_reduce(view(values), ReduceOp::kSum);
    EXPECT_EQ(values[0], world + world * (world - 1) / 2.0f);
    EXPECT_EQ(values[1], -1.0f * world * (world - 1));
    std::vector<float> avg = {2.0f * comm.rank()};
    comm.all_reduce(view(avg), ReduceOp::kAvg);
    EXPECT_FLOAT_EQ(avg[0], world - 1.0f);
    // Max: each entry's largest over the ranks (the FP8 all-gather's amaxes).
    std::vector<float> most = {static_cast<float>(comm.rank()), -1.0f * comm.rank()};
    comm.all_reduce(view(most), ReduceOp::kMax);
    EXPECT_EQ(most[0], world - 1.0f);
    EXPECT_EQ(most[1], 0.0f);
    std::vector<float> b = {comm.rank() == world - 1 ? 42.0f : 0.0f, 7.0f * comm.rank()};
    comm.broadcast(view(b), world - 1);
    EXPECT_EQ(b[0], 42.0f);
    EXPECT_EQ(b[1], 7.0f * (world - 1));
    comm.barrier();
  });
}

// Rank s sends (s + d) % 3 elements to rank d, valued 1000 s + 100 d + i; rank 1 sends nothing
// at all (a rank with no tokens for any expert still joins the exchange).
int64_t a2a_count(int from, int to) { return from == 1 ? 0 : (from + to) % 3; }

TEST_P(GlooCommTest, AllToAllVMovesEachRanksSliceToItsPeer) {
  const int world = GetParam();
  run_ranks(world, [world](Comm& comm) {
    const int me = comm.rank();
    std::vector<int64_t> send(world), recv(world);
    std::vector<float> in;
    for (int d = 0; d < world; ++d) {
      send[d] = a2a_count(me, d);
      recv[d] = a2a_count(d, me);
      for (int64_t i = 0; i < send[d]; ++i) in.push_back(1000.0f * me + 100.0f * d + i);
    }
    int64_t total = 0;
    for (int64_t n : recv) total += n;
    std::vector<float> out(static_cast<size_t>(total), -1.0f);
    comm.all_to_all_v(Tensor(out.data(), DType::kF32, {total}), recv,
                      Tensor(in.data(), DType::kF32, {static_cast<int64_t>(in.size())}), send);
    size_t at = 0;
    for (int s = 0; s < world; ++s) {
      for (int64_t i = 0; i < recv[s]; ++i) {
        EXPECT_EQ(out[at++], 1000.0f * s + 100.0f * me + i) << "from " << s << " element " << i;
      }
    }
    EXPECT_EQ(at, out.size());
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooCommTest, ::testing::Values(1, 2, 4));

TEST(GlooCommSplit, FourRanksSplitIntoTwoByTwoMesh) {
  run_ranks(4, [](Comm& comm) {
    // Shard groups {0,1}, {2,3}; replicate groups {0,2}, {1,3}.
    std::unique_ptr<Comm> shard = comm.split(comm.rank() / 2, comm.rank());
    std::unique_ptr<Comm> replicate = comm.split(comm.rank() % 2, comm.rank());
    EXPECT_EQ(shard->size(), 2);
    EXPECT_EQ(shard->rank(), comm.rank() % 2);
    EXPECT_EQ(replicate->size(), 2);
    EXPECT_EQ(replicate->rank(), comm.rank() / 2);
    std::vector<float> value = {static_cast<float>(comm.rank())};
    shard->all_reduce(view(value), ReduceOp::kSum);
    EXPECT_EQ(value[0], comm.rank() < 2 ? 1.0f : 5.0f);
    std::vector<float> other = {static_cast<float>(comm.rank())};
    replicate->all_reduce(view(other), ReduceOp::kSum);
    EXPECT_EQ(other[0], comm.rank() % 2 == 0 ? 2.0f : 4.0f);
    // key reverses the order inside the group.
    std::unique_ptr<Comm> reversed = comm.split(0, -comm.rank());
    EXPECT_EQ(reversed->rank(), 3 - comm.rank());
  });
}

// A peer that goes away during a collective is a dead rank, not a bug: the survivor prints one
// line naming the collective and its rank and exits with code 1 (not the internal-error line).
TEST(GlooCommDeath, APeerThatLeavesEndsTheCollectiveWithOneLine) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        testing::TempDir dir("shardtrain_gloo_death_");
        FileStore store(dir.path());
        std::unique_ptr<Comm> survivor;
        std::thread leaver([&] {
          std::unique_ptr<Comm> comm = make_gloo_comm(store, 1, 2, "death");
          comm.reset();  // closes its connections without joining the all-reduce
        });
        survivor = make_gloo_comm(store, 0, 2, "death");
        leaver.join();
        std::vector<float> values(1024, 1.0f);
        survivor->all_reduce(view(values), ReduceOp::kSum);
      },
      ::testing::ExitedWithCode(1), "Gloo all_reduce failed on rank 0 of 2 .*another rank");
}

// A rank that never comes (stopped, or stuck loading before it connects) is named by the ranks
// that wait for it, after one timeout: not a bare store timeout on a handshake key.
TEST(GlooCommConnect, ARankThatNeverJoinsIsNamedAfterOneTimeout) {
  testing::TempDir dir("shardtrain_gloo_missing_");
  FileStore store(dir.path());
  GlooCommOptions options;
  options.timeout = std::chrono::milliseconds(1500);
  std::vector<std::string> errors(2);
  const auto start = std::chrono::steady_clock::now();
  testing::run_threads(2, [&](int r) {
    try {
      make_gloo_comm(store, r, 3, "missing", options);  // rank 2 of 3 never calls it
    } catch (const Error& e) {
      errors[static_cast<size_t>(r)] = e.what();
    }
  });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(errors[static_cast<size_t>(r)].find("gloo: rank " + std::to_string(r) +
                                                  " of 3: rank 2 did not join the process group "
                                                  "within 1.5 s"),
              std::string::npos)
        << errors[static_cast<size_t>(r)];
    EXPECT_NE(errors[static_cast<size_t>(r)].find("SHARDTRAIN_COMM_TIMEOUT_S"), std::string::npos);
  }
  EXPECT_LT(seconds, 30.0) << "one handshake timeout, not the store's five minutes";
}

TEST(FileStoreTest, AddCompareSetAndTimeoutNamesKey) {
  testing::TempDir dir("shardtrain_gloo_");
  FileStore store(dir.path());
  EXPECT_EQ(store.add("counter", 3), 3);
  EXPECT_EQ(store.add("counter", -1), 2);
  EXPECT_EQ(store.compare_set("state", "", "open"), "open");
  EXPECT_EQ(store.compare_set("state", "closed", "x"), "open");
  EXPECT_EQ(store.compare_set("state", "open", "closed"), "closed");
  store.set("a/b", std::string("bin\0ary", 7));
  EXPECT_EQ(store.get("a/b", std::chrono::milliseconds(10)), std::string("bin\0ary", 7));
  EXPECT_TRUE(store.remove("a/b"));
  EXPECT_FALSE(store.try_get("a/b").has_value());
  try {
    store.get("missing/key", std::chrono::milliseconds(20));
    FAIL() << "expected a timeout";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("missing/key"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.path()), std::string::npos) << e.what();
  }
}

TEST(FileStoreTest, ConcurrentAddsAreAtomic) {
  testing::TempDir dir("shardtrain_gloo_");
  FileStore store(dir.path());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) store.add("n", 1);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(store.add("n", 0), 200);
}

}  // namespace
}  // namespace shardtrain
