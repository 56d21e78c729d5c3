// WorkerGroup: the worker processes of one node for one attempt (one restart generation).
//
// Each worker is fork/exec'd in its own process group with its stdout and stderr on pipes;
// the agent's thread that calls wait()/stop() copies their output to its own stdout/stderr,
// one whole line at a time, each prefixed "[rank N] ", so lines never interleave mid-line.
// Workers get PR_SET_PDEATHSIG=SIGKILL, so they die with the agent even if it is SIGKILLed.
//
// Not thread-safe: one thread owns the group. The destructor stops (SIGKILL) and reaps any
// worker still running, so no path leaves a zombie or an orphan behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace shardtrain::launch {

struct WorkerSpec {
  int global_rank = 0;
  std::map<std::string, std::string> env;  // set on top of the agent's environment
};

// How one worker ended, in words: "rank 2 exited with code 3" or
// "rank 2 was killed by signal 9 (SIGKILL)".
std::string describe_exit(int global_rank, int wait_status);

class WorkerGroup {
 public:
  enum class Outcome {
    kSucceeded,    // every worker exited 0
    kFailed,       // a worker exited non-zero or by a signal; see failure()
    kInterrupted,  // should_stop returned true; workers are still running
  };

  // Starts one process per spec running `command` (argv[0] resolved as a path by execv).
  // Throws Error if a pipe or fork fails (workers already started are stopped).
  WorkerGroup(const std::vector<std::string>& command, const std::vector<WorkerSpec>& specs);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // Copies output and watches the workers until an Outcome is reached. `should_stop` is
  // called about every `check_interval`; `wake_fd` (or -1), when readable, makes it be
  // called at once (the agent's signal pipe).
  Outcome wait(const std::function<bool()>& should_stop, std::chrono::milliseconds check_interval,
               int wake_fd);

  // Sends `first_signal` to every live worker's process group, waits up to `grace` for them
  // to exit (copying output meanwhile), then SIGKILLs the rest and reaps everyone.
  void stop(std::chrono::milliseconds grace, int first_signal);

  // The first failure seen by wait(), e.g. "rank 1 exited with code 3".
  const std::string& failure() const { return failure_; }
  std::vector<pid_t> pids() const;

 private:
  struct Worker;
  // Reads whatever output is ready (waiting up to `timeout_ms`), and reaps exited workers.
  void pump(int timeout_ms, int wake_fd);
  void reap(bool block);
  // Reaps exited processes that were re-parented to the agent. REQUIRES: all workers reaped.
  static void reap_adopted_orphans(std::chrono::milliseconds patience);
  bool all_exited() const;

  std::vector<std::unique_ptr<Worker>> workers_;
  std::string failure_;
};

}  // namespace shardtrain::launch
