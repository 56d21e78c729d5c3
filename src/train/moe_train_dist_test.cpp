// Mixture-of-experts training across world sizes, with real worker processes (`shardtrain
// train`, Gloo over loopback, a FileStore rendezvous): tests/golden/qwen3_moe (sparse and dense
// blocks, experts sharded like every parameter) for 16 steps with the load-balancing loss on. The
// global batch (4 sequences, micro-batch 1) is the same at world sizes 1, 2 and 4, so the per-step
// loss and aux_loss (metrics JSONL) must agree within 1e-5 relative; the second pass over the
// data must have a lower mean loss than the first, and
// with model.router_aux_loss = false no aux_loss is logged and the losses differ (its gradient
// is real).
//
// Expert parallelism (fsdp.expert_parallel): the same global batch at world sizes 2 and 4 with
// 2- and 4-way expert parallelism (FULL_SHARD, HYBRID_SHARD 2 x 2, and SHARD_GRAD_OP with full
// activation checkpointing and one reduction per step; Qwen3-MoE and Mixtral) gives the
// one-rank losses and aux losses, and its export (every rank's experts assembled into the Hub's
// names) holds the one-rank export's tensors; its checkpoint resumes at another world size and
// exports exactly; a value that does not divide the shard group ends every rank with one line
// naming the key and exit code 2.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "io/safetensors.h"
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

constexpr int kSteps = 16;  // two passes over the 32 sequences

struct RunResult {
  std::vector<double> losses, aux_losses;
  bool aux_logged = false;
  std::vector<int> exit_codes;  // per rank
  std::string rank0_log;
};

class MoeTrainDistTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/shardtrain_moe_XXXXXX";
    dir_ = ::mkdtemp(pattern);
    std::mt19937 rng(5);
    std::ofstream data(dir_ + "/data.jsonl");
    for (int line = 0; line < 32; ++line) {
      const int length = 8 + static_cast<int>(rng() % 9);
      nlohmann::json ids = nlohmann::json::array(), labels = nlohmann::json::array();
      for (int i = 0; i < length; ++i) {
        const int id = static_cast<int>(rng() % 96);
        ids.push_back(id);
        labels.push_back(i < 2 && line % 3 == 0 ? -100 : id);
      }
      data << nlohmann::json{{"input_ids", ids}, {"labels", labels}}.dump() << "\n";
    }
    std::ofstream toml(dir_ + "/job.toml");
    toml << "[model]\npath = \"" << SHARDTRAIN_SOURCE_DIR << "/tests/golden/qwen3_moe\"\n"
         << "init = \"pretrained\"\ndtype = \"fp32\"\n"
         << "[data]\npath = \"" << dir_ << "/data.jsonl\"\nseq_len = 16\n"
         << "[train]\nsteps = " << kSteps << "\nmicro_batch = 1\nglobal_batch = 4\nseed = 7\n"
         << "device = \"cpu\"\nmax_grad_norm = 1.0\n"
         << "[optim]\nlr = 3e-3\nwarmup_steps = 2\nweight_decay = 0.01\n";
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static RunResult run(const std::string& name, int world, const std::vector<std::string>& extra,
                       bool expect_success = true) {
    const std::string run_dir = dir_ + "/" + name;
    fs::create_directories(run_dir + "/store");
    const std::string metrics = run_dir + "/metrics.jsonl";
    std::vector<std::string> args = {SHARDTRAIN_BINARY,
                                     "train",
                                     "--config",
                                     dir_ + "/job.toml",
                                     "--metrics",
                                     metrics,
                                     "--train.output_dir=" + run_dir + "/out"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<pid_t> pids;
    for (int rank = 0; rank < world; ++rank) {
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::setenv("RANK", std::to_string(rank).c_str(), 1);
        ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
        ::setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
        ::setenv("LOCAL_WORLD_SIZE", std::to_string(world).c_str(), 1);
        ::setenv("SHARDTRAIN_STORE_DIR", (run_dir + "/store").c_str(), 1);
        ::setenv("SHARDTRAIN_COMM_TIMEOUT_S", "60", 1);
        const std::string log = run_dir + "/rank" + std::to_string(rank) + ".log";
        const int fd = ::open(log.c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
        ::dup2(fd, 1);
        ::dup2(fd, 2);
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        ::execv(argv[0], argv.data());
        ::_exit(127);
      }
      pids.push_back(pid);
    }
    RunResult result;
    for (int rank = 0; rank < world; ++rank) {
      int status = 0;
      ::waitpid(pids[rank], &status, 0);
      std::ifstream in(run_dir + "/rank" + std::to_string(rank) + ".log");
      std::stringstream text;
      text << in.rdbuf();
      result.exit_codes.push_back(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
      if (rank == 0) result.rank0_log = text.str();
      if (expect_success) {
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
            << name << " rank " << rank << ":\n"
            << text.str();
      }
    }
    std::ifstream lines(metrics);
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json record = nlohmann::json::parse(line);
      result.losses.push_back(record["loss"].get<double>());
      if (record.contains("aux_loss")) {
        result.aux_logged = true;
        result.aux_losses.push_back(record["aux_loss"].get<double>());
      }
    }
    return result;
  }

  // The one-rank run, made once for the tests that compare with it.
  static const RunResult& one_rank() {
    static const RunResult one = run("world1_reference", 1, {});
    return one;
  }

  static std::string dir_;
};

