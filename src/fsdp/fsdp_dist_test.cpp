// FSDP equivalence across world sizes and strategies, with real worker processes.
//
// Each run spawns WORLD_SIZE processes of the shardtrain binary (`train`), with the
// launcher's environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE) and a FileStore
// rendezvous (SHARDTRAIN_STORE_DIR), Gloo over loopback. The same model (tests/golden/
// llama_gqa), data and seed for 20 steps must give per-step losses within 1e-5 relative of one
// process, and final parameters within 1e-4 (relative to each tensor's largest magnitude).
// The global batch (4 sequences) is the same for every world size: micro_batch 1 and
// grad_accum 4 / 2 / 1 on 1 / 2 / 4 ranks, so gradient accumulation is covered too.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "fsdp/testing/fsdp_test_job.h"
#include "io/hf_checkpoint.h"
#include "model/param_layout.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

const std::string kModel = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/llama_gqa";
constexpr int kSteps = 20;

struct RunResult {
  std::vector<double> losses;
  std::string output_dir;
  std::vector<std::string> rank_logs;  // stdout + stderr of each rank
};

class FsdpDistTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char pattern[] = "/tmp/shardtrain_fsdp_XXXXXX";
    dir_ = ::mkdtemp(pattern);
    testing::write_fsdp_test_job(dir_, kSteps, "cpu");
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // Runs `world` worker processes of `binary` with `env` set; fails the test if any exits
  // non-zero.
  static RunResult run(const std::string& name, int world, int local_world,
                       const std::vector<std::string>& extra_args, bool expect_ok = true,
                       const std::vector<std::pair<std::string, std::string>>& env = {},
                       const std::string& binary = SHARDTRAIN_BINARY) {
    RunResult result;
    const std::string run_dir = dir_ + "/" + name;
    fs::create_directories(run_dir + "/store");
    result.output_dir = run_dir + "/out";
    const std::string metrics = run_dir + "/metrics.jsonl";
    std::vector<std::string> args = {binary,
                                     "train",
                                     "--config",
                                     dir_ + "/job.toml",
                                     "--metrics",
                                     metrics,
                                     "--train.output_dir=" + result.output_dir};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    std::vector<pid_t> pids;
    for (int rank = 0; rank < world; ++rank) {
      const std::string log = run_dir + "/rank" + std::to_string(rank) + ".log";
      const pid_t pid = ::fork();
      if (pid == 0) {
        ::setenv("RANK", std::to_string(rank).c_str(), 1);
        ::setenv("WORLD_SIZE", std::to_string(world).c_str(), 1);
        ::setenv("LOCAL_RANK", std::to_string(rank % local_world).c_str(), 1);
        ::setenv("LOCAL_WORLD_SIZE", std::to_string(local_world).c_str(), 1);
        ::setenv("SHARDTRAIN_STORE_DIR", (run_dir + "/store").c_str(), 1);
        ::setenv("SHARDTRAIN_COMM_TIMEOUT_S", "60", 1);
        for (const auto& [variable, value] : env) ::setenv(variable.c_str(), value.c_str(), 1);
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
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    std::vector<int> statuses(world, -1);
    for (int done = 0; done < world;) {
      for (int r = 0; r < world; ++r) {
        if (statuses[r] != -1) continue;
        int status = 0;
        if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
          statuses[r] = status;
          ++done;
        }
      }
      if (std::chrono::steady_clock::now() > deadline) {
        for (int r = 0; r < world; ++r)
          if (statuses[r] == -1) ::kill(pids[r], SIGKILL);
        for (int r = 0; r < world; ++r)
          if (statuses[r] == -1) ::waitpid(pids[r], &statuses[r], 0);
        ADD_FAILURE() << name << ": timed out";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    for (int r = 0; r < world; ++r) {
      std::ifstream in(run_dir + "/rank" + std::to_string(r) + ".log");
      std::stringstream text;
      text << in.rdbuf();
      result.rank_logs.push_back(text.str());
      const bool ok = WIFEXITED(statuses[r]) && WEXITSTATUS(statuses[r]) == 0;
      EXPECT_EQ(ok, expect_ok) << name << " rank " << r << " failed (status " << statuses[r]
                               << "):\n"
                               << result.rank_logs.back();
    }
    std::ifstream lines(metrics);
    for (std::string line; std::getline(lines, line);) {
      result.losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    }
    return result;
  }

  // The same job started the way users start it: `shardtrain launch --standalone` spawning
  // `nproc` workers that rendezvous through the launcher's TCP store.
  static RunResult run_through_launcher(const std::string& name, int nproc,
                                        const std::string& extra_args) {
    RunResult result;
    const std::string run_dir = dir_ + "/" + name;
    fs::create_directories(run_dir);
    result.output_dir = run_dir + "/out";
    const std::string metrics = run_dir + "/metrics.jsonl";
    const std::string log = run_dir + "/launch.log";
    const std::string command =
        std::string(SHARDTRAIN_BINARY) + " launch --standalone --nproc-per-node " +
        std::to_string(nproc) + " -- train --config " + dir_ + "/job.toml --metrics " + metrics +
        " --train.output_dir=" + result.output_dir + " " + extra_args + " > " + log + " 2>&1";
    const int status = std::system(command.c_str());
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    result.rank_logs.push_back(text.str());
    EXPECT_EQ(status, 0) << name << ":\n" << result.rank_logs.back();
    std::ifstream lines(metrics);
    for (std::string line; std::getline(lines, line);) {
      result.losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
    }
    return result;
  }

  static const RunResult& baseline() {
    static const RunResult result = run("world1", 1, 1, {});
    return result;
  }

  // The JSON object a rank logs as "memory measured {...}" (or, with `marker` "memory
  // estimate ", the plan it logged at start).
  static nlohmann::json measured_memory(const std::string& log,
                                        const std::string& marker = "memory measured ") {
    const size_t at = log.find(marker);
    if (at == std::string::npos) return nullptr;
    const size_t end = log.find('\n', at);
    return nlohmann::json::parse(log.substr(at + marker.size(), end - at - marker.size()));
  }

  // Calls visit(tensor, want's values, got's values) for every tensor of want's saved model, as
  // fp32; a tensor got's model lacks is a failure of `name`.
  template <typename Visit>
  static void for_each_saved_tensor(const std::string& name, const RunResult& want,
                                    const RunResult& got, Visit&& visit) {
    const HfCheckpoint a = HfCheckpoint::open(want.output_dir);
    const HfCheckpoint b = HfCheckpoint::open(got.output_dir);
    for (const std::string& tensor : a.tensor_names()) {
      const SafetensorsEntry* entry = a.find(tensor);
      ASSERT_NE(b.find(tensor), nullptr) << name << " lacks " << tensor;
      std::vector<float> va(entry->shape.numel()), vb(entry->shape.numel());
      a.read_into_f32(tensor, entry->shape, va.data());
      b.read_into_f32(tensor, entry->shape, vb.data());
      visit(tensor, va, vb);
    }
  }

  static void expect_equivalent(const std::string& name, const RunResult& got) {
    const RunResult& want = baseline();
    ASSERT_EQ(want.losses.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(got.losses.size(), static_cast<size_t>(kSteps)) << name;
    double worst_loss = 0;
    int worst_step = 0;
    for (int s = 0; s < kSteps; ++s) {
      const double rel = std::abs(got.losses[s] - want.losses[s]) / std::abs(want.losses[s]);
      if (rel > worst_loss) worst_loss = rel, worst_step = s + 1;
      EXPECT_LE(rel, 1e-5) << name << " step " << s + 1 << ": " << got.losses[s] << " vs "
                           << want.losses[s];
    }
    EXPECT_LT(want.losses.back(), want.losses.front()) << "the baseline should learn";

    double worst_param = 0;
    std::string worst_name;
    for_each_saved_tensor(
        name, want, got,
        [&](const std::string& tensor, const std::vector<float>& va, const std::vector<float>& vb) {
          double scale = 0, diff = 0;
          for (size_t i = 0; i < va.size(); ++i) {
            scale = std::max(scale, static_cast<double>(std::abs(va[i])));
            diff = std::max(diff, static_cast<double>(std::abs(va[i] - vb[i])));
          }
          const double rel = diff / std::max(scale, 1e-12);
          if (rel > worst_param) worst_param = rel, worst_name = tensor;
          EXPECT_LE(rel, 1e-4) << name << " " << tensor;
        });
    std::printf(
        "[%s] largest loss difference %.3g (relative, step %d); largest parameter "
        "difference %.3g (relative to the tensor's max, %s)\n",
        name.c_str(), worst_loss, worst_step, worst_param, worst_name.c_str());
  }

  static std::string dir_;
};

std::string FsdpDistTest::dir_;

TEST_F(FsdpDistTest, FullShardWorld2And4MatchOneProcess) {
  for (int world : {2, 4}) {
    const std::string name = "full_shard_w" + std::to_string(world);
    const RunResult got = run(name, world, world, {"--fsdp.strategy=FULL_SHARD"});
    expect_equivalent(name, got);
    // Sharding is real: each rank holds 1/world of the (padded) master.
    const nlohmann::json one = measured_memory(got.rank_logs[0]);
    ASSERT_FALSE(one.is_null()) << got.rank_logs[0];
    for (int r = 0; r < world; ++r) {
      const nlohmann::json m = measured_memory(got.rank_logs[r]);
      ASSERT_FALSE(m.is_null());
      EXPECT_EQ(m["master_bytes"], one["master_bytes"]) << "rank " << r;
      EXPECT_EQ(m["moment_bytes"], 2 * one["master_bytes"].get<int64_t>());
    }
  }
}

// The optimizer update beside the next forward (fsdp/fsdp_units.h) on ops that defer their aside
// work for real (the test worker's SHARDTRAIN_TEST_DEFERRED_ASIDE): an all-gather, a reduction
// or a forward that read a shard before its update's wait would read the old values. Bit for
// bit the run in order, every update run at its unit's wait (none joined by a host
// synchronisation first: the global target count is summed after the forward is enqueued); the
// control that ignores the waits changes the losses.
TEST_F(FsdpDistTest, UpdateAsideOnTwoRanksTrainsAsInOrder) {
  for (const std::string strategy : {"FULL_SHARD", "NO_SHARD"}) {
    const std::vector<std::string> args = {"--fsdp.strategy=" + strategy};
    const RunResult want = run("in_order_" + strategy, 2, 2, args);
    const RunResult got = run("aside_" + strategy, 2, 2, args, true,
                              {{"SHARDTRAIN_TEST_DEFERRED_ASIDE", "1"}}, SHARDTRAIN_TEST_WORKER);
    ASSERT_EQ(want.losses.size(), static_cast<size_t>(kSteps)) << strategy;
    ASSERT_EQ(got.losses.size(), want.losses.size()) << strategy;
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_EQ(got.losses[s], want.losses[s]) << strategy << " step " << s + 1;
    }
    for_each_saved_tensor(
        strategy, want, got,
        [&](const std::string& tensor, const std::vector<float>& va, const std::vector<float>& vb) {
          EXPECT_TRUE(va == vb) << strategy << " " << tensor;
        });
    for (int r = 0; r < 2; ++r) {
      const std::string& log = got.rank_logs[r];
      const size_t at = log.find("deferred aside: ");
      ASSERT_NE(at, std::string::npos) << strategy << " rank " << r << ":\n" << log;
      long long waited = -1, issued = -1;
      ASSERT_EQ(std::sscanf(log.c_str() + at, "deferred aside: %lld of %lld", &waited, &issued), 2);
      EXPECT_GT(issued, 0) << strategy << " rank " << r;
      EXPECT_EQ(waited, issued) << strategy << " rank " << r
                                << ": an update was joined before its unit was used";
    }
    const RunResult ignoring =
        run("ignoring_waits_" + strategy, 2, 2, args, true,
            {{"SHARDTRAIN_TEST_DEFERRED_ASIDE", "ignore-waits"}}, SHARDTRAIN_TEST_WORKER);
    ASSERT_EQ(ignoring.losses.size(), want.losses.size()) << strategy;
    EXPECT_NE(ignoring.losses, want.losses)
        << strategy
        << ": reading shards before the update's wait changed nothing; the test "
           "cannot see a missing wait";
  }
}

TEST_F(FsdpDistTest, LaunchedWithTcpStoreMatchesOneProcess) {
  expect_equivalent("launch_full_shard_2", run_through_launcher("launch2", 2, ""));
  expect_equivalent(
      "launch_hybrid_2x2",
      run_through_launcher("launch4", 4, "--fsdp.strategy=HYBRID_SHARD --fsdp.shard_group_size=2"));
}

TEST_F(FsdpDistTest, ShardBytesAreTotalOverWorldWithinPadding) {
  // llama_gqa: 3 units; each is padded to a multiple of world x 64 elements.
  const RunResult got = run("shard_bytes_w4", 4, 4, {"--train.steps=2"});
  int64_t unpadded = 0;
  const HfCheckpoint model = HfCheckpoint::open(kModel);
  for (const std::string& t : model.tensor_names()) unpadded += model.find(t)->shape.numel();
  for (int r = 0; r < 4; ++r) {
    const nlohmann::json m = measured_memory(got.rank_logs[r]);
    ASSERT_FALSE(m.is_null()) << got.rank_logs[r];
    const int64_t shard_elems = m["master_bytes"].get<int64_t>() / 4;
    EXPECT_GE(shard_elems * 4, unpadded);
    const int64_t padding_bound =
        3 * 4 * kParamAlignElems +  // group padding, per unit
        kParamAlignElems * static_cast<int64_t>(model.tensor_names().size());
    EXPECT_LE(shard_elems * 4, unpadded + padding_bound);
  }
}

TEST_F(FsdpDistTest, ShardGradOpMatchesAndPeaksFollowThePlan) {
  const RunResult sgo = run("shard_grad_op_w2", 2, 2, {"--fsdp.strategy=SHARD_GRAD_OP"});
  expect_equivalent("shard_grad_op_w2", sgo);
  const RunResult full =
      run("full_shard_peak_w2", 2, 2, {"--fsdp.strategy=FULL_SHARD", "--train.steps=2"});
  const nlohmann::json m_sgo = measured_memory(sgo.rank_logs[0]);
  const nlohmann::json m_full = measured_memory(full.rank_logs[0]);
  ASSERT_FALSE(m_sgo.is_null());
  ASSERT_FALSE(m_full.is_null());
  std::printf("gathered peak: FULL_SHARD %lld bytes, SHARD_GRAD_OP %lld bytes\n",
              static_cast<long long>(m_full["gathered_peak_bytes"].get<int64_t>()),
              static_cast<long long>(m_sgo["gathered_peak_bytes"].get<int64_t>()));
  // llama_gqa has two blocks, so FULL_SHARD's root + current + prefetched block is every unit:
  // the same peak as SHARD_GRAD_OP. Both equal the plan's formulas (fsdp/shard_plan.h).
  EXPECT_LE(m_full["gathered_peak_bytes"].get<int64_t>(),
            m_sgo["gathered_peak_bytes"].get<int64_t>());
  for (const RunResult* run : {&sgo, &full}) {
    const nlohmann::json planned = measured_memory(run->rank_logs[0], "memory estimate ");
    const nlohmann::json measured = measured_memory(run->rank_logs[0]);
    ASSERT_FALSE(planned.is_null()) << run->rank_logs[0];
    for (const char* key : {"gathered_peak_bytes", "full_grad_peak_bytes", "master_bytes"}) {
      EXPECT_EQ(measured[key], planned[key]) << key;
    }
  }
  const RunResult sgo4 = run("shard_grad_op_w4", 4, 4, {"--fsdp.strategy=SHARD_GRAD_OP"});
  expect_equivalent("shard_grad_op_w4", sgo4);
}

TEST_F(FsdpDistTest, NoShardMatchesOneProcess) {
  for (int world : {2, 4}) {
    const std::string name = "no_shard_w" + std::to_string(world);
    expect_equivalent(name, run(name, world, world, {"--fsdp.strategy=NO_SHARD"}));
  }
}

TEST_F(FsdpDistTest, HybridShardTwoByTwoMatchesOneProcess) {
  // Two "nodes" of two ranks: shard inside each pair, replicate across the pairs.
  const RunResult got = run("hybrid_2x2", 4, 2, {"--fsdp.strategy=HYBRID_SHARD"});
  expect_equivalent("hybrid_2x2", got);
  const nlohmann::json m = measured_memory(got.rank_logs[0]);
  const RunResult full = run("full_shard_w2_bytes", 2, 2, {"--train.steps=2"});
  EXPECT_EQ(m["master_bytes"], measured_memory(full.rank_logs[0])["master_bytes"])
      << "HYBRID 2x2 shards like FULL_SHARD on 2 ranks";
}

TEST_F(FsdpDistTest, ReduceOnLastMicroBatchMatchesOneProcess) {
  const RunResult got = run("reduce_last_w2", 2, 2, {"--fsdp.reduce_on_last_micro_batch=true"});
  expect_equivalent("reduce_last_w2", got);
}

// Evaluation during training: every rank evaluates its share of data.eval_path and the sums are
// reduced, so eval loss is the same at every world size and strategy, covers every sequence
// once (39 sequences: ranks get unequal shares), and equals `shardtrain eval` of the exported
// model after the last step.
TEST_F(FsdpDistTest, EvalDuringTrainingIsTheSameAtEveryWorldSize) {
  const std::string eval_path = dir_ + "/eval.jsonl";
  {
    std::ifstream in(dir_ + "/data.jsonl");
    std::ofstream out(eval_path);
    std::string line;
    for (int i = 0; i < 39 && std::getline(in, line); ++i) out << line << "\n";
  }
  const std::vector<std::string> eval_args = {"--train.steps=10", "--data.eval_path=" + eval_path,
                                              "--train.eval_every=5"};
  struct EvalPoint {
    int64_t step, sequences, tokens;
    double loss;
  };
  const auto evals_of = [&](const std::string& name) {
    std::vector<EvalPoint> points;
    std::ifstream lines(dir_ + "/" + name + "/metrics.jsonl");
    for (std::string line; std::getline(lines, line);) {
      const nlohmann::json record = nlohmann::json::parse(line);
      if (!record.contains("eval_loss")) continue;
      points.push_back({record["step"].get<int64_t>(), record["eval_sequences"].get<int64_t>(),
                        record["eval_tokens"].get<int64_t>(), record["eval_loss"].get<double>()});
      EXPECT_NEAR(record["eval_ppl"].get<double>(), std::exp(points.back().loss), 1e-9);
    }
    return points;
  };
  const RunResult one = run("eval_w1", 1, 1, eval_args);
  const std::vector<EvalPoint> want = evals_of("eval_w1");
  ASSERT_EQ(want.size(), 2u) << "evaluations after steps 5 and 10";
  EXPECT_EQ(want[0].step, 5);
  EXPECT_EQ(want[1].step, 10);
  EXPECT_EQ(want[0].sequences, 39);
  EXPECT_GT(want[0].tokens, 39 * 4);
  EXPECT_LT(want[1].loss, want[0].loss) << "training on the same sequences lowers eval loss";
  for (const auto& [name, world, strategy] : std::vector<std::tuple<std::string, int, std::string>>{
           {"eval_w2_full", 2, "FULL_SHARD"}, {"eval_w4_sgo", 4, "SHARD_GRAD_OP"}}) {
    std::vector<std::string> args = eval_args;
    args.push_back("--fsdp.strategy=" + strategy);
    run(name, world, world, args);
    const std::vector<EvalPoint> got = evals_of(name);
    ASSERT_EQ(got.size(), want.size()) << name;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(got[i].step, want[i].step) << name;
      EXPECT_EQ(got[i].sequences, want[i].sequences) << name;
      EXPECT_EQ(got[i].tokens, want[i].tokens) << name;
      EXPECT_NEAR(got[i].loss, want[i].loss, 1e-5 * want[i].loss)
          << name << " step " << got[i].step;
    }
  }
  // `shardtrain eval` of the exported (fp32) model gives the last evaluation's loss.
  const std::string command = std::string(SHARDTRAIN_BINARY) + " eval --model " + one.output_dir +
                              " --data " + eval_path + " --seq-len 16 --batch 3 --device cpu 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output, last;
  char buffer[512];
  while (std::fgets(buffer, sizeof(buffer), pipe) != nullptr) output += buffer;
  ASSERT_EQ(::pclose(pipe), 0) << output;
  std::istringstream text(output);
  for (std::string line; std::getline(text, line);) {
    if (!line.empty()) last = line;
  }
  const nlohmann::json result = nlohmann::json::parse(last);
  EXPECT_EQ(result["tokens"].get<int64_t>(), want[1].tokens);
  EXPECT_NEAR(result["loss"].get<double>(), want[1].loss, 1e-5 * want[1].loss) << output;
}

// train.epochs instead of steps: 0.5 epochs of 40 sequences at a global batch of 4 = 5 steps,
// the epoch in every record; the configured warmup (20) is clamped to the run with a warning;
// a resume that lengthens the run and changes the LR warns and says what changed.
TEST_F(FsdpDistTest, EpochsWarmupClampAndResumeChanges) {
  const std::string checkpoints = dir_ + "/epochs_checkpoints";
  const RunResult got = run("epochs_w2", 2, 2,
                            {"--train.steps=0", "--train.epochs=0.5", "--optim.warmup_steps=20",
                             "--train.checkpoint_dir=" + checkpoints});
  ASSERT_EQ(got.losses.size(), 5u);
  std::ifstream lines(dir_ + "/epochs_w2/metrics.jsonl");
  int64_t step = 0;
  for (std::string line; std::getline(lines, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    ++step;
    EXPECT_NEAR(record["epoch"].get<double>(), 0.1 * static_cast<double>(step), 1e-12);
  }
  EXPECT_NE(got.rank_logs[0].find("optim.warmup_steps (20) is longer than the run (5 steps); "
                                  "clamped to 5"),
            std::string::npos)
      << got.rank_logs[0];
  EXPECT_NE(got.rank_logs[0].find("step 5/5 | "), std::string::npos) << got.rank_logs[0];

  const RunResult resumed =
      run("epochs_resumed_w2", 2, 2,
          {"--train.steps=8", "--optim.lr=1e-3", "--train.checkpoint_dir=" + checkpoints});
  EXPECT_EQ(resumed.losses.size(), 3u) << "steps 6 to 8";
  EXPECT_NE(resumed.rank_logs[0].find("with a changed run (steps: 5 -> 8; optim.lr: 0.003 -> "
                                      "0.001; optim.warmup_steps: 20 -> 2); training continues "
                                      "with the new settings"),
            std::string::npos)
      << resumed.rank_logs[0];
  // Both set is refused naming both keys.
  const RunResult both =
      run("epochs_and_steps", 1, 1, {"--train.steps=3", "--train.epochs=1"}, /*expect_ok=*/false);
  EXPECT_NE(both.rank_logs[0].find("'train.steps' (3) and 'train.epochs' (1) are both set"),
            std::string::npos)
      << both.rank_logs[0];
}

TEST_F(FsdpDistTest, GlobalBatchTheWorldDoesNotDivideIsRefused) {
  // global_batch 4 with micro_batch 1 on 3 ranks: refused on every rank, before any
  // rendezvous (so no rank waits for the others).
  const RunResult got = run("bad_batch_w3", 3, 3, {}, /*expect_ok=*/false);
  for (const std::string& log : got.rank_logs) {
    EXPECT_NE(log.find("train.global_batch"), std::string::npos) << log;
  }
  EXPECT_TRUE(got.losses.empty());
}

// The one-rank memory levers (fsdp/fsdp_units.h): the pools they use are the plan's bytes; with
// a shard group of two the compute-copy option changes nothing (the bf16 shard is what the
// all-gathers send), and the update in backward is refused on more than one rank.
TEST_F(FsdpDistTest, OneRankLeversFollowThePlanAndShardedRunsIgnoreThem) {
  const RunResult one =
      run("levers_w1", 1, 1,
          {"--fsdp.compute_copy=on_demand", "--optim.update_in_backward=true",
           "--train.micro_batch=4", "--train.max_grad_norm=0", "--train.steps=3"});
  const nlohmann::json planned = measured_memory(one.rank_logs[0], "memory estimate ");
  const nlohmann::json measured = measured_memory(one.rank_logs[0]);
  ASSERT_FALSE(planned.is_null()) << one.rank_logs[0];
  ASSERT_FALSE(measured.is_null()) << one.rank_logs[0];
  EXPECT_EQ(measured, planned);
  EXPECT_EQ(measured["grad_shard_bytes"], 0);
  EXPECT_GT(measured["gathered_peak_bytes"].get<int64_t>(), 0);
  EXPECT_GT(measured["full_grad_peak_bytes"].get<int64_t>(), 0);

  const RunResult plain = run("copy_kept_w2", 2, 2, {"--fsdp.compute_copy=keep"});
  const RunResult on_demand = run("copy_on_demand_w2", 2, 2, {"--fsdp.compute_copy=on_demand"});
  expect_equivalent("copy_on_demand_w2", on_demand);
  EXPECT_EQ(on_demand.losses, plain.losses);
  EXPECT_EQ(measured_memory(on_demand.rank_logs[0]), measured_memory(plain.rank_logs[0]));

  const RunResult refused =
      run("update_in_backward_w2", 2, 2,
          {"--optim.update_in_backward=true", "--train.micro_batch=2", "--train.max_grad_norm=0"},
          /*expect_ok=*/false);
  for (const std::string& log : refused.rank_logs) {
    EXPECT_NE(log.find("'optim.update_in_backward' runs on one rank"), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace shardtrain
