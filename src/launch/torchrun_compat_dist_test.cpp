// `shardtrain launch` as a drop-in for torchrun (docs/launcher.md): real PyTorch DDP workers
// over Gloo (tests/pytorch/ddp_job.py, Debian's python3-torch), torchrun's command line and
// flags, the worker environment PyTorch expects, error files, exit code 2, SIGINT, the
// process-level watchdog, rank-0-only console output of shardtrain workers, and the save-aware
// stop grace (a worker saving a checkpoint gets its time). Tests needing PyTorch skip with a
// message where it is not installed.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/tcp_store.h"
#include "launch/testing/launch_test_support.h"

namespace {

namespace fs = std::filesystem;
using shardtrain::testing::BackgroundLauncher;
using shardtrain::testing::read_text;
using shardtrain::testing::wait_for_file;

using shardtrain::testing::kBinary;
const std::string kJob = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/pytorch/ddp_job.py";

struct Result {
  int exit_code = -1;
  std::string output;
  bool has(const std::string& text) const { return output.find(text) != std::string::npos; }
};

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs `shardtrain args` (killed after `limit` s).
Result run(const std::string& args, int limit = 50) {
  Result result;
  const std::string command =
      "timeout -s KILL " + std::to_string(limit) + " " + kBinary + " " + args + " 2>&1 </dev/null";
  std::FILE* pipe = popen(command.c_str(), "r");
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) {
    result.output.append(buffer.data(), n);
  }
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

int free_port() {
  shardtrain::TcpStoreServer probe("127.0.0.1", 0, "port-probe-secret-0123");
  return probe.port();
}

// A Python interpreter with torch.distributed's Gloo, or "" (Debian's is /usr/bin/python3).
const std::string& torch_python() {
  static const std::string found = [] {
    for (const char* candidate : {"/usr/bin/python3", "python3"}) {
      const std::string probe = std::string(candidate) +
                                " -c 'import torch.distributed as d; assert d.is_gloo_available()'"
                                " >/dev/null 2>&1";
      if (std::system(probe.c_str()) == 0) return std::string(candidate);
    }
    return std::string();
  }();
  return found;
}

#define REQUIRE_TORCH()       \
  if (torch_python().empty()) \
  GTEST_SKIP() << "no Python with PyTorch (Debian python3-torch): PyTorch workers not tested"

class TorchrunCompatTest : public shardtrain::testing::TempDirTest {
 protected:
  std::string python() const { return "--python " + torch_python() + " "; }
  // The pid rank 0 wrote to `marker` (the job's --marker) once it runs, or -1 after 40 s; the
  // file is removed so that a restarted rank 0 writes it anew.
  static pid_t rank0_pid(const std::string& marker, const BackgroundLauncher& agent) {
    if (!wait_for_file(marker, std::chrono::seconds(40))) {
      ADD_FAILURE() << "rank 0 never wrote " << marker << ":\n" << agent.output();
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const pid_t pid = std::stoi(read_text(marker));
    fs::remove(marker);
    return pid;
  }
};

TEST_F(TorchrunCompatTest, DdpScriptRunsStandaloneWithTwoWorkers) {
  REQUIRE_TORCH();
  const Result r = run("launch --standalone --nproc-per-node 2 " + python() + kJob + " --steps 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.has("[rank 0] ddp ok rank=0 world=2 restart=0")) << r.output;
  EXPECT_TRUE(r.has("[rank 1] ddp ok rank=1 world=2 restart=0")) << r.output;
}

TEST_F(TorchrunCompatTest, DdpScriptRunsOnTwoNodesWithTheTcpStore) {
  REQUIRE_TORCH();
  const int port = free_port();
  const auto agent = [&](int node) {
    return run("launch --nnodes 2 --node-rank " + std::to_string(node) +
               " --nproc-per-node 2 --rdzv-id ddp2 --rdzv-conf token=ddp-test-secret-0123456789"
               " --rdzv-endpoint 127.0.0.1:" +
               std::to_string(port) + " " + python() + kJob);
  };
  auto node1 = std::async(std::launch::async, agent, 1);
  auto node0 = std::async(std::launch::async, agent, 0);
  const Result r0 = node0.get(), r1 = node1.get();
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_TRUE(r0.has("[rank 1] ddp ok rank=1 world=4")) << r0.output;
  EXPECT_TRUE(r1.has("[rank 3] ddp ok rank=3 world=4")) << r1.output;
}

TEST_F(TorchrunCompatTest, KilledWorkerRestartsTheGroupWhichFinishes) {
  REQUIRE_TORCH();
  const std::string marker = (dir_ / "rank0.pid").string();
  BackgroundLauncher agent(kBinary + " launch --standalone --nproc-per-node 2 --max-restarts 1 " +
                               python() + kJob + " --steps 40 --sleep-after-step 0.1 --marker " +
                               marker,
                           (dir_ / "agent.log").string());
  const pid_t rank0 = rank0_pid(marker, agent);
  ASSERT_GT(rank0, 0);
  ASSERT_EQ(::kill(rank0, SIGKILL), 0);
  EXPECT_EQ(agent.wait(std::chrono::seconds(60)), 0) << agent.output();
  const std::string out = agent.output();
  EXPECT_NE(out.find("rank 0 was killed by signal 9 (SIGKILL); restarting"), std::string::npos)
      << out;
  EXPECT_NE(out.find("[rank 0] ddp ok rank=0 world=2 restart=1"), std::string::npos) << out;
}

TEST_F(TorchrunCompatTest, StoppedWorkerIsFoundByTheProcessWatchdog) {
  REQUIRE_TORCH();
  const std::string marker = (dir_ / "rank0.pid").string();
  BackgroundLauncher agent(kBinary +
                               " launch --standalone --nproc-per-node 2 --max-restarts 1 "
                               "--watchdog-timeout 1 --monitor-interval 0.1 " +
                               python() + kJob + " --steps 40 --sleep-after-step 0.1 --marker " +
                               marker,
                           (dir_ / "agent.log").string());
  const pid_t rank0 = rank0_pid(marker, agent);
  ASSERT_GT(rank0, 0);
  ASSERT_EQ(::kill(rank0, SIGSTOP), 0);
  EXPECT_EQ(agent.wait(std::chrono::seconds(60)), 0) << agent.output();
  const std::string out = agent.output();
  EXPECT_NE(out.find("rank 0 (pid " + std::to_string(rank0) + ") made no progress for"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("its process is stopped (state T)"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 0] ddp ok rank=0 world=2 restart=1"), std::string::npos) << out;
}

TEST_F(TorchrunCompatTest, PythonExceptionIsReportedFromTheErrorFile) {
  REQUIRE_TORCH();
  const Result r =
      run("launch --standalone --nproc-per-node 2 " + python() + kJob + " --raise-on-rank 1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(r.has("launch failed: rank 1 exited with code 1: ValueError: boom on rank 1"))
      << r.output;
}

TEST_F(TorchrunCompatTest, ExitCode2IsNotRestarted) {
  REQUIRE_TORCH();
  const Result r = run("launch --standalone --nproc-per-node 2 --max-restarts 3 " + python() +
                       kJob + " --fail-rank 1 --fail-code 2");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(r.has("rank 1 exited with code 2 (exit code 2: a user error")) << r.output;
  EXPECT_FALSE(r.has("restarting")) << r.output;
}

TEST_F(TorchrunCompatTest, SigintStopsPythonWorkersAndExits130) {
  REQUIRE_TORCH();
  const std::string marker = (dir_ / "rank0.pid").string();
  BackgroundLauncher agent(kBinary + " launch --standalone --nproc-per-node 2 --max-restarts 2 " +
                               python() + kJob + " --steps 100 --sleep-after-step 0.2 --marker " +
                               marker,
                           (dir_ / "agent.log").string());
  ASSERT_TRUE(wait_for_file(marker, std::chrono::seconds(40))) << agent.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(::kill(agent.pid(), SIGINT), 0);
  EXPECT_EQ(agent.wait(std::chrono::seconds(30)), 130) << agent.output();
  EXPECT_NE(agent.output().find("KeyboardInterrupt"), std::string::npos)
      << "Python workers got SIGINT itself:\n"
      << agent.output();
  EXPECT_EQ(agent.output().find("restarting"), std::string::npos) << agent.output();
}

TEST_F(TorchrunCompatTest, WorkerArgvIsExactlyAsTyped) {
  const Result plain = run("launch --standalone /bin/echo train --config job.toml --steps 5");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_TRUE(plain.has("[rank 0] train --config job.toml --steps 5\n")) << plain.output;
  // A "--" inside the worker command is the worker's.
  const Result inner = run("launch --standalone -- /bin/echo a -- --b");
  EXPECT_TRUE(inner.has("[rank 0] a -- --b\n")) << inner.output;
  // A name on PATH runs as an executable; --no-python says so explicitly.
  const Result on_path = run("launch --standalone -- sh -c 'echo via path'");
  EXPECT_TRUE(on_path.has("[rank 0] via path\n")) << on_path.output;
  const Result no_python = run("launch --standalone --no-python sh -c 'echo no python'");
  EXPECT_TRUE(no_python.has("[rank 0] no python\n")) << no_python.output;
  // -m MODULE runs python -m MODULE.
  const Result module = run("launch --standalone --python /usr/bin/python3 -m platform --terse");
  EXPECT_EQ(module.exit_code, 0) << module.output;
  EXPECT_TRUE(module.has("[rank 0] Linux")) << module.output;
}

TEST_F(TorchrunCompatTest, BadCommandsAndFlagsAreNamed) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"launch --standalone --bogus x.py", "unknown launch flag '--bogus'"},
      {"launch --standalone missing_script.py", "script 'missing_script.py' not found"},
      {"launch --standalone no_such_command_xyz", "worker command 'no_such_command_xyz'"},
      {"launch --standalone --python /nonexistent/py " + kJob, "--python '/nonexistent/py'"},
      {"launch --standalone --tee 4 -- /bin/true", "--tee '4'"},
      {"launch --standalone --nproc-per-node 2 --redirects 0:1,5:2 -- /bin/true",
       "--redirects '0:1,5:2': '5:2' is not LOCAL_RANK:N"},
      {"launch --standalone --local-ranks-filter 3 -- /bin/true", "--local-ranks-filter '3'"},
      {"launch --standalone --start-method thread -- /bin/true", "--start-method 'thread'"},
      {"launch --standalone --monitor-interval soon -- /bin/true", "--monitor-interval 'soon'"},
      {"launch --standalone --role 'a b' -- /bin/true", "--role 'a b'"},
  };
  for (const auto& [args, expected] : cases) {
    const Result r = run(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_TRUE(r.has(expected)) << args << "\n" << r.output;
  }
}

TEST_F(TorchrunCompatTest, TeeRedirectsLogDirFilterAndRole) {
  const std::string log_dir = (dir_ / "logs").string();
  const std::string script = "echo out $LOCAL_RANK $ROLE_NAME; echo err $LOCAL_RANK >&2";
  const Result tee = run("launch --standalone --nproc-per-node 2 --tee 3 --log-dir " + log_dir +
                         " --role trainer --start-method fork --monitor-interval 0.05 -- /bin/sh "
                         "-c " +
                         quote(script));
  ASSERT_EQ(tee.exit_code, 0) << tee.output;
  EXPECT_TRUE(tee.has("[rank 1] out 1 trainer\n")) << tee.output;
  std::vector<fs::path> runs;
  for (const auto& e : fs::directory_iterator(log_dir)) runs.push_back(e.path());
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(read_text((runs[0] / "attempt_0/1/stdout.log").string()), "out 1 trainer\n");
  EXPECT_EQ(read_text((runs[0] / "attempt_0/1/stderr.log").string()), "err 1\n");

  const std::string redirected_dir = (dir_ / "redirected").string();
  const Result redirected = run("launch --standalone --nproc-per-node 2 --redirects 1 --log-dir " +
                                redirected_dir + " -- /bin/sh -c " + quote(script));
  ASSERT_EQ(redirected.exit_code, 0) << redirected.output;
  EXPECT_FALSE(redirected.has("out 0")) << "stdout went to the files only\n" << redirected.output;
  EXPECT_TRUE(redirected.has("[rank 0] err 0")) << redirected.output;

  const Result filtered =
      run("launch --standalone --nproc-per-node 2 --local-ranks-filter 1 -- "
          "/bin/sh -c " +
          quote(script));
  ASSERT_EQ(filtered.exit_code, 0) << filtered.output;
  EXPECT_TRUE(filtered.has("[rank 1] out 1 default")) << filtered.output;
  EXPECT_FALSE(filtered.has("[rank 0]")) << filtered.output;
}

TEST_F(TorchrunCompatTest, ShardtrainWorkersLogFromLocalRankZeroOnly) {
  const Result r = run("launch --standalone --nproc-per-node 2 -- train --print-config");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(r.has("[rank 0] [train]")) << r.output;
  EXPECT_FALSE(r.has("[rank 1]")) << r.output;
  const Result all = run(
      "launch --standalone --nproc-per-node 2 --local-ranks-filter 0,1 -- train --print-config");
  EXPECT_TRUE(all.has("[rank 1] [train]")) << all.output;
}

TEST_F(TorchrunCompatTest, SigtermWaitsForACheckpointBeingSaved) {
  // Each checkpoint file takes 1.5 s to write: the default 5 s grace (here 0.5 s) would kill
  // the SIGTERM checkpoint half-written; the worker reports "saving" and the agent waits.
  const std::string config = shardtrain::testing::write_tiny_training_job(dir_.string());
  const std::string ckpt = (dir_ / "ckpt").string();
  const std::string metrics = (dir_ / "metrics.jsonl").string();
  BackgroundLauncher agent("env SHARDTRAIN_TEST_CHECKPOINT_WRITE_DELAY_MS=1500 " +
                               shardtrain::testing::kTestWorker +
                               " launch --standalone --nproc-per-node 2 --stop-grace 0.5 -- train "
                               "--config " +
                               config + " --checkpoint-dir " + ckpt +
                               " --checkpoint-every 1000 --metrics " + metrics,
                           (dir_ / "agent.log").string());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (shardtrain::testing::metric_steps(metrics).size() < 2 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(shardtrain::testing::metric_steps(metrics).size(), 2u) << agent.output();
  ASSERT_EQ(::kill(agent.pid(), SIGTERM), 0);
  EXPECT_EQ(agent.wait(std::chrono::seconds(60)), 128 + SIGTERM) << agent.output();
  const std::string out = agent.output();
  EXPECT_NE(out.find("is saving a checkpoint: step "), std::string::npos) << out;
  EXPECT_NE(out.find("waiting up to 30 s for it before SIGKILL"), std::string::npos) << out;
  bool complete = false;
  for (const auto& e : fs::directory_iterator(ckpt)) {
    complete = complete || fs::exists(e.path() / "manifest.json");
  }
  EXPECT_TRUE(complete) << "the SIGTERM checkpoint has its manifest\n" << out;
}

}  // namespace
