// What guards a run's directories, with real processes of the shardtrain binary:
//  - shard files swapped between ranks (their manifest entries renamed to match, so every
//    checksum still agrees) are refused on export and resume by their own headers; before,
//    export succeeded with the wrong weights;
//  - a second run on a checkpoint or output dir that a live run holds is refused up front in
//    one line naming the holder; a lock left by a dead run is taken over;
//  - Ctrl-C (SIGINT) stops in order like SIGTERM: the checkpoint is saved, exit code 130;
//  - an export that cannot write its weights (a file-size limit, as on a full disk) leaves the
//    older export in the output dir whole and no temporaries.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "core/testing/test_support.h"
#include "train/checkpoint/dir_lock.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;
using testing::kBinary;
using testing::read_existing;
using testing::read_text;
using testing::run_command;

std::string this_host() {
  char buffer[256] = {};
  ::gethostname(buffer, sizeof(buffer) - 1);
  return buffer;
}

class CheckpointGuardTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::make_resume_job_dir("shardtrain_guard_", {"llama_gqa"});
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  static std::string train_command(int world, const std::string& args) {
    const std::string launcher = world == 1 ? kBinary
                                            : kBinary + " launch --standalone --nproc-per-node " +
                                                  std::to_string(world) + " --";
    return launcher + " train --config " + dir_ + "/llama_gqa.toml " + args;
  }
  static CommandResult train(int world, const std::string& args) {
    return run_command(train_command(world, args));
  }
  static void expect_user_error(const CommandResult& r, const std::vector<std::string>& needles) {
    EXPECT_EQ(r.exit_code, 2) << r.output;
    const std::vector<std::string> errors = r.error_lines();
    ASSERT_EQ(errors.size(), 1u) << r.output;
    for (const std::string& needle : needles) {
      EXPECT_NE(errors[0].find(needle), std::string::npos) << errors[0] << " lacks " << needle;
    }
  }
  // Runs `command` in the background, waits until its metrics show `steps` steps, sends `sig`
  // and returns its exit status.
  static int interrupt_after(const std::string& command, const std::string& metrics, int steps,
                             int sig) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), nullptr);
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(metrics);
      int lines = 0;
      for (std::string line; std::getline(in, line);) ++lines;
      if (lines >= steps) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    return status;
  }

  static std::string dir_;
};

std::string CheckpointGuardTest::dir_;

