// NcclComm on two GPUs, two processes (one rank per GPU): every collective's values, f32
// exactly and bf16 within one bf16 rounding; split() with key ordering; and the watchdog: a
// barrier the peer never joins aborts with a message naming the rank, the collective and the
// context instead of hanging.
//
// The parent process never touches CUDA (a CUDA context does not survive fork): it counts GPUs
// in a forked child, then forks the ranks, which rendezvous through a FileStore in a temp dir.
// Rank processes run the checks with gtest's EXPECT macros and exit non-zero if any failed;
// their output goes to a log the parent prints on failure. Skipped (visibly) with fewer than
// two GPUs or without NCCL in the build.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/file_store.h"
#include "dist/nccl_comm.h"
#include "ops/backend.h"
#include "ops/device_buffer.h"
#include "ops/testing/test_device_limits.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

constexpr int kWorld = 2;

// Visible GPUs, counted in a child so this process keeps no CUDA state across fork().
int count_gpus_in_child() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(std::min(visible_gpu_count(), 100));
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

uint16_t bf16_bits(float value) {  // round to nearest even
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}
float bf16_value(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

// Deterministic per-rank inputs that every rank can compute for every other rank.
float f32_input(int rank, int64_t i) {  // small integers and halves: sums are exact in fp32
  return static_cast<float>((rank + 1) * (i % 17)) - 0.5f * static_cast<float>(rank + i % 3);
}
float bf16_input(int rank, int64_t i) {  // bf16-representable values in (-1, 1)
  const double x = std::sin(0.37 * static_cast<double>(i) + 1.3 * rank);
  return bf16_value(bf16_bits(static_cast<float>(x)));
}

struct RankRun {
  std::vector<int> statuses;
  std::vector<std::string> logs;
};

using RankBody = std::function<void(int rank, Comm& comm, Ops& ops)>;

class NcclCommTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if !defined(SHARDTRAIN_WITH_NCCL)
    GTEST_SKIP() << "this build has no NCCL (CMake did not find it): NcclComm not tested";
#endif
    const int gpus = count_gpus_in_child();
    if (gpus < kWorld) {
      GTEST_SKIP() << "NcclComm needs " << kWorld << " GPUs, " << gpus
                   << " visible: not tested here";
    }
    char pattern[] = "/tmp/shardtrain_nccl_XXXXXX";
    dir_ = ::mkdtemp(pattern);
    ::setenv("NCCL_NVLS_ENABLE", "0", 1);  // shared machines: no NVLink SHARP multicast
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // Forks kWorld ranks; each binds GPU `rank`, connects an NcclComm through a FileStore and
  // runs `body`. Returns every rank's exit status and log.
  RankRun run_ranks(const std::string& name, const RankBody& body,
                    std::chrono::seconds limit = std::chrono::seconds(120),
                    std::chrono::seconds comm_timeout = std::chrono::seconds(600)) {
    const std::string store_dir = dir_ + "/" + name + "_store";
    RankRun run;
    std::vector<pid_t> pids;
    for (int rank = 0; rank < kWorld; ++rank) {
      const std::string log = dir_ + "/" + name + "_rank" + std::to_string(rank) + ".log";
      const pid_t pid = ::fork();
      if (pid == 0) {
        const int fd = ::open(log.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        NcclCommOptions options;
        std::unique_ptr<Ops> ops = make_ops(DeviceChoice::kCuda, rank, &options.compute);
        options.job_rank = rank;
        options.timeout = comm_timeout;
        FileStore store(store_dir);
        std::unique_ptr<Comm> comm = make_nccl_comm(store, rank, kWorld, name, options);
        body(rank, *comm, *ops);
        comm.reset();
        std::fflush(stdout);
        ::_exit(::testing::Test::HasFailure() ? 1 : 0);
      }
      pids.push_back(pid);
    }
    run.statuses.assign(kWorld, -1);
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (int done = 0; done < kWorld;) {
      for (int r = 0; r < kWorld; ++r) {
        int status = 0;
        if (run.statuses[r] == -1 && ::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
          run.statuses[r] = status;
          ++done;
        }
      }
      if (done < kWorld && std::chrono::steady_clock::now() > deadline) {
        ADD_FAILURE() << name << ": ranks still running after " << limit.count() << " s";
        for (int r = 0; r < kWorld; ++r) {
          if (run.statuses[r] == -1) {
            ::kill(pids[r], SIGKILL);
            ::waitpid(pids[r], &run.statuses[r], 0);
          }
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (int r = 0; r < kWorld; ++r) {
      std::ifstream in(dir_ + "/" + name + "_rank" + std::to_string(r) + ".log");
      std::stringstream text;
      text << in.rdbuf();
      run.logs.push_back(text.str());
    }
    return run;
  }

  void expect_all_ok(const std::string& name, const RankRun& run) {
    for (int r = 0; r < kWorld; ++r) {
      const int status = run.statuses[r];
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
          << name << " rank " << r << " failed (status " << status << "):\n"
          << run.logs[r];
    }
  }

  std::string dir_;
};

// Host <-> device helpers for a rank body.
std::vector<float> to_host_f32(Ops& ops, const Tensor& t) {
  std::vector<float> host(t.numel());
  ops.copy_to_host(host.data(), t);
  return host;
}
std::vector<float> to_host_bf16(Ops& ops, const Tensor& t) {
  std::vector<uint16_t> bits(t.numel());
  ops.copy_to_host(bits.data(), t);
  std::vector<float> values;
  for (uint16_t b : bits) values.push_back(bf16_value(b));
  return values;
}

TEST_F(NcclCommTest, F32CollectivesAreExact) {
  const RankRun run = run_ranks("f32", [](int rank, Comm& comm, Ops& ops) {
    ASSERT_EQ(comm.size(), kWorld);
    ASSERT_EQ(comm.rank(), rank);
    constexpr int64_t n = 1003;  // odd: no alignment luck
    std::vector<float> mine(n), full(kWorld * n);
    for (int64_t i = 0; i < n; ++i) mine[i] = f32_input(rank, i);
    for (int r = 0; r < kWorld; ++r)
      for (int64_t i = 0; i < kWorld * n; ++i) full[i] += f32_input(r, i);  // sums over ranks

    // all_gather, out of place and in place (input = own slice of the output).
    DeviceBuffer in_buffer(ops, n * sizeof(float)), out_buffer(ops, kWorld * n * sizeof(float));
    const Tensor in_n = in_buffer.view(DType::kF32, {n});
    const Tensor out_wn = out_buffer.view(DType::kF32, {kWorld * n});
    ops.copy_from_host(in_n, mine.data());
    comm.all_gather(out_wn, in_n);
    std::vector<float> gathered = to_host_f32(ops, out_wn);
    for (int r = 0; r < kWorld; ++r)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(gathered[r * n + i], f32_input(r, i)) << r << " " << i;
    ops.fill_zero(out_wn);
    const Tensor own_slice = out_wn.rows(rank * n, (rank + 1) * n);
    ops.copy_from_host(own_slice, mine.data());
    comm.all_gather(out_wn, own_slice);
    gathered = to_host_f32(ops, out_wn);
    for (int r = 0; r < kWorld; ++r)
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(gathered[r * n + i], f32_input(r, i)) << r << " " << i;

    // reduce_scatter: sum and avg of every rank's (world * n) input, this rank's slice.
    std::vector<float> wide(kWorld * n);
    for (int64_t i = 0; i < kWorld * n; ++i) wide[i] = f32_input(rank, i);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      ops.copy_from_host(out_wn, wide.data());
      comm.reduce_scatter(in_n, out_wn, op);
      const std::vector<float> reduced = to_host_f32(ops, in_n);
      const float factor = op == ReduceOp::kAvg ? 1.0f / kWorld : 1.0f;
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(reduced[i], full[rank * n + i] * factor) << "reduce_scatter " << i;
    }

    // all_reduce: sum and avg.
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      ops.copy_from_host(out_wn, wide.data());
      comm.all_reduce(out_wn, op);
      const std::vector<float> reduced = to_host_f32(ops, out_wn);
      const float factor = op == ReduceOp::kAvg ? 1.0f / kWorld : 1.0f;
      for (int64_t i = 0; i < kWorld * n; ++i)
        ASSERT_EQ(reduced[i], full[i] * factor) << "all_reduce " << i;
    }

    // broadcast from the last rank.
    ops.copy_from_host(in_n, mine.data());
    comm.broadcast(in_n, kWorld - 1);
    const std::vector<float> broadcast = to_host_f32(ops, in_n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(broadcast[i], f32_input(kWorld - 1, i)) << i;
    comm.barrier();
  });
  expect_all_ok("f32", run);
}

// Expert parallelism's exchange: rank s sends (s + d) % 3 elements to rank d (none from rank
// 1 at all), f32 and bf16, each element landing in rank order of its sender.
TEST_F(NcclCommTest, AllToAllVMovesEachRanksSliceToItsPeer) {
  const RankRun run = run_ranks("all_to_all_v", [](int rank, Comm& comm, Ops& ops) {
    const auto count = [](int from, int to) -> int64_t { return from == 1 ? 0 : (from + to) % 3; };
    const auto value = [](int from, int to, int64_t i) {
      return bf16_value(
          bf16_bits(static_cast<float>(8 * from + to) + 0.5f * static_cast<float>(i)));
    };
    std::vector<int64_t> send(kWorld), recv(kWorld);
    std::vector<float> mine;
    int64_t received = 0;
    for (int d = 0; d < kWorld; ++d) {
      send[d] = count(rank, d);
      recv[d] = count(d, rank);
      received += recv[d];
      for (int64_t i = 0; i < send[d]; ++i) mine.push_back(value(rank, d, i));
    }
    const int64_t sent = static_cast<int64_t>(mine.size());
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      DeviceBuffer in_buffer(ops, std::max<int64_t>(sent, 1) * sizeof(float));
      DeviceBuffer out_buffer(ops, std::max<int64_t>(received, 1) * sizeof(float));
      const Tensor in = in_buffer.view(dtype, {sent});
      const Tensor out = out_buffer.view(dtype, {received});
      if (dtype == DType::kF32) {
        if (sent > 0) ops.copy_from_host(in, mine.data());
      } else {
        std::vector<uint16_t> bits(mine.size());
        for (size_t i = 0; i < mine.size(); ++i) bits[i] = bf16_bits(mine[i]);
        if (sent > 0) ops.copy_from_host(in, bits.data());
      }
      comm.all_to_all_v(out, recv, in, send);
      std::vector<float> got(static_cast<size_t>(received));
      if (received > 0) {
        if (dtype == DType::kF32) {
          ops.copy_to_host(got.data(), out);
        } else {
          std::vector<uint16_t> bits(got.size());
          ops.copy_to_host(bits.data(), out);
          for (size_t i = 0; i < bits.size(); ++i) got[i] = bf16_value(bits[i]);
        }
      }
      size_t at = 0;
      for (int s = 0; s < kWorld; ++s)
        for (int64_t i = 0; i < recv[s]; ++i)
          ASSERT_EQ(got[at++], value(s, rank, i)) << s << " " << i;
    }
  });
  expect_all_ok("all_to_all_v", run);
}

TEST_F(NcclCommTest, Bf16CollectivesWithinOneRounding) {
  const RankRun run = run_ranks("bf16", [](int rank, Comm& comm, Ops& ops) {
    constexpr int64_t n = 4099;
    std::vector<uint16_t> mine(n), wide(kWorld * n);
    for (int64_t i = 0; i < n; ++i) mine[i] = bf16_bits(bf16_input(rank, i));
    for (int64_t i = 0; i < kWorld * n; ++i) wide[i] = bf16_bits(bf16_input(rank, i));
    const auto sum_over_ranks = [](int64_t i) {
      double sum = 0;
      for (int r = 0; r < kWorld; ++r) sum += bf16_input(r, i);
      return sum;
    };
    // One bf16 rounding of the exact result: half an ulp (2^-8 relative), with slack to one ulp.
    const auto near = [](float got, double want) {
      return std::abs(got - want) <= std::ldexp(std::abs(want), -7) + 1e-30;
    };

    DeviceBuffer in_buffer(ops, n * 2), out_buffer(ops, kWorld * n * 2);
    const Tensor in_n = in_buffer.view(DType::kBF16, {n});
    const Tensor out_wn = out_buffer.view(DType::kBF16, {kWorld * n});
    ops.copy_from_host(in_n, mine.data());
    comm.all_gather(out_wn, in_n);
    const std::vector<float> gathered = to_host_bf16(ops, out_wn);
    for (int r = 0; r < kWorld; ++r)
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(gathered[r * n + i], bf16_input(r, i)) << i;

    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
      const double factor = op == ReduceOp::kAvg ? 1.0 / kWorld : 1.0;
      ops.copy_from_host(out_wn, wide.data());
      comm.reduce_scatter(in_n, out_wn, op);
      const std::vector<float> scattered = to_host_bf16(ops, in_n);
      for (int64_t i = 0; i < n; ++i) {
        const double want = sum_over_ranks(rank * n + i) * factor;
        ASSERT_TRUE(near(scattered[i], want))
            << "reduce_scatter " << i << ": " << scattered[i] << " vs " << want;
      }
      ops.copy_from_host(out_wn, wide.data());
      comm.all_reduce(out_wn, op);
      const std::vector<float> reduced = to_host_bf16(ops, out_wn);
      for (int64_t i = 0; i < kWorld * n; ++i) {
        const double want = sum_over_ranks(i) * factor;
        ASSERT_TRUE(near(reduced[i], want))
            << "all_reduce " << i << ": " << reduced[i] << " vs " << want;
      }
    }

    ops.copy_from_host(in_n, mine.data());
    comm.broadcast(in_n, 0);
    const std::vector<float> broadcast = to_host_bf16(ops, in_n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(broadcast[i], bf16_input(0, i)) << i;
  });
  expect_all_ok("bf16", run);
}

TEST_F(NcclCommTest, SplitOrdersByKeyAndSeparatesColors) {
  const RankRun run = run_ranks("split", [](int rank, Comm& comm, Ops& ops) {
    // One color, keys reversed: the new ranks are the old ones reversed.
    std::unique_ptr<Comm> reversed = comm.split(0, kWorld - 1 - rank);
    ASSERT_EQ(reversed->size(), kWorld);
    ASSERT_EQ(reversed->rank(), kWorld - 1 - rank);
    DeviceBuffer buffer(ops, kWorld * sizeof(float));
    const Tensor ids_w = buffer.view(DType::kF32, {kWorld});
    const float my_id = static_cast<float>(rank);
    ops.copy_from_host(ids_w.rows(reversed->rank(), reversed->rank() + 1), &my_id);
    reversed->all_gather(ids_w, ids_w.rows(reversed->rank(), reversed->rank() + 1));
    const std::vector<float> ids = to_host_f32(ops, ids_w);
    for (int r = 0; r < kWorld; ++r) EXPECT_EQ(ids[r], static_cast<float>(kWorld - 1 - r));

    // One color per rank: groups of one, whose all_reduce leaves the value alone.
    std::unique_ptr<Comm> alone = comm.split(rank, 0);
    ASSERT_EQ(alone->size(), 1);
    ASSERT_EQ(alone->rank(), 0);
    const float value = 3.5f + rank;
    const Tensor value_1 = ids_w.rows(0, 1);
    ops.copy_from_host(value_1, &value);
    alone->all_reduce(value_1, ReduceOp::kSum);
    EXPECT_EQ(to_host_f32(ops, value_1)[0], value);
    // The parent still works after splitting.
    comm.all_reduce(value_1, ReduceOp::kSum);
    EXPECT_EQ(to_host_f32(ops, value_1)[0], 3.5f + 4.5f);
    alone.reset();
    reversed.reset();
    comm.barrier();
  });
  expect_all_ok("split", run);
}

TEST_F(NcclCommTest, BarrierThePeerNeverJoinsAbortsWithAMessage) {
  const RankRun run = run_ranks(
      "timeout",
      [](int rank, Comm& comm, Ops&) {
        if (rank == 0) {
          comm.set_context("unit 7 (layers.6) parameter all-gather");
          comm.barrier();  // rank 1 never comes: must abort, not hang
          std::printf("barrier returned\n");
          std::fflush(stdout);
          ::_exit(0);
        }
        std::this_thread::sleep_for(std::chrono::seconds(10));
        ::_exit(0);  // leave without tearing the communicator down
      },
      std::chrono::seconds(60), std::chrono::seconds(3));
  EXPECT_TRUE(WIFSIGNALED(run.statuses[0]) && WTERMSIG(run.statuses[0]) == SIGABRT)
      << "status " << run.statuses[0] << ":\n"
      << run.logs[0];
  const std::string& log = run.logs[0];
  EXPECT_NE(log.find("NCCL barrier failed on rank 0"), std::string::npos) << log;
  EXPECT_NE(log.find("unit 7 (layers.6)"), std::string::npos) << log;
  EXPECT_EQ(log.find("barrier returned"), std::string::npos) << log;
  std::printf("[timeout] rank 0 said: %s\n", log.substr(0, log.find('\n')).c_str());
}

}  // namespace
}  // namespace shardtrain
