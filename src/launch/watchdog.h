// Watchdog: node 0's launcher agent detects a worker group that has stopped making progress
// (a hang in a collective, a stopped or deadlocked rank) from the ranks' heartbeats
// (train/heartbeat.h), instead of waiting out a NCCL/Gloo timeout.
//
// Every `poll` it reads the heartbeat record (dist/heartbeat_record.h) of every rank r. A rank's
// progress is a change of its value, timed by this agent's clock (so clocks of other nodes do not
// matter). While no rank has published yet (all still loading) nothing is judged. When no rank
// has made progress for `timeout`, the group is hung: the watchdog names the rank most likely to
// be the cause, in this order: a rank that has published nothing at all (it never reached its
// first step while the others wait for it: "rank R made no progress for S s: it has sent no
// heartbeat since the workers started ..."); a rank whose process is frozen (its
// `heartbeat_alive/<r>` counter, bumped every 250 ms by the rank's publisher thread, has not
// changed for 3 poll periods, at least 1.5 s; while a counter has stopped for less than that,
// the report waits for its verdict); then the lowest step, then one that is not waiting in a
// collective, then the one idle longest. One line, "rank R made no progress for S s at step N,
// waiting in <phase>" (plus "; its process is not running" for a frozen one); it logs it, makes
// it available through report() and stops polling. While any rank advances (e.g. rank 0 writing
// the final model while the others wait in a barrier), nothing fires.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dist/store.h"

namespace shardtrain::launch {

class Watchdog {
 public:
  // Watches keys `<key_prefix>` + store_keys::heartbeat(r), r in [0, world_size). REQUIRES: `store`
  // outlives the watchdog and is used by no other thread (give it its own connection).
  Watchdog(Store& store, std::string key_prefix, int world_size, std::chrono::milliseconds timeout,
           std::chrono::milliseconds poll = std::chrono::seconds(1));
  // Stops polling and joins the thread.
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // The hang report once the group is hung, else nullopt. Thread-safe.
  std::optional<std::string> report() const;

 private:
  void run();
  // The report line when the group is hung at `now`, else nullopt.
  std::optional<std::string> check(std::chrono::steady_clock::time_point now);

  struct RankState {
    std::optional<std::string> value;  // last heartbeat seen
    std::chrono::steady_clock::time_point changed;
    std::optional<std::string> alive;  // last liveness counter seen
    std::chrono::steady_clock::time_point alive_changed;
  };

  Store& store_;
  std::chrono::milliseconds timeout_;
  std::string key_prefix_;
  std::chrono::milliseconds poll_;
  std::chrono::steady_clock::time_point started_;  // when the workers started, near enough
  std::vector<RankState> ranks_;
  mutable std::mutex mutex_;
  std::optional<std::string> report_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace shardtrain::launch
