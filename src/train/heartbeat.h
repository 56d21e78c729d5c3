// Heartbeat: this rank's progress, published in the store for the launcher's hang watchdog
// (launch/watchdog.h).
//
// The key is store_keys::heartbeat(rank) under SHARDTRAIN_STORE_PREFIX (the launcher's
// per-attempt scope); the value is a HeartbeatRecord (dist/heartbeat_record.h): the step, the
// time of the last progress, and the phase: in a collective (detail "<collective>: <context>",
// the context being what Comm::set_context named, e.g. "all_gather: unit 3 (layers.2)
// parameter all-gather"), computing after it, at a step start, or saving a checkpoint. While
// saving (begin_saving .. end_saving) the phase stays "saving" whatever collectives the save
// runs, so the launcher knows to let the save finish before it kills the process; the record
// also carries the duration of the rank's last completed checkpoint write (note_save_seconds).
//
// Updating is cheap (a mutex and a string copy): the training thread only records progress;
// a background thread with its own store connection publishes a changed value every 250 ms,
// and bumps `heartbeat_alive/<rank>` (a counter) every 250 ms whether or not there was progress:
// a rank whose counter stops too is frozen as a process (SIGSTOP, a dead machine), which the
// watchdog names before ranks that merely wait for it.
// Nothing is published before the first set_step(), so a long model load is not a hang (unless
// peers already wait in their first step for the watchdog's whole timeout). A
// rank that stops (SIGSTOP, a deadlock in a collective) publishes nothing new, which is what
// the watchdog detects. On NCCL the phase is the last collective enqueued, not the one the GPU
// waits in.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "dist/comm.h"
#include "dist/heartbeat_record.h"
#include "dist/store.h"
#include "dist/worker_env.h"

namespace shardtrain {

class Heartbeat {
 public:
  // Publishes under `store` (already scoped; null = disabled, every call a no-op).
  Heartbeat(std::unique_ptr<Store> store, int rank);
  // For a worker started by `shardtrain launch`: the launcher's TCP store (SHARDTRAIN_STORE)
  // with SHARDTRAIN_STORE_PREFIX; disabled without them (a single process, a FileStore run).
  static std::unique_ptr<Heartbeat> for_launched_worker(const WorkerEnv& env);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  void set_step(int64_t step);
  void set_phase(HeartbeatPhase phase, std::string detail);
  // Marks the rank as saving a checkpoint (`what`, e.g. "step 40 before stopping") until
  // end_saving().
  void begin_saving(std::string what);
  void end_saving();
  // How long the rank's last checkpoint write took (published with every record).
  void note_save_seconds(double seconds);

 private:
  void publish_loop();

  std::unique_ptr<Store> store_;
  std::string key_, alive_key_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool publish_now_ = false;  // begin_saving: the launcher's stop grace waits for this record
  int64_t step_ = -1;  // -1: not started, nothing published
  int64_t unix_ms_ = 0;
  HeartbeatPhase phase_ = HeartbeatPhase::kStepStart;
  std::string detail_;
  std::optional<std::string> saving_;  // what is being saved, while a save runs
  int64_t last_save_ms_ = 0;
  uint64_t version_ = 0;
  std::thread publisher_;
};

// `comm` with every collective reported to `heartbeat` (entry and return), its set_context
// kept as the phase's context; split() wraps the sub-groups too. REQUIRES: heartbeat outlives
// the returned Comm and its sub-groups.
std::unique_ptr<Comm> with_heartbeat(std::unique_ptr<Comm> comm, Heartbeat& heartbeat);

}  // namespace shardtrain
