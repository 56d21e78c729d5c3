// How long the agent waits between SIGTERM and SIGKILL when it stops its workers.
//
// --stop-grace (default 5 s) for a worker that does not say it is saving. A shardtrain worker
// that got SIGTERM saves a checkpoint and publishes the phase "saving" in its heartbeat
// (dist/heartbeat_record.h) with the duration of its last checkpoint write; then the grace is
// the larger of 30 s (torchelastic's default) and twice that duration (and never less than
// --stop-grace), so a slow disk does not get the checkpoint killed half-written. Whatever a
// record says (a forged or corrupt heartbeat can claim any duration), the grace never exceeds
// --max-stop-grace (default 600 s). The agent logs once what it waits for.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dist/heartbeat_record.h"
#include "dist/store.h"

namespace shardtrain::launch {

inline constexpr std::chrono::milliseconds kSavingGraceFloor{30000};

// The grace for workers whose latest records are `records` (nullopt: none published), in
// [stop_grace, max(stop_grace, max_grace)].
std::chrono::milliseconds grace_for(std::chrono::milliseconds stop_grace,
                                    std::chrono::milliseconds max_grace,
                                    const std::vector<std::optional<HeartbeatRecord>>& records);

// Reads the heartbeats of `ranks` under `prefix` from the workers' store at host:port (its
// own connection, made on first use, presenting `secret`: dist/store_secret.h) and applies
// grace_for; logs when a save extends the grace. A store that cannot be read leaves stop_grace.
class SaveAwareGrace {
 public:
  SaveAwareGrace(std::string host, int port, std::string secret, std::string prefix,
                 std::vector<int> ranks, std::chrono::milliseconds stop_grace,
                 std::chrono::milliseconds max_grace);
  ~SaveAwareGrace();
  std::chrono::milliseconds operator()();

 private:
  std::string host_;
  int port_;
  std::string secret_;
  std::string prefix_;
  std::vector<int> ranks_;
  std::chrono::milliseconds stop_grace_;
  std::chrono::milliseconds max_grace_;
  std::unique_ptr<Store> store_;
  bool unreachable_ = false;
  bool logged_ = false;
};

}  // namespace shardtrain::launch
