// WorkerGroup: the worker processes of one node for one attempt (one restart generation).
//
// Each worker is fork/exec'd in its own process group with its stdout and stderr on pipes;
// the agent's thread that calls wait()/stop() copies their output, one whole line at a time,
// to its own stdout/stderr (each line prefixed "[rank N] ", so lines never interleave
// mid-line) and/or to the worker's log files (WorkerSpec::out/err). The last lines of a stream
// kept off the console are remembered, so a failure can still be shown (failure_output()).
// A failed worker's error file (torchelastic's JSON, written by @record) adds its message to
// failure(). When several workers fail together (a rank raises, its peers then fail on the
// connection it dropped), the failure reported is the first one seen, except that wait() lets
// the others' exits come in for a moment (kFailureSettle) and an error file written earlier
// than the first failure's own replaces it: the earliest exception is the root cause, as
// torchrun reports it (torchrun compares whole seconds; the files' times tell apart failures
// milliseconds apart, which exits seen in one poll cannot).
// Workers get PR_SET_PDEATHSIG=SIGKILL, so they die with the agent even if it is SIGKILLed.
//
// Not thread-safe: one thread owns the group. The destructor stops (SIGKILL) and reaps any
// worker still running, so no path leaves a zombie or an orphan behind.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace shardtrain::launch {

// Where one output stream of a worker goes.
struct StreamRoute {
  bool console = true;  // copied to the agent's console, prefixed "[rank N] "
  std::string file;     // also (or instead) written to this file, unprefixed; "" = none
};

struct WorkerSpec {
  int global_rank = 0;
  int local_rank = 0;
  std::map<std::string, std::string> env;  // set on top of the agent's environment
  StreamRoute out, err;
  std::string error_file;  // TORCHELASTIC_ERROR_FILE, read when the worker fails; "" = none
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
  // `grace_now`, when given, is asked about every 250 ms for the grace that applies by now
  // (launch/stop_grace.h: longer while a worker saves a checkpoint).
  void stop(std::chrono::milliseconds grace, int first_signal,
            const std::function<std::chrono::milliseconds()>& grace_now = {});

  // The failure wait() reported (the root cause above), e.g. "rank 1 exited with code 3", or
  // with an error file "rank 1 exited with code 1: ValueError: boom".
  const std::string& failure() const { return failure_; }
  // The last lines that did not reach the console (prefixed) of the failed worker and of every
  // other worker that exited with a non-zero code, "" if none.
  std::string failure_output() const;
  // The exit code of the failed worker (-1: none failed, or it was killed by a signal).
  int failure_exit_code() const { return failure_exit_code_; }
  std::vector<pid_t> pids() const;

 private:
  struct Worker;
  // Reads whatever output is ready (waiting up to `timeout_ms`), and reaps exited workers.
  void pump(int timeout_ms, int wake_fd);
  void reap(bool block);
  // Copies what the exited workers wrote last (up to 500 ms: a leftover grandchild may hold a
  // pipe open).
  void drain_output();
  // Reaps exited processes that were re-parented to the agent. REQUIRES: all workers reaped.
  static void reap_adopted_orphans(std::chrono::milliseconds patience);
  bool all_exited() const;
  // Makes `w`, which failed with `status`, the reported failure if it is the earliest so far
  // (until wait() has reported one: then the choice stands).
  void consider_failure(const Worker& w, int status);

  std::vector<std::unique_ptr<Worker>> workers_;
  std::string failure_;
  int failure_exit_code_ = -1;
  const Worker* failed_worker_ = nullptr;
  // When failed_worker_'s error file was written (none: it wrote none).
  std::optional<std::filesystem::file_time_type> failure_written_;
  bool failure_reported_ = false;  // wait() returned kFailed: the choice stands
};

// How long wait() waits, after the first failure, for other workers' failures to come in.
inline constexpr std::chrono::milliseconds kFailureSettle{300};

}  // namespace shardtrain::launch
