// FSDP's sharded path with several ranks on ONE GPU, through host-staged Gloo (dist/
// host_staged_comm.h): `shardtrain train --nproc-per-node 2 --train.device=cuda
// --dist.backend=gloo` on tests/golden/llama_gqa for 20 steps, FULL_SHARD and SHARD_GRAD_OP
// (and HYBRID_SHARD on 4 ranks, 2 x 2), must follow the one-rank GPU run step by step within
// bf16 tolerance, and really shard (equal master shards, gathered units). Also: with
// dist.backend = auto, two ranks on one GPU pick host-staged Gloo and say so; with "nccl" they
// are refused with the fix. And fp8.all_gather's two ranks against the bf16 gather of FP8
// training.
//
// The job is tools/device/multi_gpu_check.sh's (and fsdp_dist_test's): global batch 4 in every
// run (grad_accum 4 on one rank, 2 per rank on two, 1 on four), so the runs see the same
// sequences per step. All runs see one GPU (the first of CUDA_VISIBLE_DEVICES, else GPU 0),
// also on machines with more. Skips with a visible message where no GPU is present.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/testing/test_support.h"
#include "fsdp/testing/fsdp_test_job.h"
#include "io/hf_checkpoint.h"
#include "ops/backend.h"
#include "ops/testing/test_device_limits.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 20;
// Largest relative per-step loss difference allowed against one rank. Two NCCL ranks on two
// GPUs measured 5.4e-4 (bench/RESULTS.md; the same sums in another order, amplified by 20 AdamW
// steps); host staging adds no rounding (bf16 gathers are exact, reductions are fp32).
constexpr double kLossTolerance = 5e-3;

struct TrainRun {
  testing::CommandResult command;
  std::vector<double> losses;
};

class FsdpHostStagedGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!cuda_available()) return;
    dir_ = (fs::temp_directory_path() / ("shardtrain_staged_gpu_" + std::to_string(::getpid())))
               .string();
    fs::create_directories(dir_);
    testing::write_fsdp_test_job(dir_, kSteps, "cuda");
  }
  static void TearDownTestSuite() {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no GPU: host-staged Gloo FSDP runs skipped";
    ASSERT_TRUE(fs::exists(SHARDTRAIN_BINARY))
        << SHARDTRAIN_BINARY << " is missing; HINT: build the shardtrain target too";
  }

  // "0,1,...,ranks-1": every local rank, for --local-ranks-filter.
  static std::string all_local_ranks(int ranks) {
    std::string list = "0";
    for (int r = 1; r < ranks; ++r) list += "," + std::to_string(r);
    return list;
  }

  // The first visible GPU, as CUDA_VISIBLE_DEVICES names it.
  static std::string one_gpu() {
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (visible == nullptr || *visible == '\0') return "0";
    const std::string all = visible;
    return all.substr(0, all.find(','));
  }

  // `shardtrain train` on one GPU with the job's config plus `args`; `name` names its metrics.
  // `launch` (e.g. "launch --standalone --nproc-per-node 2 --local-ranks-filter 0,1 --") runs
  // it under the launcher, showing every rank's log lines (rank 0's alone by default).
  static TrainRun train(const std::string& name, const std::string& args,
                        const std::string& launch = "") {
    const std::string metrics = dir_ + "/" + name + ".jsonl";
    fs::remove(metrics);
    TrainRun run;
    run.command = testing::run_command(
        "CUDA_VISIBLE_DEVICES=" + one_gpu() +
        " NCCL_NVLS_ENABLE=0 SHARDTRAIN_COMM_TIMEOUT_S=120 timeout 300 " + SHARDTRAIN_BINARY +
        " " + launch + " train --config " + dir_ + "/job.toml --metrics " + metrics + " " + args);
    std::ifstream lines(metrics);
    for (std::string line; std::getline(lines, line);) {
      run.losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    }
    return run;
  }

  static const TrainRun& one_rank() {
    static const TrainRun run = train("one_rank", "");
    return run;
  }

  // Parameters of the model (unpadded).
  static int64_t model_numel() {
    const HfCheckpoint model =
        HfCheckpoint::open(std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/llama_gqa");
    int64_t numel = 0;
    for (const std::string& name : model.tensor_names()) numel += model.find(name)->shape.numel();
    return numel;
  }

  // The JSON of each "memory measured {...}" line, in output order.
  static std::vector<nlohmann::json> measured_memory(const std::string& output) {
    std::vector<nlohmann::json> found;
    const std::string marker = "memory measured ";
    for (size_t at = output.find(marker); at != std::string::npos;
         at = output.find(marker, at + 1)) {
      const size_t begin = at + marker.size();
      found.push_back(
          nlohmann::json::parse(output.substr(begin, output.find('\n', begin) - begin)));
    }
    return found;
  }

  static std::string dir_;
};

