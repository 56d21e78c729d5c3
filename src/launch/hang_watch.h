// HangWatch: the hang check of one generation's workers on this node, as the launcher agent
// runs it while they run (launch/agent.cpp), with everything it owns:
//   - shardtrain workers (group rank 0 only): launch/watchdog.h over their heartbeats, read on
//     a thread of the watchdog's own through a store connection of the HangWatch's own;
//   - other commands: launch/process_watchdog.h over this node's worker processes;
//   - neither (--watchdog-timeout 0, or a shardtrain group's rank > 0): nothing.
//
// Teardown order is the point of this type: the heartbeat watchdog's thread reads the
// connection at any moment (several round trips per poll), so stop() and the destructor join
// that thread BEFORE the connection is closed and freed. The other order let the thread, caught
// mid-poll, call into a freed client: the agent died of SIGSEGV right after its workers had all
// exited 0 (exit 139 of `shardtrain launch`). Not copyable or movable, so no member-by-member
// assignment can reorder it again; the agent calls stop() when the workers are done.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch/process_watchdog.h"
#include "launch/watchdog.h"

namespace shardtrain {
class TcpStoreClient;
}

namespace shardtrain::launch {

// Where shardtrain workers publish their heartbeats (dist/store_keys.h heartbeat(r) under
// `key_prefix`, r in [0, world_size)).
struct HeartbeatSource {
  std::string host;
  int port = 0;
  std::string secret;  // the workers' store secret (dist/store_secret.h)
  std::string key_prefix;
  int world_size = 0;
};

class HangWatch {
 public:
  // Watches nothing: check() is always nullopt.
  HangWatch();
  // Shardtrain workers: their heartbeats, over a connection of its own made within
  // `connect_timeout`; a hang is no progress of any rank for `timeout`, polled every `poll`
  // (launch/watchdog.h). Throws Error if the store cannot be reached.
  HangWatch(const HeartbeatSource& source, std::chrono::milliseconds connect_timeout,
            std::chrono::milliseconds timeout,
            std::chrono::milliseconds poll = std::chrono::seconds(1));
  // Other commands: `workers`' process states (launch/process_watchdog.h).
  HangWatch(std::chrono::milliseconds timeout, std::vector<ProcessWatchdog::Worker> workers);
  // stop().
  ~HangWatch();
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // The report line once the workers hang, else nullopt (always after stop()). Call from the
  // thread that owns this object, about every monitor interval while the workers run.
  std::optional<std::string> check();

  // Ends watching for good: joins the heartbeat watchdog's thread, then closes the connection it
  // read. Idempotent.
  void stop();

 private:
  std::unique_ptr<TcpStoreClient> client_;
  std::unique_ptr<Watchdog> heartbeats_;  // reads *client_ from its thread: ended first
  std::unique_ptr<ProcessWatchdog> processes_;
  std::vector<ProcessWatchdog::Worker> workers_;
};

}  // namespace shardtrain::launch
