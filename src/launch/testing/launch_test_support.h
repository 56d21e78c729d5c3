// Helpers for the multi-launcher tests (header-only; tests only): launchers running in the
// background as "nodes" on loopback, each in a process group of its own so a test can SIGKILL
// one node's launcher the way a lost machine would vanish, and the tiny training job those
// tests run.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/testing/test_support.h"

namespace shardtrain::testing {

// The store secret every multi-node launch in these tests shares (a shell assignment: put it
// before the command; several nodes on the TCP store need one given).
inline const std::string kTestStoreToken = "PET_RDZV_TOKEN=launch-test-secret-0123456789";

// `shell_command` run by /bin/sh in the background, in a new process group, with stdout and
// stderr in `log`. The destructor SIGKILLs the group if the test left it running.
class BackgroundLauncher {
 public:
  BackgroundLauncher(const std::string& shell_command, std::string log) : log_(std::move(log)) {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::execl("/bin/sh", "sh", "-c", ("exec " + shell_command + " > " + log_ + " 2>&1").c_str(),
              nullptr);
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);
  }
  ~BackgroundLauncher() {
    if (!exited_) kill_group();
  }
  BackgroundLauncher(const BackgroundLauncher&) = delete;
  BackgroundLauncher& operator=(const BackgroundLauncher&) = delete;

  // SIGKILLs the launcher's process group (the launcher; its workers have groups of their
  // own and die with it through PR_SET_PDEATHSIG) and reaps it.
  void kill_group() {
    ::kill(-pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    exited_ = true;
  }

  // The exit code once the launcher ends (-1 if killed by a signal), or -2 after `limit`, when
  // it is killed instead.
  int wait(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (true) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        kill_group();
        return -2;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

  std::string output() const { return read_text(log_); }
  // The launcher's pid (the shell exec'd it).
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string log_;
};

// Waits (up to `limit`) until `path` exists.
inline bool wait_for_file(const std::string& path, std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// One complete record of a training metrics JSONL (a line still being written is skipped).
struct MetricRecord {
  int64_t step = 0;
  double loss = 0;
};

inline std::vector<MetricRecord> metric_records(const std::string& path) {
  std::vector<MetricRecord> records;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, false);
    if (record.is_discarded() || !record.contains("step")) continue;
    records.push_back({record["step"].get<int64_t>(), record.value("loss", std::nan(""))});
  }
  return records;
}

inline std::vector<int64_t> metric_steps(const std::string& path) {
  std::vector<int64_t> steps;
  for (const MetricRecord& r : metric_records(path)) steps.push_back(r.step);
  return steps;
}

// Waits (up to 90 s) until the 20-step run logging to `metrics` has completed a step >= 7 that
// is not a multiple of 5: past the first checkpoint (every 5 steps), between two. Returns the
// step (20 if the run ended first).
inline int64_t wait_for_mid_run_step(const std::string& metrics) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  int64_t seen = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::vector<int64_t> steps = metric_steps(metrics);
    seen = steps.empty() ? 0 : steps.back();
    if ((seen >= 7 && seen % 5 != 0) || seen >= 20) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return seen;
}

// The tiny training job of the multi-node tests: tests/golden/llama_gqa in fp32 on the CPU,
// 20 steps of global batch 4 over 40 random sequences; writes DIR/job.toml and DIR/data.jsonl
// and returns the config's path.
inline std::string write_tiny_training_job(const std::string& dir) {
  write_random_sequences(dir + "/data.jsonl", 40, 11, 96);
  const std::string path = dir + "/job.toml";
  std::ofstream toml(path);
  toml << "[model]\npath = \"" << SHARDTRAIN_SOURCE_DIR << "/tests/golden/llama_gqa\"\n"
       << "dtype = \"fp32\"\n"
       << "[data]\npath = \"" << dir << "/data.jsonl\"\nseq_len = 16\n"
       << "[train]\nsteps = 20\nmicro_batch = 1\nglobal_batch = 4\nseed = 7\n"
       << "device = \"cpu\"\nlog_every = 100\n"
       << "[optim]\nlr = 3e-3\nwarmup_steps = 2\nweight_decay = 0.01\n";
  return path;
}

}  // namespace shardtrain::testing
