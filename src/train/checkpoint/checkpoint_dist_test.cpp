// Sharded checkpoints end to end, with real processes of the shardtrain binary (one process, or
// `shardtrain launch --standalone --nproc-per-node N` with Gloo on loopback):
//  - exact resume: 10 steps (train.stop_at_step) + resume to 20 is bit-identical to 20 steps
//    uninterrupted (every loss, and the final model.safetensors byte for byte), world 1 and 2;
//    the metrics JSONL holds steps 1..20 once each; SIGTERM checkpoints and exits 0;
//  - --resume auto falls back past a corrupted newest checkpoint, and says so;
//  - resharding 4 -> 2, 2 -> 4 and FULL_SHARD -> NO_SHARD within 1e-6 of the uninterrupted run;
//  - export equals the trainer's own final save (fp32, byte for byte), also split into shards
//    with an index under a tiny --max-shard-size, and for a tied-embedding Qwen2 model;
//  - bad input: exit 2 with one error line naming the file or key;
//  - asynchronous saves (train/checkpoint/checkpoint_saver.h): the files equal those of synchronous
//  saves
//    while training runs on during a slowed write (test hook
//    SHARDTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS), the step loop is not stalled by the write
//    (up to train.checkpoint_max_lag_steps), a stop's checkpoint is complete before exit, and a
//    failed background write is a one-line error (exit 2) that leaves the previous checkpoint
//    complete and resumable.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/testing/test_support.h"
#include "io/hf_checkpoint.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::run_command;

using testing::kBinary;
using testing::kTestWorker;

struct Metrics {
  std::vector<int64_t> steps;
  std::vector<double> losses;
};

using testing::read_existing;
using testing::read_text;

Metrics read_metrics(const std::string& path) {
  Metrics m;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    m.steps.push_back(record["step"].get<int64_t>());
    m.losses.push_back(record["loss"].get<double>());
  }
  return m;
}

using testing::one_to;

// The metrics record of `step` in a metrics JSONL (null when absent).
nlohmann::json metrics_record(const std::string& path, int64_t step) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["step"].get<int64_t>() == step) return record;
  }
  return nullptr;
}

using testing::ScopedEnv;

// The step after which the log says checkpoint `step` became complete, or -1.
int64_t completed_after(const std::string& output, int64_t step) {
  std::smatch match;
  const std::regex pattern("checkpoint step " + std::to_string(step) +
                           " complete after step ([0-9]+) ");
  return std::regex_search(output, match, pattern) ? std::stoll(match[1].str()) : -1;
}

class CheckpointDistTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::make_resume_job_dir("shardtrain_ckpt_", {"llama_gqa", "qwen2_tied_bias"});
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // `shardtrain train` of run `name` on `world` processes (the launcher for world > 1), with
  // its metrics at name/metrics.jsonl and its final save in name/out.
  // `binary`: kTestWorker where the test sets a SHARDTRAIN_TEST_* hook.
  static CommandResult train(const std::string& name, int world, const std::string& args,
                             const std::string& model = "llama_gqa",
                             const std::string& binary = kBinary) {
    const std::string run_dir = dir_ + "/" + name;
    fs::create_directories(run_dir);
    const std::string launcher = world == 1 ? binary
                                            : binary + " launch --standalone --nproc-per-node " +
                                                  std::to_string(world) + " --";
    return run_command(launcher + " train --config " + dir_ + "/" + model + ".toml --metrics " +
                       run_dir + "/metrics.jsonl --train.output_dir=" + run_dir + "/out " + args);
  }
  static std::string ckpt(const std::string& name) { return dir_ + "/" + name + "/ckpt"; }
  static std::string out(const std::string& name) { return dir_ + "/" + name + "/out"; }
  static Metrics metrics(const std::string& name) {
    return read_metrics(dir_ + "/" + name + "/metrics.jsonl");
  }
  // The uninterrupted 20-step run on `world` ranks (run once per world size).
  static const std::string& baseline(int world, const std::string& model = "llama_gqa") {
    static std::map<std::string, std::string> done;
    const std::string name = "full_" + model + "_w" + std::to_string(world);
    if (!done.count(name)) {
      const CommandResult r = train(name, world, "", model);
      EXPECT_EQ(r.exit_code, 0) << r.output;
      done[name] = name;
    }
    return done[name];
  }

  // 10 steps with checkpoints every 5, then a resume to 20, on `first` then `second` ranks.
  static void interrupted_run(const std::string& name, int first, int second,
                              const std::string& first_args = "",
                              const std::string& second_args = "") {
    const std::string flags = "--checkpoint-dir " + ckpt(name) + " --checkpoint-every 5 ";
    CommandResult r = train(name, first, flags + "--train.stop_at_step=10 " + first_args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("stopped after step 10"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out(name))) << "a stopped run saves no final model";
    r = train(name, second, flags + second_args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("resumed from checkpoint " + ckpt(name) + "/step_00000010"),
              std::string::npos)
        << r.output;
  }

  static void expect_bit_identical(const std::string& want, const std::string& got) {
    const Metrics a = metrics(want), b = metrics(got);
    EXPECT_EQ(b.steps, one_to(20)) << got << ": one record per completed step";
    ASSERT_EQ(a.losses.size(), b.losses.size());
    for (size_t s = 0; s < a.losses.size(); ++s) {
      EXPECT_EQ(a.losses[s], b.losses[s]) << got << " step " << s + 1;
    }
    EXPECT_EQ(read_existing(out(want) + "/model.safetensors"),
              read_existing(out(got) + "/model.safetensors"))
        << got << ": final parameters differ";
  }

  // Largest relative loss difference and parameter difference (relative to each tensor's
  // largest magnitude) of `got` against `want`.
  static void expect_close(const std::string& want, const std::string& got, double loss_tolerance,
                           double param_tolerance = -1) {
    if (param_tolerance < 0) param_tolerance = loss_tolerance;
    const Metrics a = metrics(want), b = metrics(got);
    EXPECT_EQ(b.steps, one_to(20)) << got;
    ASSERT_EQ(a.losses.size(), b.losses.size());
    double worst_loss = 0, worst_param = 0;
    for (size_t s = 0; s < a.losses.size(); ++s) {
      worst_loss =
          std::max(worst_loss, std::abs(a.losses[s] - b.losses[s]) / std::abs(a.losses[s]));
    }
    const HfCheckpoint x = HfCheckpoint::open(out(want)), y = HfCheckpoint::open(out(got));
    for (const std::string& tensor : x.tensor_names()) {
      const Shape shape = x.find(tensor)->shape;
      std::vector<float> vx(shape.numel()), vy(shape.numel());
      x.read_into_f32(tensor, shape, vx.data());
      y.read_into_f32(tensor, shape, vy.data());
      double scale = 0, diff = 0;
      for (size_t i = 0; i < vx.size(); ++i) {
        scale = std::max(scale, static_cast<double>(std::abs(vx[i])));
        diff = std::max(diff, static_cast<double>(std::abs(vx[i] - vy[i])));
      }
      worst_param = std::max(worst_param, diff / std::max(scale, 1e-12));
    }
    std::printf("[%s vs %s] largest relative loss difference %.3g, parameter difference %.3g\n",
                got.c_str(), want.c_str(), worst_loss, worst_param);
    EXPECT_LE(worst_loss, loss_tolerance) << got;
    EXPECT_LE(worst_param, param_tolerance) << got;
  }

  // Exit code 2 and one error line containing every needle.
  static void expect_user_error(const CommandResult& r, const std::vector<std::string>& needles) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    const std::vector<std::string> errors = r.error_lines();
    ASSERT_EQ(errors.size(), 1u) << r.output;
    for (const std::string& needle : needles) {
      EXPECT_NE(errors[0].find(needle), std::string::npos) << errors[0] << " lacks " << needle;
    }
  }

  static void flip_byte(const std::string& path, size_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    const char c = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(offset));
    f.put(static_cast<char>(c ^ 0x5a));
  }

  static std::string dir_;
};