std::string FsdpHostStagedGpu::dir_;

TEST_F(FsdpHostStagedGpu, RanksOnOneGpuFollowOneRankForEachShardingStrategy) {
  const TrainRun& base = one_rank();
  ASSERT_EQ(base.command.exit_code, 0) << base.command.output;
  ASSERT_EQ(base.losses.size(), static_cast<size_t>(kSteps)) << base.command.output;
  EXPECT_LT(base.losses.back(), 0.9 * base.losses.front()) << "the one-rank run should learn";

  struct Case {
    std::string strategy;
    int ranks;
    std::string extra_args;
  };
  const Case cases[] = {
      {"FULL_SHARD", 2, ""},
      {"SHARD_GRAD_OP", 2, ""},
      // Two shard groups of two (sub-comms from split, staged too), replicated across them.
      {"HYBRID_SHARD", 4, "--fsdp.shard_group_size=2"},
  };
  for (const Case& c : cases) {
    const std::string& strategy = c.strategy;
    SCOPED_TRACE(strategy);
    const TrainRun got =
        train("ranks_" + strategy,
              "--dist.backend=gloo --fsdp.strategy=" + strategy + " " + c.extra_args,
              "launch --standalone --nproc-per-node " + std::to_string(c.ranks) +
                  " --local-ranks-filter " + all_local_ranks(c.ranks) + " --");
    ASSERT_EQ(got.command.exit_code, 0) << got.command.output;
    EXPECT_NE(got.command.output.find("collectives go through Gloo staged via host memory"),
              std::string::npos)
        << got.command.output;
    ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps)) << got.command.output;
    double worst = 0;
    int worst_step = 0;
    for (int s = 0; s < kSteps; ++s) {
      const double relative = std::abs(got.losses[s] - base.losses[s]) / std::abs(base.losses[s]);
      if (relative > worst) worst = relative, worst_step = s + 1;
      EXPECT_LE(relative, kLossTolerance) << "step " << s + 1 << ": " << c.ranks << " ranks "
                                          << got.losses[s] << ", 1 rank " << base.losses[s];
    }
    std::printf(
        "[%s] %d ranks on 1 GPU (host-staged Gloo) vs 1 rank: largest relative loss "
        "difference %.3g at step %d (tolerance %.0e); loss %.4f -> %.4f\n",
        strategy.c_str(), c.ranks, worst, worst_step, kLossTolerance, got.losses.front(),
        got.losses.back());

    // The sharded path ran: every rank holds an equal master shard, half of the model (shard
    // groups of two), and gathers units (nothing is gathered without sharding).
    const std::vector<nlohmann::json> memory = measured_memory(got.command.output);
    ASSERT_EQ(memory.size(), static_cast<size_t>(c.ranks)) << got.command.output;
    const int64_t master_bytes = memory[0]["master_bytes"].get<int64_t>();
    EXPECT_LT(master_bytes, 4 * model_numel()) << "each rank holds only its fp32 shard";
    EXPECT_GE(2 * master_bytes, 4 * model_numel());
    for (const nlohmann::json& rank : memory) {
      EXPECT_EQ(rank["master_bytes"], master_bytes);
      EXPECT_GT(rank["gathered_peak_bytes"].get<int64_t>(), 0);
    }
  }
}

