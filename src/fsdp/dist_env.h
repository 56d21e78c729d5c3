// The distributed environment of one worker process, as the launcher (torchrun-compatible)
// sets it: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
// TORCHELASTIC_RESTART_COUNT (plus the metrics variables below). SHARDTRAIN_STORE_DIR, when set, selects a FileStore in that
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
  // Metrics (obs/, train/rank_metrics_publisher.h): SHARDTRAIN_RUN_ID is set by shardtrain's
  // launcher (empty = not under it), SHARDTRAIN_METRICS_DIR where the node's agent reads the
  // ranks' metrics; POD_NAME / POD_NAMESPACE from the Kubernetes downward API.
  std::string run_id, metrics_dir, pod_name, pod_namespace;
};

// Throws Error naming the variable when one is malformed or inconsistent.
DistEnv read_dist_env();

// Which Comm carries the world's collectives.
enum class WorldComm {
  kSingle,          // one process: collectives are identities, no store
  kGloo,            // CPU ranks: Gloo over TCP
  kNccl,            // CUDA ranks, one GPU each
  kHostStagedGloo,  // CUDA ranks through Gloo, staged via host memory (dist/host_staged_comm.h)
};

// Chooses the world Comm from the config key dist.backend ("auto" | "nccl" | "gloo"), the
// compute device and this node's ranks (env.local_world) against its visible GPUs:
//   one process -> kSingle; CPU ranks -> kGloo; CUDA ranks -> kNccl, or kHostStagedGloo when
//   backend = "gloo" or when backend = "auto" and the node has more ranks than visible GPUs
//   (NCCL refuses two ranks on one GPU).
// Throws Error naming dist.backend for an unknown value, "nccl" on CPU ranks, and "nccl" with
// more ranks on the node than visible GPUs.
WorldComm choose_world_comm(const std::string& backend, Device device, const DistEnv& env,
                            int visible_gpus);

// The world of this process: the store it rendezvoused through (null for one process) and the
// world Comm chosen by choose_world_comm (NCCL collectives run on `ops`'s compute stream).
// Rank 0 logs one line when it picks host-staged Gloo (a correctness/testing path, slow).
// Destroy `comm` before `store`.
struct DistWorld {
  std::unique_ptr<Store> store;
  std::unique_ptr<Comm> comm;
};
// REQUIRES: ops outlives the returned world (for CUDA: made by make_rank_ops). Throws Error as
// choose_world_comm does, when the store cannot be reached, the other ranks do not arrive in
// time, or CUDA ranks need NCCL from a build without it.
DistWorld connect_world(const DistEnv& env, Ops& ops, const std::string& backend = "auto");

// The compute backend of this rank (ops/backend.h make_ops): CUDA ranks drive GPU
// LOCAL_RANK % (visible GPUs), so ranks share GPUs round-robin when there are more of them than
// GPUs (connect_world then needs host-staged Gloo). Throws Error as make_ops does.
std::unique_ptr<Ops> make_rank_ops(const std::string& device_choice, const DistEnv& env);

}  // namespace shardtrain