std::string CheckpointDistTest::dir_;

TEST_F(CheckpointDistTest, ResumeIsBitIdenticalOnOneAndTwoRanks) {
  for (int world : {1, 2}) {
    const std::string name = "resume_w" + std::to_string(world);
    interrupted_run(name, world, world);
    expect_bit_identical(baseline(world), name);
    // keep_checkpoints = 3: steps 10, 15, 20 remain; 5 was pruned; each is complete.
    for (const int step : {10, 15, 20}) {
      const std::string step_dir = ckpt(name) + "/step_000000" + std::to_string(step);
      EXPECT_TRUE(fs::exists(step_dir + "/manifest.json")) << step_dir;
      for (int r = 0; r < world; ++r) {
        EXPECT_TRUE(fs::exists(step_dir + "/rank_0000" + std::to_string(r) + ".safetensors"));
      }
    }
    EXPECT_FALSE(fs::exists(ckpt(name) + "/step_00000005"));
  }
}

TEST_F(CheckpointDistTest, SigtermSavesAndStopsThenResumeMatches) {
  // A longer run so the signal lands mid-run; SIGTERM is checked after every step.
  const std::string args = "--train.steps=600 --checkpoint-dir " + ckpt("sigterm");
  const CommandResult full = train("sigterm_full", 1, "--train.steps=600");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  fs::create_directories(dir_ + "/sigterm");
  const std::string log = dir_ + "/sigterm/first.log";
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string command = kBinary + " train --config " + dir_ + "/llama_gqa.toml --metrics " +
                                dir_ + "/sigterm/metrics.jsonl " + args + " > " + log + " 2>&1";
    ::execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), nullptr);
    ::_exit(127);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (metrics("sigterm").steps.size() < 20 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << read_text(log);
  const Metrics first = metrics("sigterm");
  ASSERT_LT(first.steps.size(), 600u) << "the run ended before the signal; nothing was tested";
  const int64_t stopped = first.steps.back();
  EXPECT_NE(read_text(log).find("stopped after step " + std::to_string(stopped) + " (SIGTERM)"),
            std::string::npos)
      << read_text(log);
  char step_dir[32];
  std::snprintf(step_dir, sizeof(step_dir), "/step_%08lld", static_cast<long long>(stopped));
  EXPECT_TRUE(fs::exists(ckpt("sigterm") + step_dir + "/manifest.json"));

  const CommandResult resumed = train("sigterm", 1, args);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const Metrics a = metrics("sigterm_full"), b = metrics("sigterm");
  EXPECT_EQ(b.steps, one_to(600));
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(read_existing(out("sigterm_full") + "/model.safetensors"),
            read_existing(out("sigterm") + "/model.safetensors"));
}

