// The distributed environment of one worker process, as the launcher (torchrun-compatible)
// sets it: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
// TORCHELASTIC_RESTART_COUNT. SHARDTRAIN_STORE_DIR, when set, selects a FileStore in that
// directory as the rendezvous instead of the TCP store at MASTER_ADDR:MASTER_PORT.
// No WORLD_SIZE (or WORLD_SIZE=1) means a single process.
#pragma once

#include <memory>
#include <string>

#include "dist/comm.h"
#include "dist/store.h"

namespace shardtrain {

struct DistEnv {
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  std::string master_addr;
  int master_port = 0;
  std::string store_dir;
  int restart_count = 0;
};

// Throws Error naming the variable when one is malformed or inconsistent.
DistEnv read_dist_env();

// The world of this process: the store it rendezvoused through (null for one process) and the
// world Comm (Gloo over TCP; a single-rank Comm for one process).
struct DistWorld {
  std::unique_ptr<Store> store;
  std::unique_ptr<Comm> comm;
};
// Throws Error when the store cannot be reached or the other ranks do not arrive in time.
DistWorld connect_world(const DistEnv& env);

}  // namespace shardtrain
