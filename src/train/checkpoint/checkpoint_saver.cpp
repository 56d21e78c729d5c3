#include "train/checkpoint/checkpoint_saver.h"

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "core/error.h"
#include "core/log.h"

namespace shardtrain {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

// One job at a time on its own thread. The first failure of a job is kept (error()). The
// destructor lets a submitted job run to its end, then joins.
class CheckpointSaver::Writer {
 public:
  Writer() : thread_([this] { run(); }) {}
  ~Writer() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // REQUIRES: idle().
  void submit(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      SHARDTRAIN_CHECK(!busy_, "one checkpoint write at a time");
      job_ = std::move(job);
      busy_ = true;
    }
    wake_.notify_all();
  }
  bool idle() {
    std::lock_guard lock(mutex_);
    return !busy_;
  }
  void wait_idle() {
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return !busy_; });
  }
  std::string error() {
    std::lock_guard lock(mutex_);
    return error_;
  }

 private:
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stopping_ || job_ != nullptr; });
      if (job_ == nullptr) return;
      std::function<void()> job = std::move(job_);
      job_ = nullptr;
      lock.unlock();
      std::string failure;
      try {
        job();
      } catch (const std::exception& e) {  // Error, and std::filesystem errors
        failure = e.what();
      }
      lock.lock();
      if (!failure.empty() && error_.empty()) error_ = failure;
      busy_ = false;
      done_.notify_all();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::function<void()> job_;
  bool busy_ = false, stopping_ = false;
  std::string error_;
  std::thread thread_;  // last: starts after the members above exist
};

CheckpointSaver::CheckpointSaver(CheckpointSaverOptions options, FsdpUnits& units, Ops& ops,
                                 const ParamLayout& layout, CheckpointRunInfo info)
    : options_(std::move(options)),
      units_(units),
      ops_(ops),
      layout_(layout),
      info_(std::move(info)),
      writer_(std::make_unique<Writer>()) {
  const std::vector<int64_t> complete = complete_checkpoint_steps(options_.dir);
  if (!complete.empty()) newest_complete_ = step_dir_path(options_.dir, complete.back());
}

CheckpointSaver::~CheckpointSaver() { writer_.reset(); }

CheckpointPoll CheckpointSaver::poll(int64_t step, bool stop_signal) {
  current_step_ = step;
  CheckpointPoll result;
  result.stop = poll_once(stop_signal);
  // Every rank has the same pending_ and step: they wait together, or none does.
  if (pending_ && options_.max_lag_steps > 0 && step - pending_->step >= options_.max_lag_steps) {
    const Clock::time_point start = Clock::now();
    const int64_t late_step = pending_->step;
    complete_pending();
    result.waited = true;
    result.wait_s = seconds_since(start);
    if (units_.world_rank() == 0) {
      log::info(
          "checkpoint step {} was not complete {} steps later: the step loop waited {:.1f} ms "
          "for its write at step {} (train.checkpoint_max_lag_steps)",
          late_step, step - late_step, result.wait_s * 1e3, step);
    }
  }
  return result;
}

bool CheckpointSaver::poll_once(bool stop_signal) {
  const bool idle = writer_->idle();
  const std::string error = writer_->error();
  std::vector<double> mine = {stop_signal ? 1.0 : 0.0, idle ? 1.0 : 0.0, error.empty() ? 0.0 : 1.0,
                              idle ? static_cast<double>(written_.bytes) : 0.0};
  const std::vector<double> sums =
      units_.world_size() > 1 ? units_.mesh().sum(mine, "checkpoint poll") : mine;
  const double world = units_.world_size();
  if (sums[2] > 0) fail_pending(sums[2], error);
  if (pending_ && sums[1] == world) {
    if (!pending_->files_done) {
      start_finalizing(sums[3]);
    } else {
      log_complete();
      last_write_s_ = write_s_;
      newest_complete_ = pending_->step_dir;
      pending_.reset();
    }
  }
  return sums[0] > 0;
}

void CheckpointSaver::start_finalizing(double total_bytes) {
  pending_->files_done = true;
  pending_->total_bytes = total_bytes;
  if (units_.world_rank() != 0) return;
  writer_->submit([this, step = pending_->step, group_size = units_.plan().group_size,
                   run_state_files = written_.run_state_files] {
    removed_ = finalize_checkpoint(options_.dir, options_.keep, step, group_size, run_state_files);
  });
}

void CheckpointSaver::complete_pending() {
  while (pending_) {
    writer_->wait_idle();
    poll_once(false);
  }
}

CheckpointStall CheckpointSaver::save(const TrainProgress& progress) {
  const Clock::time_point start = Clock::now();
  current_step_ = progress.step;
  CheckpointStall stall;
  complete_pending();
  const Clock::time_point copy_start = Clock::now();
  stall.wait_s = std::chrono::duration<double>(copy_start - start).count();
  snapshot_checkpoint(options_.dir, units_, ops_, layout_, info_, progress, &snapshot_);
  stall.copy_s = seconds_since(copy_start);
  pending_ = Pending{progress.step, snapshot_.step_dir, stall};
  writer_->submit([this] {
    const Clock::time_point write_start = Clock::now();
    written_ = {};
    written_ = write_checkpoint_files(snapshot_, options_.write_delay_per_file);
    write_s_ = seconds_since(write_start);
  });
  if (!options_.async) {
    const Clock::time_point write_start = Clock::now();
    complete_pending();
    stall.wait_s += seconds_since(write_start);
  }
  return stall;
}

void CheckpointSaver::finish() { complete_pending(); }

void CheckpointSaver::log_complete() {
  if (units_.world_rank() == 0) {
    const Pending& p = *pending_;
    // A synchronous save logs before save() adds the write to its stall: the stall shown is
    // the copy and the wait for the previous checkpoint, the write is shown beside it.
    log::info(
        "checkpoint step {} complete after step {} ({}): {:.1f} MB over all ranks; step loop "
        "stalled {:.1f} ms (host copy {:.1f} ms, waiting for the previous checkpoint {:.1f} ms); "
        "{} write {:.1f} ms, {:.1f} MB/s on rank 0",
        p.step, current_step_, p.step_dir, p.total_bytes / 1e6, p.stall.total_s() * 1e3,
        p.stall.copy_s * 1e3, p.stall.wait_s * 1e3, options_.async ? "background" : "synchronous",
        write_s_ * 1e3, write_s_ > 0 ? static_cast<double>(written_.bytes) / 1e6 / write_s_ : 0.0);
  }
  for (const std::string& removed : removed_) log::info("removed old checkpoint {}", removed);
  removed_.clear();
}

void CheckpointSaver::fail_pending(double failed_ranks, const std::string& error) {
  const int64_t step = pending_ ? pending_->step : current_step_;
  pending_.reset();
  const std::string reason = !error.empty()
                                 ? error
                                 : fmt::format("{} of {} ranks failed to write it (see their logs)",
                                               failed_ranks, units_.world_size());
  const std::string kept =
      newest_complete_.empty()
          ? std::string()
          : fmt::format("; the newest complete checkpoint is still {}", newest_complete_);
  fail("checkpoint step {} not saved: {}{}", step, reason, kept);
}

}  // namespace shardtrain