std::string MoeTrainDistTest::dir_;

TEST_F(MoeTrainDistTest, LossesAndAuxLossesAgreeAtWorldSizesOneTwoAndFour) {
  const RunResult one = run("world1", 1, {});
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
  ASSERT_TRUE(one.aux_logged);
  ASSERT_EQ(one.aux_losses.size(), static_cast<size_t>(kSteps));
  for (const int world : {2, 4}) {
    const RunResult many = run("world" + std::to_string(world), world, {});
    ASSERT_EQ(many.losses.size(), static_cast<size_t>(kSteps)) << world << " ranks";
    ASSERT_EQ(many.aux_losses.size(), static_cast<size_t>(kSteps)) << world << " ranks";
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(many.losses[s], one.losses[s], 1e-5 * one.losses[s])
          << world << " ranks, step " << s + 1;
      EXPECT_NEAR(many.aux_losses[s], one.aux_losses[s], 1e-5 * one.aux_losses[s])
          << world << " ranks, step " << s + 1;
      EXPECT_GT(one.aux_losses[s], 0.0);
    }
  }
  std::printf("loss %.5f -> %.5f, aux_loss %.5f -> %.5f\n", one.losses.front(), one.losses.back(),
              one.aux_losses.front(), one.aux_losses.back());
  double first = 0, second = 0;
  for (int s = 0; s < kSteps / 2; ++s) {
    first += one.losses[s];
    second += one.losses[kSteps / 2 + s];
  }
  EXPECT_LT(second, first) << "the second pass over the data should have learnt from the first";

  const RunResult plain = run("no_aux", 1, {"--model.router_aux_loss=false"});
  ASSERT_EQ(plain.losses.size(), static_cast<size_t>(kSteps));
  EXPECT_FALSE(plain.aux_logged);
  EXPECT_DOUBLE_EQ(plain.losses[0], one.losses[0]);   // same first step (no update yet)
  EXPECT_NE(plain.losses.back(), one.losses.back());  // the aux gradient changed the updates
}

