// RunFiles: the directory tree of one launch's per-worker files, as torchrun lays it out:
//   <log dir>/<run id>_<random>/attempt_<n>/<local rank>/{error.json, stdout.log, stderr.log}
// error.json is the worker's TORCHELASTIC_ERROR_FILE; the logs exist with --tee/--redirects.
// Without --log-dir the tree lives under $TMPDIR (or /tmp) and, unless it holds logs, is
// removed when the agent ends (it held only error files, already reported).
#pragma once

#include <cstdint>
#include <string>

#include "launch/launch_config.h"

namespace shardtrain::launch {

class RunFiles {
 public:
  // Creates <log dir>/<run id>_<random>/. Throws Error naming the directory if it cannot.
  RunFiles(const LaunchConfig& config, const std::string& run_id);
  ~RunFiles();
  RunFiles(const RunFiles&) = delete;
  RunFiles& operator=(const RunFiles&) = delete;

  // Creates and returns attempt_<n>/ with one folder per local rank. Throws Error if it cannot.
  std::string attempt_dir(int64_t attempt, int nproc);
  const std::string& root() const { return root_; }

 private:
  std::string root_;
  bool remove_at_exit_ = false;
};

}  // namespace shardtrain::launch
