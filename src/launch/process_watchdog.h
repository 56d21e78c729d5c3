// ProcessWatchdog: the hang check for workers that publish no heartbeat (PyTorch scripts and
// other executables; shardtrain's own workers are judged by launch/watchdog.h). It is a
// process-level liveness check: a worker whose process stays stopped (state T or t: SIGSTOP,
// a debugger) or in uninterruptible sleep (D: a dead NFS mount, a wedged driver) for `timeout`
// is hung. A process blocked in a collective sleeps interruptibly and is not judged: without a
// heartbeat it cannot be told from one that waits on purpose; NCCL/Gloo timeouts cover it.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace shardtrain::launch {

// The state letter of /proc/<pid>/stat ('R', 'S', 'D', 'T', 't', 'Z', ...), or '?' if gone.
char process_state(pid_t pid);

class ProcessWatchdog {
 public:
  explicit ProcessWatchdog(std::chrono::milliseconds timeout) : timeout_(timeout) {}

  struct Worker {
    int rank;
    pid_t pid;
  };
  // Call every monitor interval. The report line once a worker has been stuck for `timeout`:
  // "rank R (pid P) made no progress for S s: its process is stopped (state T)".
  std::optional<std::string> check(const std::vector<Worker>& workers);

 private:
  std::chrono::milliseconds timeout_;
  std::map<pid_t, std::chrono::steady_clock::time_point> stuck_since_;
};

}  // namespace shardtrain::launch