// Every tensor of the export `got_path` equals the one in `want_path` within `tolerance`
// (relative to the tensor's largest magnitude), and both hold the same names.
void expect_same_tensors(const std::string& want_path, const std::string& got_path,
                         const std::string& name, double tolerance) {
  const SafetensorsFile want = SafetensorsFile::open(want_path);
  const SafetensorsFile got = SafetensorsFile::open(got_path);
  std::set<std::string> want_names, got_names;
  for (const SafetensorsEntry& e : want.entries()) want_names.insert(e.name);
  for (const SafetensorsEntry& e : got.entries()) got_names.insert(e.name);
  ASSERT_EQ(got_names, want_names) << name;
  for (const SafetensorsEntry& e : want.entries()) {
    const SafetensorsEntry* other = got.find(e.name);
    ASSERT_EQ(e.dtype, DType::kF32) << e.name;
    ASSERT_EQ(other->shape.to_string(), e.shape.to_string()) << e.name;
    const float* a = static_cast<const float*>(e.data);
    const float* b = static_cast<const float*>(other->data);
    double largest = 0, worst = 0;
    for (int64_t i = 0; i < e.shape.numel(); ++i) {
      largest = std::max(largest, std::fabs(static_cast<double>(a[i])));
      worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    EXPECT_LE(worst, tolerance * std::max(largest, 1e-6)) << name << " " << e.name;
  }
}

// `name`'s export against the one-rank run's.
void expect_same_export(const std::string& dir, const std::string& name, double tolerance) {
  expect_same_tensors(dir + "/world1_reference/out/model.safetensors",
                      dir + "/" + name + "/out/model.safetensors", name, tolerance);
}

TEST_F(MoeTrainDistTest, ExpertParallelLossesAndExportsAgreeWithOneRank) {
  const RunResult& one = one_rank();
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
  struct Case {
    const char* name;
    int world;
    std::vector<std::string> flags;
  };
  const std::vector<Case> cases = {
      {"ep2_world2", 2, {"--fsdp.expert_parallel=2"}},
      {"ep2_world4", 4, {"--fsdp.expert_parallel=2"}},
      {"ep4_world4", 4, {"--fsdp.expert_parallel=4"}},
      {"ep2_hybrid2x2",
       4,
       {"--fsdp.expert_parallel=2", "--fsdp.strategy=HYBRID_SHARD", "--fsdp.shard_group_size=2"}},
      // The recompute repeats forward's exchanges; SHARD_GRAD_OP keeps forward's gathers.
      {"ep2_world4_checkpointing_zero2",
       4,
       {"--fsdp.expert_parallel=2", "--fsdp.strategy=SHARD_GRAD_OP",
        "--train.activation_checkpointing=full", "--fsdp.reduce_on_last_micro_batch=true"}},
  };
  for (const Case& c : cases) {
    const RunResult ep = run(c.name, c.world, c.flags);
    ASSERT_EQ(ep.losses.size(), static_cast<size_t>(kSteps)) << c.name;
    ASSERT_EQ(ep.aux_losses.size(), static_cast<size_t>(kSteps)) << c.name;
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(ep.losses[s], one.losses[s], 1e-5 * one.losses[s]) << c.name << " step " << s + 1;
      EXPECT_NEAR(ep.aux_losses[s], one.aux_losses[s], 1e-5 * one.aux_losses[s])
          << c.name << " step " << s + 1;
    }
    expect_same_export(dir_, c.name, 1e-3);
  }
}

// Mixtral's names (block_sparse_moe.experts.N.w1/w3/w2): 2- and 4-way expert parallelism of its
// 4 experts at world size 4 gives the one-rank losses, and the export the one-rank export.
TEST_F(MoeTrainDistTest, MixtralExpertParallelAgreesWithOneRank) {
  const std::string mixtral =
      std::string("--model.path=") + SHARDTRAIN_SOURCE_DIR + "/tests/golden/mixtral";
  const RunResult one = run("mixtral_world1", 1, {mixtral});
  ASSERT_EQ(one.losses.size(), static_cast<size_t>(kSteps));
  for (const int experts : {2, 4}) {
    const std::string name = "mixtral_ep" + std::to_string(experts);
    const RunResult ep =
        run(name, 4, {mixtral, "--fsdp.expert_parallel=" + std::to_string(experts)});
    ASSERT_EQ(ep.losses.size(), static_cast<size_t>(kSteps)) << name;
    ASSERT_EQ(ep.aux_losses.size(), static_cast<size_t>(kSteps)) << name;
    ASSERT_EQ(one.aux_losses.size(), static_cast<size_t>(kSteps));
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(ep.losses[s], one.losses[s], 1e-5 * one.losses[s]) << name << " step " << s + 1;
      EXPECT_NEAR(ep.aux_losses[s], one.aux_losses[s], 1e-5 * one.aux_losses[s])
          << name << " step " << s + 1;
    }
    expect_same_tensors(dir_ + "/mixtral_world1/out/model.safetensors",
                        dir_ + "/" + name + "/out/model.safetensors", name, 1e-3);
  }
}