// fp8.all_gather: two ranks of FP8 training with the FP8 linears' weights gathered as e4m3
// follow the same two ranks gathering them in bf16 within FP8's own tolerance (the gathered
// weights are the e4m3 values the FP8 GEMMs read anyway; where a tiny shape runs its GEMM in
// bf16, the weight is the e4m3 round trip), hold an e4m3 shard, and say so.
TEST_F(FsdpHostStagedGpu, Fp8AllGatherFollowsTheBf16GatherOfFp8Training) {
  constexpr double kFp8Tolerance = 0.02;  // the FP8 numerics test's 2% (issue: FP8 numerics)
  const std::string launch = "launch --standalone --nproc-per-node 2 --local-ranks-filter 0,1 --";
  const std::string fp8 = "--dist.backend=gloo --train.precision=fp8";
  const TrainRun bf16_gather = train("fp8_bf16_gather", fp8, launch);
  const TrainRun e4m3_gather = train("fp8_e4m3_gather", fp8 + " --fp8.all_gather=true", launch);
  for (const TrainRun* run : {&bf16_gather, &e4m3_gather}) {
    ASSERT_EQ(run->command.exit_code, 0) << run->command.output;
    ASSERT_EQ(run->losses.size(), static_cast<size_t>(kSteps)) << run->command.output;
  }
  EXPECT_NE(e4m3_gather.command.output.find("all-gathered as e4m3"), std::string::npos)
      << e4m3_gather.command.output;
  double worst = 0;
  for (int s = 0; s < kSteps; ++s) {
    const double relative =
        std::abs(e4m3_gather.losses[s] - bf16_gather.losses[s]) / std::abs(bf16_gather.losses[s]);
    worst = std::max(worst, relative);
    EXPECT_LE(relative, kFp8Tolerance)
        << "step " << s + 1 << ": e4m3 gather " << e4m3_gather.losses[s] << ", bf16 gather "
        << bf16_gather.losses[s];
  }
  EXPECT_LT(e4m3_gather.losses.back(), 0.9 * e4m3_gather.losses.front()) << "it should learn";
  std::printf(
      "[fp8.all_gather] 2 ranks on 1 GPU: largest relative loss difference against the bf16 "
      "gather %.3g (tolerance %.0e); loss %.4f -> %.4f\n",
      worst, kFp8Tolerance, e4m3_gather.losses.front(), e4m3_gather.losses.back());
  const std::vector<nlohmann::json> with = measured_memory(e4m3_gather.command.output);
  const std::vector<nlohmann::json> without = measured_memory(bf16_gather.command.output);
  ASSERT_EQ(with.size(), 2u) << e4m3_gather.command.output;
  ASSERT_EQ(without.size(), 2u) << bf16_gather.command.output;
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(with[r]["fp8_shard_bytes"].get<int64_t>(), 0) << "rank " << r;
    EXPECT_EQ(without[r]["fp8_shard_bytes"].get<int64_t>(), 0) << "rank " << r;
  }
}

TEST_F(FsdpHostStagedGpu, AutoPicksHostStagedGlooForRanksSharingAGpuAndNcclIsRefused) {
  const TrainRun automatic = train("auto", "--nproc-per-node 2 --train.steps=2");
  ASSERT_EQ(automatic.command.exit_code, 0) << automatic.command.output;
  EXPECT_NE(automatic.command.output.find("2 ranks on this node but 1 visible GPU(s)"),
            std::string::npos)
      << automatic.command.output;
  EXPECT_EQ(automatic.losses.size(), 2u);

  const TrainRun nccl = train("nccl", "--nproc-per-node 2 --train.steps=2 --dist.backend=nccl");
  EXPECT_NE(nccl.command.exit_code, 0) << nccl.command.output;
  EXPECT_NE(nccl.command.output.find("--dist.backend=gloo"), std::string::npos)
      << nccl.command.output;
  EXPECT_TRUE(nccl.losses.empty());
}

}  // namespace
}  // namespace shardtrain
