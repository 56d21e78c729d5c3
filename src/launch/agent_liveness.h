// AgentLiveness: how the launcher agents of one run notice that one of them is gone (SIGKILLed,
// its node lost) when it could not say so itself.
//
// Every agent keeps "alive/<agent id>" in the run's rendezvous store (launch/rendezvous.h):
//  - kHeartbeat (the TCP store): a background thread, on a connection of its own, increments
//    the key every keep_alive_interval. An observer judges the agent gone when the value it
//    reads has not changed for keep_alive_interval x keep_alive_max_attempt, timed by the
//    observer's own clock (node clocks need not agree), or when the key is missing.
//  - kLease (etcd): the key is written once, with the agent's etcd lease, which EtcdStore keeps
//    alive (TTL = keep_alive_interval x keep_alive_max_attempt, rounded up to whole seconds).
//    The agent is gone when its key is, i.e. when etcd expired the lease.
// A clean exit ends the heartbeats (kHeartbeat) or revokes the lease (kLease, EtcdStore's
// destructor), so peers that are still waiting see the agent gone.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "dist/store.h"

namespace shardtrain::launch {

class AgentLiveness {
 public:
  enum class Mode { kHeartbeat, kLease };

  // Publishes this agent's key through `publisher` (kHeartbeat: a connection used by no one
  // else, written from a background thread; kLease: the store whose writes of "alive/..."
  // carry the lease) and reads the others' through `observer`. REQUIRES: both outlive this
  // object; `observer` is used only by the thread that calls departed(). Throws Error if the
  // first write fails.
  AgentLiveness(Mode mode, Store& publisher, Store& observer, std::string self_id,
                std::chrono::milliseconds interval, int max_attempt);
  // Stops the heartbeat thread.
  ~AgentLiveness();
  AgentLiveness(const AgentLiveness&) = delete;
  AgentLiveness& operator=(const AgentLiveness&) = delete;

  // nullopt while agent `id` counts as alive; else why it is judged gone, e.g. "no heartbeat
  // for 15 s" or "its etcd lease expired". Throws Error if the store cannot be read.
  std::optional<std::string> departed(const std::string& id);

  // How long an agent may stay silent before it is judged gone.
  std::chrono::milliseconds window() const { return interval_ * max_attempt_; }
  // How often departed() is worth calling.
  std::chrono::milliseconds check_interval() const;

 private:
  void heartbeat_loop();

  struct Observed {
    std::optional<std::string> value;
    std::chrono::steady_clock::time_point changed;
  };

  Mode mode_;
  Store& publisher_;
  Store& observer_;
  std::string key_;
  std::chrono::milliseconds interval_;
  int max_attempt_;
  std::map<std::string, Observed> observed_;  // by agent id; departed()'s thread only

  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace shardtrain::launch
