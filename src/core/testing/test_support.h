// Helpers shared by the *_test.cpp files (header-only; tests only): capturing a thrown Error's
// message, and running a command (usually the shardtrain binary) with its output and exit code.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdint>
#include <fstream>
#include <random>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

#include <nlohmann/json.hpp>

namespace shardtrain::testing {

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

// Runs `command` through /bin/sh with stderr folded into stdout.
inline CommandResult run_command(const std::string& command) {
  CommandResult result;
  std::FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
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

// {1, 2, ..., n}: the step numbers a complete run's metrics hold.
inline std::vector<int64_t> one_to(int64_t n) {
  std::vector<int64_t> steps;
  for (int64_t s = 1; s <= n; ++s) steps.push_back(s);
  return steps;
}

}  // namespace shardtrain::testing
