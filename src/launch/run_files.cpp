#include "launch/run_files.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace shardtrain::launch {
namespace {

namespace fs = std::filesystem;

bool any_logs(const LaunchConfig& config) {
  for (const auto* choices : {&config.tee, &config.redirects}) {
    for (const StreamChoice& c : *choices) {
      if (c.out || c.err) return true;
    }
  }
  return false;
}

}  // namespace

RunFiles::RunFiles(const LaunchConfig& config, const std::string& run_id) {
  std::string parent = config.log_dir;
  if (parent.empty()) {
    const char* tmp = std::getenv("TMPDIR");
    parent = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  }
  std::error_code ec;
  fs::create_directories(parent, ec);
  std::string pattern =
      parent + "/" + (config.log_dir.empty() ? "shardtrain-" : "") + run_id + "_XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (::mkdtemp(buffer.data()) == nullptr) {
    fail("cannot create the worker log directory under {}: {}; HINT: check --log-dir", parent,
         std::strerror(errno));
  }
  root_ = buffer.data();
  const bool logs = any_logs(config);
  remove_at_exit_ = config.log_dir.empty() && !logs;
  if (logs) log::info("launch: worker logs in {}", root_);
}

RunFiles::~RunFiles() {
  if (!remove_at_exit_) return;
  std::error_code ec;
  fs::remove_all(root_, ec);  // made by mkdtemp above: only this launch's files are in it
}

std::string RunFiles::attempt_dir(int64_t attempt, int nproc) {
  const std::string dir = root_ + "/attempt_" + std::to_string(attempt);
  for (int local = 0; local < nproc; ++local) {
    std::error_code ec;
    fs::create_directories(dir + "/" + std::to_string(local), ec);
    if (ec) fail("cannot create {}/{}: {}; HINT: check --log-dir", dir, local, ec.message());
  }
  return dir;
}

}  // namespace shardtrain::launch
