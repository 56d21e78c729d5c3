// Helpers shared by the *_test.cpp files (header-only; tests only): the shardtrain binary and
// the golden model dirs, capturing a thrown Error's message, reading a file, running a command
// (usually the shardtrain binary) with its output and exit code, a temporary directory (and a
// fixture with one per test), ranks as threads, and the training data and resume checks of the
// multi-process tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace shardtrain::testing {

#ifdef SHARDTRAIN_BINARY
// The shardtrain binary of this build, which the CLI and multi-process tests run, and the
// committed golden model dirs (tests/golden/NAME, made by tools/make_golden.py).
inline const std::string kBinary = SHARDTRAIN_BINARY;
inline const std::string kGolden = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/golden/";
#endif
#ifdef SHARDTRAIN_TEST_WORKER
// The same program with the test hooks its SHARDTRAIN_TEST_* variables ask for
// (cli/testing/test_worker_hooks.h), for the tests that need a worker to hang or write slowly.
inline const std::string kTestWorker = SHARDTRAIN_TEST_WORKER;
#endif

// The message of the shardtrain::Error `action` throws, or "" if it throws none.
inline std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

struct CommandResult {
  int exit_code = -1;  // -1 when killed by a signal
  std::string output;  // stdout and stderr together

  std::vector<std::string> lines() const {
    std::vector<std::string> out;
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
  }
  // The lines that report an error.
  std::vector<std::string> error_lines() const {
    std::vector<std::string> out;
    for (const std::string& line : lines())
      if (line.find("error") != std::string::npos) out.push_back(line);
    return out;
  }
};

// The bytes of the file at `path`; "" when it cannot be read (not written yet).
inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The bytes of a file the test expects to exist, for comparing two outputs: a missing or
// unreadable file is a test failure and reads as "<missing PATH>", so two files that were never
// written cannot compare equal (read_text would give "" for both).
inline std::string read_existing(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    ADD_FAILURE() << "expected a file at " << path;
    return "<missing " + path + ">";
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Runs `command` through /bin/sh with stderr folded into stdout.
inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  std::FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

// Writes `lines` JSONL sequences {"input_ids": [...]} of 6..16 random ids below `vocab`, from a
// fixed seed (the multi-process tests' training data).
inline void write_random_sequences(const std::string& path, int lines, unsigned seed, int vocab) {
  std::mt19937 rng(seed);
  std::ofstream data(path);
  for (int line = 0; line < lines; ++line) {
    const int length = 6 + static_cast<int>(rng() % 11);
    nlohmann::json ids = nlohmann::json::array();
    for (int i = 0; i < length; ++i) ids.push_back(static_cast<int>(rng() % vocab));
    data << nlohmann::json{{"input_ids", ids}}.dump() << "\n";
  }
}

#ifdef SHARDTRAIN_BINARY
// A fresh directory under /tmp (named `prefix` + a random suffix; the caller removes it) with
// the job of the multi-process checkpoint and restart tests: data.jsonl (40 random sequences,
// seed 11, vocab 96) and MODEL.toml for each golden model in `models`: 20 steps of 4 sequences
// of 16 tokens, fp32 on the CPU.
inline std::string make_resume_job_dir(const std::string& prefix,
                                       const std::vector<std::string>& models) {
  std::string dir = "/tmp/" + prefix + "XXXXXX";
  if (::mkdtemp(dir.data()) == nullptr) throw std::runtime_error("mkdtemp " + dir);
  write_random_sequences(dir + "/data.jsonl", 40, 11, 96);
  for (const std::string& model : models) {
    std::ofstream toml(dir + "/" + model + ".toml");
    toml << "[model]\npath = \"" << kGolden << model << "\"\ndtype = \"fp32\"\n"
         << "[data]\npath = \"" << dir << "/data.jsonl\"\nseq_len = 16\n"
         << "[train]\nsteps = 20\nmicro_batch = 1\nglobal_batch = 4\nseed = 7\n"
         << "device = \"cpu\"\nlog_every = 100\n"
         << "[optim]\nlr = 3e-3\nwarmup_steps = 2\nweight_decay = 0.01\n";
  }
  return dir;
}
#endif

// Sets an environment variable (a switch or test hook) while it lives, then unsets it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
};

// A fresh directory under /tmp named `prefix` + a random suffix, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    std::string pattern = "/tmp/" + prefix + "XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern);
    path_ = pattern;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A fixture whose every test gets a fresh TempDir, `dir_`, named after the test suite and
// removed with everything in it after the test. A fixture that overrides SetUp calls
// TempDirTest::SetUp() first.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string suite = ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name();
    for (char& c : suite)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    temp_.emplace("shardtrain_" + suite + "_");
    dir_ = temp_->path();
  }
  void TearDown() override { temp_.reset(); }

  // `name` inside dir_.
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Writes `text` (bytes as they are) to dir_/name, replacing it; returns its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path(name), std::ios::binary | std::ios::trunc) << text;
    return path(name);
  }

  std::filesystem::path dir_;

 private:
  std::optional<TempDir> temp_;
};

// Runs body(rank) for rank = 0..world-1 on one thread each (in-process "ranks"), joins them all,
// then rethrows the first failure.
inline void run_threads(int world, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

// The step of the checkpoint under `checkpoint_dir` that a run's output says it resumed from
// ("resumed from checkpoint DIR/step_00000005"), or nullopt.
inline std::optional<int64_t> resumed_step(const std::string& output,
                                           const std::string& checkpoint_dir) {
  std::smatch match;
  if (!std::regex_search(
          output, match,
          std::regex("resumed from checkpoint " + checkpoint_dir + "/step_0*([0-9]+)")))
    return std::nullopt;
  return std::stoll(match[1].str());
}

// Expects `output` to say the run resumed from the checkpoint (saved every `every` steps under
// `checkpoint_dir`) that was the newest complete one when a rank was killed at step
// `killed_at`: the save at or before that step, or the next one when the killed rank outran the
// observation past a save. Wrap calls in ASSERT_NO_FATAL_FAILURE to stop a test at a failure.
inline void expect_resumed_near_kill(const std::string& output, const std::string& checkpoint_dir,
                                     int64_t killed_at, int64_t every = 5) {
  const std::optional<int64_t> resumed = resumed_step(output, checkpoint_dir);
  ASSERT_TRUE(resumed) << output;
  EXPECT_EQ(*resumed % every, 0);
  EXPECT_GE(*resumed, killed_at / every * every) << "killed at step " << killed_at;
  EXPECT_LE(*resumed, killed_at / every * every + every) << "killed at step " << killed_at;
}

// {1, 2, ..., n}: the step numbers a complete run's metrics hold.
inline std::vector<int64_t> one_to(int64_t n) {
  std::vector<int64_t> steps;
  for (int64_t s = 1; s <= n; ++s) steps.push_back(s);
  return steps;
}

}  // namespace shardtrain::testing
