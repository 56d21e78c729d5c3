// Test support: the fake Hugging Face Hub (tests/hub/fake_hub.py) as a child process on
// loopback, with its request log, its fault switches, and the repo dirs tests serve from it.
// Header-only; tests only. The server is killed when the object goes away.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/http/http_client.h"

namespace shardtrain::testing {

inline const std::string kFakeHubToken = "hf_test_token";

class FakeHub {
 public:
  // `repos`: "Org/Name=DIR" or "Org/Name=DIR:gated". `work_dir` holds the port file and the log.
  FakeHub(const std::vector<std::string>& repos, const std::string& work_dir)
      : port_file_(work_dir + "/fake_hub.ports"), log_file_(work_dir + "/fake_hub.log") {
    std::filesystem::remove(port_file_);
    const std::string script = std::string(SHARDTRAIN_SOURCE_DIR) + "/tests/hub/fake_hub.py";
    // The system interpreter: a version manager's shim can take seconds to start on a busy box.
    const std::string python =
        ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
    std::vector<std::string> args = {python,  script,    "--port-file", port_file_,
                                     "--log", log_file_, "--token",     kFakeHubToken};
    args.insert(args.end(), repos.begin(), repos.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      ::_exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      std::ifstream in(port_file_);
      if (in >> hub_port_ >> cdn_port_) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "the fake Hub (tests/hub/fake_hub.py) did not start";
  }
  ~FakeHub() { stop(); }
  FakeHub(const FakeHub&) = delete;
  FakeHub& operator=(const FakeHub&) = delete;

  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  bool running() const { return pid_ > 0; }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(hub_port_); }

  // {"drop_once": [...], "corrupt": [...], "oversize": [...]} (file names).
  void set_faults(const nlohmann::json& faults) const {
    HttpRequest request;
    request.method = "POST";
    request.url = endpoint() + "/_control";
    request.body = faults.dump();
    request.use_proxy_env = false;
    std::string error;
    const auto response = http_request(request, error);
    ASSERT_TRUE(response && response->status == 200) << error;
  }

  std::vector<std::string> log_lines() const {
    std::vector<std::string> lines;
    std::ifstream in(log_file_);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
  // How many logged requests contain every one of `needles`.
  int count(const std::vector<std::string>& needles) const {
    int n = 0;
    for (const std::string& line : log_lines()) {
      bool all = true;
      for (const std::string& needle : needles) all = all && line.find(needle) != std::string::npos;
      n += all;
    }
    return n;
  }
  void clear_log() const { std::ofstream truncate(log_file_, std::ios::trunc); }

 private:
  std::string port_file_, log_file_;
  pid_t pid_ = -1;
  int hub_port_ = 0, cdn_port_ = 0;
};

// Repo dirs for the fake Hub under `root`: tiny (the llama_gqa golden model: config.json +
// model.safetensors), sharded (config.json, an index and two shards of arbitrary bytes), demo
// (examples/demo-model: config.json + tokenizer files, no weights), bert (an unsupported
// model_type with weights).
inline void make_fake_hub_repos(const std::string& root) {
  namespace fs = std::filesystem;
  const std::string source = SHARDTRAIN_SOURCE_DIR;
  const fs::path golden = source + "/tests/golden/llama_gqa";
  fs::create_directories(root + "/tiny");
  fs::copy_file(golden / "config.json", root + "/tiny/config.json");
  fs::copy_file(golden / "model.safetensors", root + "/tiny/model.safetensors");

  fs::create_directories(root + "/sharded");
  fs::copy_file(golden / "config.json", root + "/sharded/config.json");
  for (int shard = 1; shard <= 2; ++shard) {
    std::ofstream out(root + "/sharded/model-0000" + std::to_string(shard) +
                      "-of-00002.safetensors");
    for (int i = 0; i < 50000; ++i) out << static_cast<char>((i * 31 + shard * 7) % 251);
  }
  std::ofstream(root + "/sharded/model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors", "c": "model-00001-of-00002.safetensors"}})";

  fs::copy(source + "/examples/demo-model", root + "/demo");

  fs::create_directories(root + "/bert");
  std::ofstream(root + "/bert/config.json")
      << R"({"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2})";
  fs::copy_file(golden / "model.safetensors", root + "/bert/model.safetensors");
}

inline std::vector<std::string> fake_hub_repo_specs(const std::string& root) {
  return {"Org/Tiny=" + root + "/tiny", "Org/Sharded=" + root + "/sharded",
          "Org/Demo=" + root + "/demo", "Org/Bert=" + root + "/bert",
          "Org/Gated=" + root + "/tiny:gated"};
}

}  // namespace shardtrain::testing
