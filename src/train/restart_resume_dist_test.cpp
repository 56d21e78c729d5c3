// Fault tolerance through the launcher, with real processes of the shardtrain binary
// (`shardtrain launch --standalone --nproc-per-node 4`, Gloo on loopback):
//  - restart and resume: SIGKILL one worker of a 4-rank run mid-run; the launcher restarts the
//    group, the workers resume from the newest complete checkpoint, and the run ends with
//    final weights byte-equal to an uninterrupted run and steps 1..20 in the metrics once each;
//  - hangs: a rank that stops (SHARDTRAIN_TEST_HANG_AT_STEP of the test worker, or
//    SIGSTOP) is named with its step and phase by the watchdog within --watchdog-timeout, the
//    group is stopped instead of waiting out the Gloo timeout, watchdog restarts count against
//    --max-restarts, and no process is left behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using testing::CommandResult;
using testing::run_command;

using testing::kBinary;
using testing::kTestWorker;

using testing::read_existing;
using testing::read_text;

// The "step" of every complete record of a metrics JSONL (a line still being written is
// skipped).
std::vector<int64_t> metric_steps(const std::string& path) {
  std::vector<int64_t> steps;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (!record.is_discarded()) steps.push_back(record["step"].get<int64_t>());
  }
  return steps;
}

// The NUL-separated entries of /proc/<pid>/<file>.
std::vector<std::string> proc_entries(const std::string& pid, const char* file) {
  std::vector<std::string> out;
  std::ifstream in("/proc/" + pid + "/" + file, std::ios::binary);
  for (std::string entry; std::getline(in, entry, '\0');) out.push_back(entry);
  return out;
}

bool contains(const std::vector<std::string>& entries, const std::string& needle) {
  for (const std::string& e : entries)
    if (e.find(needle) != std::string::npos) return true;
  return false;
}

// Pids of live processes whose command line mentions `token`; with `rank` >= 0, only the
// workers (not the launcher) with RANK=rank.
std::vector<pid_t> processes_with(const std::string& token, int rank = -1) {
  std::vector<pid_t> pids;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string pid = entry.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::vector<std::string> cmdline = proc_entries(pid, "cmdline");
    if (!contains(cmdline, token)) continue;
    if (rank >= 0) {
      // The launcher's own command line has the argument "launch" (the build dir's path may
      // contain the word too, so compare whole arguments).
      if (std::find(cmdline.begin(), cmdline.end(), "launch") != cmdline.end()) continue;
      bool match = false;
      for (const std::string& e : proc_entries(pid, "environ"))
        match = match || e == "RANK=" + std::to_string(rank);
      if (!match) continue;
    }
    pids.push_back(static_cast<pid_t>(std::stoi(pid)));
  }
  return pids;
}

using testing::one_to;

class RestartResumeDistTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = testing::make_resume_job_dir("shardtrain_restart_", {"llama_gqa"});
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // The 4-rank launch of run `name` (metrics in name/metrics.jsonl, final save in name/out);
  // `launch_flags` go to the launcher, `train_flags` to the workers.
  // `binary`: kTestWorker where the test sets a SHARDTRAIN_TEST_* hook.
  static std::string command(const std::string& name, const std::string& launch_flags,
                             const std::string& train_flags,
                             const std::string& binary = kBinary) {
    const std::string run_dir = dir_ + "/" + name;
    fs::create_directories(run_dir);
    return binary + " launch --standalone --nproc-per-node 4 " + launch_flags +
           " -- train --config " + dir_ + "/llama_gqa.toml --metrics " + run_dir +
           "/metrics.jsonl --train.output_dir=" + run_dir + "/out " + train_flags;
  }

  // Runs `launch` in the background with its output in `log`; returns the shell's pid (the
  // launcher itself, through exec).
  static pid_t start(const std::string& launch, const std::string& log) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", ("exec " + launch + " > " + log + " 2>&1").c_str(), nullptr);
      ::_exit(127);
    }
    return pid;
  }

  // Waits (up to 60 s) until run `name` has completed a step >= 7 that is not a multiple of 5
  // (past the first checkpoint, between two), at least `settle` after its first step was
  // logged; returns the last step seen.
  static int64_t wait_for_mid_run_step(const std::string& name,
                                       std::chrono::milliseconds settle = {}) {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    std::optional<Clock::time_point> first_step;
    int64_t seen = 0;
    while (Clock::now() < deadline) {
      const std::vector<int64_t> steps = metric_steps(dir_ + "/" + name + "/metrics.jsonl");
      seen = steps.empty() ? 0 : steps.back();
      if (seen > 0 && !first_step) first_step = Clock::now();
      const bool settled = first_step && Clock::now() - *first_step >= settle;
      if (seen >= 7 && seen % 5 != 0 && settled) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return seen;
  }

  // Exit code of the launcher `pid` (-1 when killed by a signal).
  static int wait_exit(pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  static std::string dir_;
};

std::string RestartResumeDistTest::dir_;

TEST_F(RestartResumeDistTest, KilledWorkerIsRestartedAndResumesBitIdentically) {
  const CommandResult full = run_command(command("full", "", ""));
  ASSERT_EQ(full.exit_code, 0) << full.output;

  // The checkpoint dir is in every worker's command line: it tells this run's workers apart.
  const std::string ckpt = dir_ + "/killed/ckpt";
  const std::string log = dir_ + "/killed.log";
  const std::string launch = command(
      "killed", "--max-restarts 1",
      "--checkpoint-dir " + ckpt + " --checkpoint-every 5 --train.checkpoint_max_lag_steps=2");
  const pid_t launcher = start(launch, log);
  const int64_t seen = wait_for_mid_run_step("killed");
  const std::vector<pid_t> rank1 = processes_with(ckpt, 1);
  ASSERT_EQ(rank1.size(), 1u) << "rank 1 of the run not found at step " << seen;
  ASSERT_LT(seen, 20) << "the run ended before the kill; nothing was tested";
  ::kill(rank1[0], SIGKILL);
  const int exit_code = wait_exit(launcher);
  const std::string output = read_text(log);
  ASSERT_EQ(exit_code, 0) << output;

  // The failure named is the first exit the agent reaps: rank 1's SIGKILL, or a peer's abort
  // on the connection rank 1 dropped.
  EXPECT_NE(output.find("; restarting the worker group (restart 1 of 1)"), std::string::npos)
      << output;
  EXPECT_NE(output.find("attempt 1: node 0 of 1 starting ranks 0..3 of 4"), std::string::npos)
      << output;
  // The restart resumed from the newest checkpoint complete at the kill: step 5 for a kill
  // seen at 7..9 (10 only if rank 1 outran the observation past the step-10 save).
  ASSERT_NO_FATAL_FAILURE(testing::expect_resumed_near_kill(output, ckpt, seen));

  EXPECT_EQ(metric_steps(dir_ + "/killed/metrics.jsonl"), one_to(20))
      << "one record per completed step";
  EXPECT_EQ(read_existing(dir_ + "/full/out/model.safetensors"),
            read_existing(dir_ + "/killed/out/model.safetensors"))
      << "final parameters differ from the uninterrupted run";
  EXPECT_TRUE(processes_with(ckpt).empty());
}

TEST_F(RestartResumeDistTest, WatchdogNamesTheHungRankAndStopsTheGroup) {
  // Rank 2 stops at the start of step 3; the others then wait for it in the step's first
  // collective. Without the watchdog this run would wait out the 300 s Gloo timeout.
  const std::string token = dir_ + "/hang/";
  const auto start = Clock::now();
  const CommandResult r =
      run_command("SHARDTRAIN_TEST_HANG_AT_STEP=3 SHARDTRAIN_TEST_HANG_RANK=2 " +
                  command("hang", "--max-restarts 0 --watchdog-timeout 3", "", kTestWorker));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_LT(seconds, 15.0) << r.output;
  EXPECT_NE(r.output.find("shardtrain: launch failed: rank 2 made no progress for 3 s at step 3, "
                          "waiting in compute at step start; no restarts left (--max-restarts 0)"),
            std::string::npos)
      << r.output;
  // Two steps completed; the others were waiting for rank 2 when they were stopped.
  EXPECT_EQ(metric_steps(token + "/metrics.jsonl"), one_to(2));
  EXPECT_TRUE(processes_with(token).empty()) << "processes left behind";
}

TEST_F(RestartResumeDistTest, WatchdogRestartsCountAgainstMaxRestarts) {
  // The hook hangs every attempt: one restart, then the launch fails.
  const std::string token = dir_ + "/hang_restart/";
  const CommandResult r = run_command(
      "SHARDTRAIN_TEST_HANG_AT_STEP=2 SHARDTRAIN_TEST_HANG_RANK=1 " +
      command("hang_restart", "--max-restarts 1 --watchdog-timeout 2 --stop-grace 1", "",
              kTestWorker));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("rank 1 made no progress for 2 s at step 2, waiting in compute at step "
                          "start; restarting the worker group (restart 1 of 1)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("launch: run '"), std::string::npos);
  EXPECT_NE(r.output.find("attempt 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("no restarts left (--max-restarts 1)"), std::string::npos) << r.output;
  EXPECT_TRUE(processes_with(token).empty()) << "processes left behind";
}

TEST_F(RestartResumeDistTest, WatchdogNamesAStoppedRank) {
  // SIGSTOP freezes rank 1 wherever it is (its heartbeat thread too); the others block in the
  // next collective. A long run, so the stop lands mid-run. The 6 s timeout leaves the
  // watchdog's freeze verdict (a liveness counter still for 3 s) room on a loaded 2-core CI
  // machine: with 3 s, a rank descheduled for seconds just before the stop made its waiting
  // peers cross the timeout before the verdict could form, and a waiting peer was named.
  // The stop comes at least 1.5 s into training, after rank 1's heartbeat publisher (every
  // 250 ms) has published: steps take milliseconds here, and a rank stopped before its first
  // heartbeat is reported as one that never started (WatchdogTest covers that case).
  const std::string token = dir_ + "/stopped/";
  const pid_t launcher =
      start(command("stopped", "--watchdog-timeout 6 --stop-grace 1", "--train.steps=100000"),
            dir_ + "/stopped.log");
  const int64_t seen = wait_for_mid_run_step("stopped", std::chrono::milliseconds(1500));
  const std::vector<pid_t> rank1 = processes_with(token, 1);
  ASSERT_EQ(rank1.size(), 1u) << "rank 1 of the run not found at step " << seen;
  ::kill(rank1[0], SIGSTOP);
  const auto stopped_at = Clock::now();
  const int exit_code = wait_exit(launcher);
  const double seconds = std::chrono::duration<double>(Clock::now() - stopped_at).count();
  const std::string output = read_text(dir_ + "/stopped.log");
  EXPECT_EQ(exit_code, 1) << output;
  EXPECT_LT(seconds, 14.0) << output;
  // At least the 6 s timeout; more when the watchdog waited for its freeze verdict on rank 1
  // (up to 3 poll periods), which it must give: "its process is not running".
  std::smatch match;
  ASSERT_TRUE(std::regex_search(
      output, match,
      std::regex("shardtrain: launch failed: rank 1 made no progress for ([0-9]+) s at step ")))
      << output;
  EXPECT_GE(std::stoi(match[1].str()), 6) << output;
  EXPECT_NE(output.find(", waiting in "), std::string::npos) << output;
  EXPECT_NE(output.find("; its process is not running"), std::string::npos) << output;
  EXPECT_TRUE(processes_with(token).empty()) << "processes left behind";
}

TEST_F(RestartResumeDistTest, ARankStoppedBeforeItConnectsIsNamedAfterOneCommTimeout) {
  // Rank 1 stops itself (SIGSTOP) before any work, as a rank frozen while it starts (or stuck
  // loading on a hung file system) would: the others name it after one connect timeout, and the
  // launcher ends the run and the stopped process.
  const std::string token = dir_ + "/stopped_early/";
  const auto started = Clock::now();
  const CommandResult r = run_command(
      "SHARDTRAIN_COMM_TIMEOUT_S=3 SHARDTRAIN_TEST_STOP_AT_START_RANK=1 " +
      command("stopped_early", "--stop-grace 1", "--train.steps=20", kTestWorker));
  const double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(" of 4: rank 1 did not join the process group within 3 s"),
            std::string::npos)
      << r.output;
  EXPECT_LT(seconds, 60.0) << r.output;
  EXPECT_TRUE(metric_steps(token + "metrics.jsonl").empty()) << "no step runs without rank 1";
  EXPECT_TRUE(processes_with(token).empty()) << "processes left behind";
}

}  // namespace
}  // namespace shardtrain
