// CheckpointSaver: the step loop's side of sharded checkpoints (train/checkpoint/checkpoint.h),
// saving without making training wait for the disk.
//
// A save (save(), at a step boundary) stalls the step loop only for a copy of this rank's state
// into host memory (snapshot_checkpoint: the fp32 master and moment shards; on rank 0 the run
// state: step, LR schedule, sampler, config, layout). The staging buffers are reused across
// checkpoints. This rank's writer thread then writes the files (write_checkpoint_files: temp +
// fsync + rename, XXH64) while training continues. One write is in flight per rank: the next
// save first completes the previous checkpoint.
//
// Coordination: the manifest is written last, only after every rank's files are complete, and
// no rank waits for its disk to find that out.
//  - poll(), called by every rank once per step after the optimizer step, is one all-reduce of
//    four numbers: this rank's SIGTERM flag, "my writer is idle", "my writer failed", and the
//    bytes it wrote. It replaces the step's SIGTERM agreement (the same one small collective
//    per step as before; none at world size 1).
//  - All ranks see the same sums, so they take the same decision at the same step:
//      a rank failed             -> every rank throws Error (the failing rank's message names
//                                   the file and the fix; the others say how many failed);
//                                   the checkpoint never gets a manifest;
//      all idle, files written   -> rank 0's writer thread writes the manifest (the checkpoint
//                                   now exists) and then prunes to train.keep_checkpoints;
//      all idle, manifest written -> the checkpoint is complete; rank 0 logs it.
//    A checkpoint therefore becomes complete one or two steps after the slowest rank's write
//    ends. A crash before that leaves a step dir without manifest, which does not count.
//  - save() and finish() first complete the pending checkpoint: each rank waits for its own
//    writer, then two all-reduces agree that the files are written and then that the manifest
//    is. finish() (end of training, and after a SIGTERM or stop_at_step save) returns only
//    once the checkpoint's manifest is on disk.
//  - Bounded lag: a checkpoint must be complete at most options.max_lag_steps steps after it
//    was taken (train.checkpoint_max_lag_steps, default 0 = no bound). If it is not when poll()
//    reaches that step, the step loop waits for it there (complete_pending). This is what makes a
//    crash more than max_lag_steps after a checkpoint step always find that checkpoint; the
//    stall is then only the part of the write that those steps did not hide, never more than
//    a synchronous save's. 0 = no bound (only the next save waits).
//  - Pruning runs after the newer manifest exists and keeps the newest complete checkpoint;
//    since a new save starts only after the previous one is complete, no save is in progress
//    while pruning runs.
// Destroying a saver (an Error unwinding the trainer) waits for the running write but writes
// no manifest the ranks have not agreed on.
//
// With async = false, save() returns only when its checkpoint is complete (the step loop waits
// for the write; the files are the same).
//
// options.write_delay_per_file makes the writer sleep before each file (a slow disk): only the
// test worker sets it (train/step_hooks.h WorkerHooks), for the checkpoint and SIGTERM tests.
//
// REQUIRES: every rank calls poll / save / finish at the same steps (they are collective).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fsdp/fsdp_units.h"
#include "model/param_layout.h"
#include "ops/ops.h"
#include "train/checkpoint/checkpoint.h"

namespace shardtrain {

struct CheckpointSaverOptions {
  std::string dir;            // train.checkpoint_dir
  int64_t keep = 3;           // train.keep_checkpoints
  bool async = true;          // train.checkpoint_async
  int64_t max_lag_steps = 0;  // train.checkpoint_max_lag_steps (0 = no bound)
  std::chrono::milliseconds write_delay_per_file{0};  // tests: a slow disk (header comment)
};

// What poll() found.
struct CheckpointPoll {
  bool stop = false;    // some rank received SIGTERM
  bool waited = false;  // the max_lag_steps bound made the step loop wait for a checkpoint
  double wait_s = 0;    // for how long (this rank)
};

// What the step loop waited for in one save() on this rank.
struct CheckpointStall {
  double wait_s = 0;  // completing the previous checkpoint (and, synchronous, this one)
  double copy_s = 0;  // the copy of this rank's state to host memory
  double total_s() const { return wait_s + copy_s; }
};

class CheckpointSaver {
 public:
  // `units`, `ops` and `layout` must outlive the saver.
  CheckpointSaver(CheckpointSaverOptions options, FsdpUnits& units, Ops& ops,
                  const ParamLayout& layout, CheckpointRunInfo info);
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Collective, once per step after the optimizer step `step`: agrees on `stop_signal` (true
  // on any rank: .stop on every rank), advances a pending checkpoint whose writes have ended
  // on every rank, and waits for one that is max_lag_steps old. Throws Error if a rank's write
  // failed.
  CheckpointPoll poll(int64_t step, bool stop_signal);
  // Collective: completes the previous checkpoint, snapshots `progress` to host memory and
  // starts writing it (async), or writes it and completes it (synchronous). Throws Error if
  // the previous checkpoint (or, synchronous, this one) failed on any rank.
  CheckpointStall save(const TrainProgress& progress);
  // Collective: completes the pending checkpoint, if any (its manifest is on disk on return).
  // Throws Error if it failed on any rank.
  void finish();
  // How long this rank's files of the newest complete checkpoint took to write (0: none yet).
  double last_write_seconds() const { return last_write_s_; }

 private:
  class Writer;
  struct Pending {
    int64_t step = 0;
    std::string step_dir;
    CheckpointStall stall;
    bool files_done = false;  // every rank's files are written; the manifest is being written
    double total_bytes = 0;   // over all ranks
  };
  // One poll round: the all-reduce and the decisions described in the header comment.
  bool poll_once(bool stop_signal);
  void complete_pending();
  void start_finalizing(double total_bytes);
  void log_complete();
  [[noreturn]] void fail_pending(double failed_ranks, const std::string& error);

  CheckpointSaverOptions options_;
  FsdpUnits& units_;
  Ops& ops_;
  const ParamLayout& layout_;
  CheckpointRunInfo info_;
  int64_t current_step_ = 0;     // the step of the last poll or save
  std::string newest_complete_;  // the newest checkpoint this run completed ("" = none yet)
  CheckpointSnapshot snapshot_;  // host staging buffers, reused across checkpoints
  std::optional<Pending> pending_;
  // Written by the writer thread's jobs; read by the step loop only while the writer is idle.
  CheckpointFilesWritten written_;
  double write_s_ = 0;
  double last_write_s_ = 0;  // write_s_ of the newest complete checkpoint
  std::vector<std::string> removed_;
  std::unique_ptr<Writer> writer_;  // last: its thread stops before the members it writes go
};

}  // namespace shardtrain