TEST_F(MoeTrainDistTest, ExpertParallelBadInputsAreRefusedWithOneLine) {
  const RunResult bad = run("ep3_world2", 2, {"--fsdp.expert_parallel=3"}, false);
  for (int code : bad.exit_codes) EXPECT_EQ(code, 2) << bad.rank0_log;
  EXPECT_NE(bad.rank0_log.find("fsdp.expert_parallel"), std::string::npos) << bad.rank0_log;
  EXPECT_NE(bad.rank0_log.find("shard group size 2"), std::string::npos) << bad.rank0_log;
  EXPECT_TRUE(bad.losses.empty());
}

// A checkpoint of a 2-way expert-parallel run at world size 2, resumed at world size 4 (the units
// of experts resharded over expert shard groups of 2), continues with the uninterrupted run's
// losses; `shardtrain export` of its last checkpoint equals the run's export; resuming it
// without expert parallelism is refused with one line naming the key.
TEST_F(MoeTrainDistTest, ExpertParallelCheckpointResumesAtAnotherWorldSize) {
  const std::string saved = dir_ + "/ep2_saved_checkpoints";
  const RunResult full = run("ep2_saving", 2,
                             {"--fsdp.expert_parallel=2", "--train.checkpoint_dir=" + saved,
                              "--train.checkpoint_every=8"});
  ASSERT_EQ(full.losses.size(), static_cast<size_t>(kSteps));
  const std::string step8 = saved + "/step_00000008";
  ASSERT_TRUE(fs::exists(step8));
  // `shardtrain export` of the last checkpoint assembles both expert ranks' experts: the run's
  // own export of the same weights, exactly.
  const std::string exported = dir_ + "/ep2_step16_export";
  const std::string command = std::string(SHARDTRAIN_BINARY) + " export " + saved +
                              "/step_00000016 --out " + exported + " > " + dir_ +
                              "/ep2_export.log 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  expect_same_tensors(dir_ + "/ep2_saving/out/model.safetensors",
                      exported + "/model.safetensors", "export of step 16", 0.0);
  const RunResult resumed =
      run("ep2_resumed", 4,
          {"--fsdp.expert_parallel=2", "--train.checkpoint_dir=" + dir_ + "/ep2_resumed_ckpt",
           "--train.resume=" + step8});
  ASSERT_EQ(resumed.losses.size(), static_cast<size_t>(kSteps / 2)) << resumed.rank0_log;
  for (int s = 0; s < kSteps / 2; ++s) {
    EXPECT_NEAR(resumed.losses[s], full.losses[kSteps / 2 + s], 1e-5 * full.losses[s])
        << "step " << kSteps / 2 + s + 1;
  }
  const RunResult refused = run("ep1_from_ep2", 2,
                                {"--train.checkpoint_dir=" + dir_ + "/ep1_ckpt",
                                 "--train.resume=" + step8},
                                false);
  for (int code : refused.exit_codes) EXPECT_EQ(code, 2) << refused.rank0_log;
  EXPECT_NE(refused.rank0_log.find("was saved with fsdp.expert_parallel = 2, this run has 1; "
                                   "HINT: resume with --fsdp.expert_parallel=2"),
            std::string::npos)
      << refused.rank0_log;
}

}  // namespace
}  // namespace shardtrain