TEST_F(CheckpointDistTest, AutoResumeFallsBackPastACorruptCheckpoint) {
  const std::string name = "fallback";
  const std::string flags = "--checkpoint-dir " + ckpt(name) + " --checkpoint-every 5 ";
  CommandResult r = train(name, 1, flags + "--train.stop_at_step=10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  flip_byte(ckpt(name) + "/step_00000010/rank_00000.safetensors", 5000);
  r = train(name, 1, flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("rank_00000.safetensors is corrupt"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("falling back to the previous checkpoint"), std::string::npos);
  EXPECT_NE(r.output.find("resumed from checkpoint " + ckpt(name) + "/step_00000005"),
            std::string::npos)
      << r.output;
  // Steps 6..10 ran twice; the metrics keep each step once and the result is unchanged.
  expect_bit_identical(baseline(1), name);
}

TEST_F(CheckpointDistTest, ReshardedLoadIsExact) {
  // A 4-rank checkpoint loaded on 2 ranks (and a 2-rank one on 4) and saved at once, without a
  // step: the weights are the saved ones, byte for byte (export reassembles them independently).
  for (const auto& [name, first, second] :
       {std::tuple{"exact_4_to_2", 4, 2}, std::tuple{"exact_2_to_4", 2, 4}}) {
    const std::string flags = "--checkpoint-dir " + ckpt(name) + " ";
    CommandResult r = train(name, first, flags + "--train.stop_at_step=10");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    r = train(name, second, flags + "--train.steps=10");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string hf = dir_ + "/" + name + "/hf";
    r = run_command(kBinary + " export " + ckpt(name) + " --out " + hf + " --dtype fp32");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(read_existing(hf + "/model.safetensors"),
              read_existing(out(name) + "/model.safetensors"))
        << name;
  }
}

TEST_F(CheckpointDistTest, ReshardedResumeMatchesWithinFloatReassociation) {
  // Losses within 1e-6 relative. Parameters: 20 AdamW steps turn the reassociation differences
  // of the first 10 steps (on the other world size) into ~4e-6 of a tensor's largest value, the
  // same as between uninterrupted runs on those world sizes (printed), hence 1e-5.
  expect_close(baseline(2), baseline(4), 1e-5);
  interrupted_run("reshard_4_to_2", 4, 2);
  expect_close(baseline(2), "reshard_4_to_2", 1e-6, 1e-5);
  interrupted_run("reshard_2_to_4", 2, 4);
  expect_close(baseline(4), "reshard_2_to_4", 1e-6, 1e-5);
  interrupted_run("full_to_no_shard", 2, 2, "--fsdp.strategy=FULL_SHARD",
                  "--fsdp.strategy=NO_SHARD");
  expect_close(baseline(2), "full_to_no_shard", 1e-6, 1e-6);
  // HYBRID_SHARD 2x2 (only the first replica group writes shards) -> FULL_SHARD on 2.
  interrupted_run("hybrid_to_full", 4, 2, "--fsdp.strategy=HYBRID_SHARD --fsdp.shard_group_size=2",
                  "");
  expect_close(baseline(2), "hybrid_to_full", 1e-6, 1e-5);
  EXPECT_FALSE(fs::exists(ckpt("hybrid_to_full") + "/step_00000005/rank_00002.safetensors"));
  // One process resumes a 4-rank checkpoint too (shard group 4 -> 1).
  interrupted_run("reshard_4_to_1", 4, 1);
  expect_close(baseline(1), "reshard_4_to_1", 1e-6, 1e-5);
}

TEST_F(CheckpointDistTest, ExportEqualsTheTrainersFinalSave) {
  for (const std::string model : {"llama_gqa", "qwen2_tied_bias"}) {
    const std::string name = "export_" + model;
    const CommandResult r = train(name, 2, "--checkpoint-dir " + ckpt(name), model);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const std::string hf = dir_ + "/" + name + "/hf";
    const CommandResult e =
        run_command(kBinary + " export " + ckpt(name) + " --out " + hf + " --dtype fp32");
    ASSERT_EQ(e.exit_code, 0) << e.output;
    EXPECT_NE(e.output.find("step 20"), std::string::npos) << e.output;
    EXPECT_EQ(read_existing(hf + "/model.safetensors"),
              read_existing(out(name) + "/model.safetensors"))
        << model;
    EXPECT_EQ(read_existing(hf + "/config.json"), read_existing(out(name) + "/config.json"))
        << model;
  }
  // A tiny shard limit: several files plus an index, with the same tensors.
  const std::string name = "export_llama_gqa", sharded = dir_ + "/" + name + "/hf_sharded";
  const CommandResult e = run_command(kBinary + " export " + ckpt(name) + "/step_00000020 --out " +
                                      sharded + " --max-shard-size 64KB");
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_FALSE(fs::exists(sharded + "/model.safetensors"));
  const nlohmann::json index =
      nlohmann::json::parse(read_text(sharded + "/model.safetensors.index.json"));
  std::set<std::string> files;
  for (const auto& [tensor, file] : index["weight_map"].items())
    files.insert(file.get<std::string>());
  EXPECT_GT(files.size(), 2u);
  for (const std::string& file : files)
    EXPECT_LE(fs::file_size(sharded + "/" + file), 64'000u + 4096u) << file;
  const HfCheckpoint a = HfCheckpoint::open(out(name)), b = HfCheckpoint::open(sharded);
  EXPECT_EQ(a.tensor_names(), b.tensor_names());
  for (const std::string& tensor : a.tensor_names()) {
    const SafetensorsEntry* x = a.find(tensor);
    const SafetensorsEntry* y = b.find(tensor);
    ASSERT_EQ(x->bytes, y->bytes) << tensor;
    EXPECT_EQ(std::memcmp(x->data, y->data, x->bytes), 0) << tensor;
  }
  // bf16 export: every tensor in BF16.
  const std::string bf16 = dir_ + "/" + name + "/hf_bf16";
  ASSERT_EQ(
      run_command(kBinary + " export " + ckpt(name) + " --out " + bf16 + " --dtype bf16").exit_code,
      0);
  const HfCheckpoint c = HfCheckpoint::open(bf16);
  for (const std::string& tensor : c.tensor_names()) EXPECT_EQ(c.find(tensor)->dtype, DType::kBF16);
}

TEST_F(CheckpointDistTest, BadCheckpointsAndKeysAreOneLineErrors) {
  const std::string name = "bad";
  const std::string good = ckpt(name) + "/step_00000005";
  CommandResult r = train(
      name, 1, "--checkpoint-dir " + ckpt(name) + " --checkpoint-every 5 --train.stop_at_step=5");
  ASSERT_EQ(r.exit_code, 0) << r.output;

  expect_user_error(train("bad_missing", 1, "--resume " + dir_ + "/no_such_ckpt"),
                    {"--resume", dir_ + "/no_such_ckpt", "no such checkpoint"});
  expect_user_error(train("bad_every", 1, "--checkpoint-dir x --checkpoint-every=-1"),
                    {"train.checkpoint_every", ">= 0"});
  // A checkpoint of llama_gqa resumed with another model config.
  expect_user_error(train("bad_model", 1, "--resume " + good, "qwen2_tied_bias"),
                    {good, "different model", "model_config.json"});

  fs::copy(good, dir_ + "/corrupt", fs::copy_options::recursive);
  flip_byte(dir_ + "/corrupt/rank_00000.safetensors", 3000);
  expect_user_error(train("bad_corrupt", 1, "--resume " + dir_ + "/corrupt"),
                    {dir_ + "/corrupt/rank_00000.safetensors", "corrupt"});

  fs::copy(good, dir_ + "/truncated", fs::copy_options::recursive);
  fs::resize_file(dir_ + "/truncated/rank_00000.safetensors", 1000);
  expect_user_error(train("bad_truncated", 1, "--resume " + dir_ + "/truncated"),
                    {dir_ + "/truncated/rank_00000.safetensors", "truncated"});

  fs::copy(good, dir_ + "/incomplete", fs::copy_options::recursive);
  fs::remove(dir_ + "/incomplete/manifest.json");
  expect_user_error(train("bad_incomplete", 1, "--resume " + dir_ + "/incomplete"),
                    {dir_ + "/incomplete", "manifest.json"});
  expect_user_error(run_command(kBinary + " export " + dir_ + "/incomplete --out " + dir_ + "/x"),
                    {dir_ + "/incomplete", "manifest.json"});
  expect_user_error(run_command(kBinary + " export " + dir_ + "/truncated --out " + dir_ + "/x"),
                    {"rank_00000.safetensors", "truncated"});
  EXPECT_FALSE(fs::exists(dir_ + "/x"));
}

TEST_F(CheckpointDistTest, AsyncCheckpointFilesEqualSynchronousOnes) {
  // 10 steps on 2 ranks with checkpoints every 5, written synchronously, then in the background
  // by a slowed writer (4 files x 100 ms on rank 0) while steps 6..10 run: a writer that read
  // the live shards instead of the step-5 snapshot would write other bytes.
  const std::string flags = " --checkpoint-every 5 --train.steps=10 ";
  CommandResult r = train(
      "sync", 2, "--checkpoint-dir " + ckpt("sync") + flags + "--train.checkpoint_async=false");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(completed_after(r.output, 5), 5) << r.output;
  {
    const ScopedEnv slow("SHARDTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS", "100");
    r = train("async", 2, "--checkpoint-dir " + ckpt("async") + flags, "llama_gqa", kTestWorker);
  }
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(completed_after(r.output, 5), 5) << r.output;
  for (const std::string step_dir : {"/step_00000005", "/step_00000010"}) {
    for (const std::string file : {"/rank_00000.safetensors", "/rank_00001.safetensors"}) {
      const std::string sync_bytes = read_existing(ckpt("sync") + step_dir + file);
      EXPECT_GT(sync_bytes.size(), 1000u) << step_dir << file;
      EXPECT_EQ(read_existing(ckpt("async") + step_dir + file), sync_bytes) << step_dir << file;
    }
    const nlohmann::json a =
        nlohmann::json::parse(read_text(ckpt("sync") + step_dir + "/manifest.json"));
    const nlohmann::json b =
        nlohmann::json::parse(read_text(ckpt("async") + step_dir + "/manifest.json"));
    EXPECT_EQ(a["files"][0], b["files"][0]) << step_dir;
    EXPECT_EQ(a["files"][1], b["files"][1]) << step_dir;
  }
}

TEST_F(CheckpointDistTest, AsyncWriteDoesNotStallTheStepLoop) {
  // A slow disk: each file takes 400 ms (rank 0 writes 4 files: >= 1.6 s per checkpoint).
  const ScopedEnv slow("SHARDTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS", "400");
  // Without a lag bound, steps 11..19 all run while step 10 is written.
  const std::string name = "slow_disk";
  CommandResult r = train(name, 2,
                          "--checkpoint-dir " + ckpt(name) +
                              " --checkpoint-every 10 --train.checkpoint_max_lag_steps=0",
                          "llama_gqa", kTestWorker);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string path = dir_ + "/" + name + "/metrics.jsonl";
  const nlohmann::json at10 = metrics_record(path, 10), at11 = metrics_record(path, 11);
  ASSERT_TRUE(at10.contains("checkpoint_stall_s")) << at10;
  EXPECT_LT(at10["checkpoint_stall_s"].get<double>(), 0.3) << at10;
  for (int64_t step = 11; step < 20; ++step)
    EXPECT_FALSE(metrics_record(path, step).contains("checkpoint_stall_s")) << step;
  EXPECT_TRUE(metrics_record(path, 20).contains("checkpoint_stall_s"));
  // Step 11 ended (its elapsed_s includes step 10's stall) long before step 10's write could.
  EXPECT_LT(at11["elapsed_s"].get<double>() - at10["elapsed_s"].get<double>(), 0.8);
  EXPECT_GT(completed_after(r.output, 10), 12) << r.output;
  EXPECT_NE(r.output.find("background write"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("MB/s on rank 0"), std::string::npos) << r.output;
  // The last checkpoint is complete at exit: export verifies every file against its manifest
  // and equals the run's final save.
  EXPECT_TRUE(fs::exists(ckpt(name) + "/step_00000020/manifest.json"));
  const std::string hf = dir_ + "/" + name + "/hf";
  r = run_command(kBinary + " export " + ckpt(name) + " --out " + hf + " --dtype fp32");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(read_existing(hf + "/model.safetensors"),
            read_existing(out(name) + "/model.safetensors"));

  // With a bound (train.checkpoint_max_lag_steps = 2), steps 11 and 12 overlap the write, then
  // step 12 waits for the rest: the checkpoint is complete before step 13.
  const std::string bounded = "slow_disk_bounded";
  r = train(bounded, 1,
            "--checkpoint-dir " + ckpt(bounded) +
                " --checkpoint-every 10 --train.steps=14 --train.checkpoint_max_lag_steps=2",
            "llama_gqa", kTestWorker);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(completed_after(r.output, 10), 12) << r.output;
  const std::string bounded_path = dir_ + "/" + bounded + "/metrics.jsonl";
  EXPECT_FALSE(metrics_record(bounded_path, 11).contains("checkpoint_stall_s"));
  const nlohmann::json at12 = metrics_record(bounded_path, 12);
  ASSERT_TRUE(at12.contains("checkpoint_stall_s")) << at12;
  EXPECT_GT(at12["checkpoint_stall_s"].get<double>(), 0.5) << at12;
  EXPECT_NE(r.output.find("checkpoint step 10 was not complete 2 steps later"), std::string::npos)
      << r.output;

  // A stop (as on SIGTERM) exits only once its checkpoint is complete.
  const std::string stopped = "slow_disk_stop";
  r = train(stopped, 1, "--checkpoint-dir " + ckpt(stopped) + " --train.stop_at_step=3",
            "llama_gqa", kTestWorker);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(completed_after(r.output, 3), 3) << r.output;
  EXPECT_TRUE(fs::exists(ckpt(stopped) + "/step_00000003/manifest.json"));
}

TEST_F(CheckpointDistTest, FailedAsyncWriteIsAOneLineErrorAndKeepsThePreviousCheckpoint) {
  // A directory where step 10's shard file must go: its background write fails (the atomic
  // writer refuses to replace a directory), while training runs on.
  const std::string name = "write_fails";
  const std::string step10 = ckpt(name) + "/step_00000010";
  fs::create_directories(step10 + "/rank_00000.safetensors");
  // A lag bound makes the failure surface by step 12 however slow the machine is.
  const std::string flags = "--checkpoint-dir " + ckpt(name) +
                            " --checkpoint-every 5 --train.checkpoint_max_lag_steps=2 ";
  CommandResult r = train(name, 1, flags);
  expect_user_error(r, {"checkpoint step 10 not saved", step10 + "/rank_00000.safetensors", "HINT",
                        "newest complete checkpoint is still " + ckpt(name) + "/step_00000005"});
  const std::vector<int64_t> steps = metrics(name).steps;
  ASSERT_FALSE(steps.empty());
  // Surfaced at step 11's all-reduce, or at step 12 where the lag bound waits for the write.
  EXPECT_GE(steps.back(), 10);
  EXPECT_LE(steps.back(), 11);
  ASSERT_TRUE(fs::is_directory(step10));
  EXPECT_FALSE(fs::exists(step10 + "/manifest.json"));
  for (const auto& entry : fs::directory_iterator(step10)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
  EXPECT_FALSE(fs::exists(out(name)));

  // Step 5 is untouched: once the obstacle is gone, the run resumes from it and ends exactly
  // as the uninterrupted run.
  fs::remove_all(step10);
  r = train(name, 1, flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from checkpoint " + ckpt(name) + "/step_00000005"),
            std::string::npos)
      << r.output;
  expect_bit_identical(baseline(1), name);

  // On 2 ranks, rank 1's failure stops both, and no manifest is written.
  const std::string two = "write_fails_w2";
  fs::create_directories(ckpt(two) + "/step_00000010/rank_00001.safetensors");
  r = train(two, 2, "--checkpoint-dir " + ckpt(two) + " --checkpoint-every 5");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("checkpoint step 10 not saved: " + ckpt(two) +
                          "/step_00000010/rank_00001.safetensors exists and is a directory"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("checkpoint step 10 not saved: 1 of 2 ranks failed"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(ckpt(two) + "/step_00000010/manifest.json"));
  EXPECT_TRUE(fs::exists(ckpt(two) + "/step_00000005/manifest.json"));
}

}  // namespace
}  // namespace shardtrain
