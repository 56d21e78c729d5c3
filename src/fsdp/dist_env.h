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
#include "ops/ops.h"

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
// world Comm: NCCL when `ops` is the CUDA backend (one GPU per rank, collectives on its compute
// stream), Gloo over TCP for CPU ops, a single-rank Comm for one process (no NCCL needed).
// Destroy `comm` before `store`.
struct DistWorld {
  std::unique_ptr<Store> store;
  std::unique_ptr<Comm> comm;
};
// REQUIRES: ops outlives the returned world (for CUDA: made by make_rank_ops). Throws Error when
// the store cannot be reached, the other ranks do not arrive in time, or several CUDA ranks are
// asked of a build without NCCL.
DistWorld connect_world(const DistEnv& env, Ops& ops);

// The compute backend of this rank (ops/backend.h make_ops): CUDA ranks drive GPU LOCAL_RANK.
// Throws Error as make_ops does, and when this node has more ranks than visible GPUs (NCCL
// refuses two ranks on one GPU).
std::unique_ptr<Ops> make_rank_ops(const std::string& device_choice, const DistEnv& env);

}  // namespace shardtrain