TEST_F(CheckpointGuardTest, SwappedShardFilesAreRefusedByTheirHeaders) {
  const std::string ckpt = dir_ + "/swap/ckpt";
  CommandResult r = train(2, "--checkpoint-dir " + ckpt +
                                 " --checkpoint-every 5 "
                                 "--train.stop_at_step=5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string good = ckpt + "/step_00000005";
  ASSERT_EQ(run_command(kBinary + " export " + good + " --out " + dir_ + "/swap/good").exit_code,
            0);

  // Swap the two ranks' files and their manifest entries: sizes and checksums all still match.
  const std::string swapped = dir_ + "/swap/swapped";
  fs::copy(good, swapped, fs::copy_options::recursive);
  fs::rename(swapped + "/rank_00000.safetensors", swapped + "/tmp.safetensors");
  fs::rename(swapped + "/rank_00001.safetensors", swapped + "/rank_00000.safetensors");
  fs::rename(swapped + "/tmp.safetensors", swapped + "/rank_00001.safetensors");
  nlohmann::json manifest = nlohmann::json::parse(read_existing(swapped + "/manifest.json"));
  for (nlohmann::json& entry : manifest["files"]) {
    const std::string file = entry["file"];
    if (file == "rank_00000.safetensors") entry["file"] = "rank_00001.safetensors";
    if (file == "rank_00001.safetensors") entry["file"] = "rank_00000.safetensors";
  }
  std::ofstream(swapped + "/manifest.json", std::ios::trunc) << manifest.dump();

  expect_user_error(
      run_command(kBinary + " export " + swapped + " --out " + dir_ + "/swap/x"),
      {swapped + "/rank_00000.safetensors", "its header says shard_rank = 1", "expects 0"});
  EXPECT_FALSE(fs::exists(dir_ + "/swap/x"));
  const CommandResult resumed = train(2, "--resume " + swapped + " --train.steps=6");
  EXPECT_NE(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("its header says shard_rank"), std::string::npos) << resumed.output;
}

TEST_F(CheckpointGuardTest, ASecondRunOnTheSameDirsIsRefusedUpFront) {
  const std::string ckpt = dir_ + "/lock/ckpt", out = dir_ + "/lock/out";
  const std::string pid = std::to_string(::getpid());
  {
    const DirLock held(ckpt, "train.checkpoint_dir");  // as a running job holds it
    expect_user_error(train(1, "--checkpoint-dir " + ckpt),
                      {"train.checkpoint_dir " + ckpt + " is in use by another run (host " +
                       this_host() + ", pid " + pid + ", since "});
    // Nothing was written beside the holder's lock.
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(ckpt)) names.push_back(entry.path().filename());
    EXPECT_EQ(names, std::vector<std::string>{kDirLockFile});
    // Two ranks: every rank stops before touching the dir.
    const CommandResult two = train(2, "--checkpoint-dir " + ckpt);
    EXPECT_NE(two.exit_code, 0) << two.output;
    EXPECT_NE(two.output.find("is in use by another run"), std::string::npos) << two.output;
  }
  // A lock file left by a run that died (its pid is gone, no kernel lock) is taken over.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  std::ofstream(ckpt + "/" + kDirLockFile)
      << nlohmann::json{{"host", this_host()}, {"pid", dead}, {"started", "then"}}.dump();
  const CommandResult r = train(1, "--checkpoint-dir " + ckpt + " --train.steps=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(fs::exists(ckpt + "/" + kDirLockFile)) << "released at exit";
  EXPECT_TRUE(fs::exists(ckpt + "/step_00000003/manifest.json"));
  {
    const DirLock held(out, "train.output_dir");
    expect_user_error(train(1, "--train.steps=3 --train.output_dir=" + out),
                      {"train.output_dir " + out + " is in use by another run", "pid " + pid});
    expect_user_error(run_command(kBinary + " export " + ckpt + " --out " + out),
                      {"export --out " + out + " is in use by another run", "pid " + pid});
    EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
  }
  ASSERT_EQ(run_command(kBinary + " export " + ckpt + " --out " + out).exit_code, 0);
  EXPECT_TRUE(fs::exists(out + "/model.safetensors"));
  EXPECT_FALSE(fs::exists(out + "/" + kDirLockFile));
}

TEST_F(CheckpointGuardTest, SigintStopsInOrderWithExitCode130) {
  fs::create_directories(dir_ + "/sigint");
  const std::string ckpt = dir_ + "/sigint/ckpt", metrics = dir_ + "/sigint/metrics.jsonl";
  const std::string log = dir_ + "/sigint/run.log";
  const int status = interrupt_after(
      train_command(1, "--train.steps=600 --checkpoint-dir " + ckpt + " --metrics " + metrics) +
          " > " + log + " 2>&1",
      metrics, 20, SIGINT);
  ASSERT_TRUE(WIFEXITED(status)) << "died of signal " << WTERMSIG(status) << ": " << read_text(log);
  EXPECT_EQ(WEXITSTATUS(status), 130) << read_text(log);
  std::ifstream in(metrics);
  int64_t last = 0;
  for (std::string line; std::getline(in, line);) last = nlohmann::json::parse(line)["step"];
  ASSERT_GT(last, 0);
  ASSERT_LT(last, 600) << "the run ended before the signal; nothing was tested";
  EXPECT_NE(read_text(log).find("stopped after step " + std::to_string(last) + " (SIGINT)"),
            std::string::npos)
      << read_text(log);
  char step_dir[32];
  std::snprintf(step_dir, sizeof(step_dir), "/step_%08lld", static_cast<long long>(last));
  EXPECT_TRUE(fs::exists(ckpt + step_dir + "/manifest.json"));

  // Without checkpoints: the same orderly stop, nothing saved, still 130.
  const std::string metrics2 = dir_ + "/sigint/metrics2.jsonl", log2 = dir_ + "/sigint/run2.log";
  const int plain = interrupt_after(
      train_command(1, "--train.steps=600 --metrics " + metrics2) + " > " + log2 + " 2>&1",
      metrics2, 5, SIGINT);
  ASSERT_TRUE(WIFEXITED(plain)) << read_text(log2);
  EXPECT_EQ(WEXITSTATUS(plain), 130) << read_text(log2);
  EXPECT_NE(read_text(log2).find("(SIGINT); no checkpoint saved"), std::string::npos)
      << read_text(log2);
}

TEST_F(CheckpointGuardTest, AnExportThatCannotWriteKeepsTheOlderExportWhole) {
  const std::string ckpt = dir_ + "/fsize/ckpt", out = dir_ + "/fsize/out";
  ASSERT_EQ(
      train(1, "--checkpoint-dir " + ckpt + " --checkpoint-every 5 --train.steps=10").exit_code, 0);
  ASSERT_EQ(run_command(kBinary + " export " + ckpt + "/step_00000005 --out " + out).exit_code, 0);
  const std::string old_weights = read_existing(out + "/model.safetensors");
  const std::string old_config = read_existing(out + "/config.json");
  ASSERT_GT(old_weights.size(), 64u << 10);
  // 64 KiB per file (sh's ulimit -f counts 512-byte blocks): config.json fits, the weights not.
  const CommandResult r = run_command("ulimit -f 128; exec " + kBinary + " export " + ckpt +
                                      "/step_00000010 --out " + out);
  expect_user_error(r, {"model.safetensors"});
  EXPECT_EQ(read_existing(out + "/model.safetensors"), old_weights);
  EXPECT_EQ(read_existing(out + "/config.json"), old_config);
  for (const auto& entry : fs::directory_iterator(out)) {
    const std::string name = entry.path().filename();
    EXPECT_TRUE(name == "model.safetensors" || name == "config.json" ||
                name.find("tokenizer") != std::string::npos ||
                name.find(".json") != std::string::npos)
        << "left behind: " << name;
    EXPECT_EQ(name.rfind(".shardtrain", 0), std::string::npos) << "left behind: " << name;
  }
}

}  // namespace
}  // namespace shardtrain
