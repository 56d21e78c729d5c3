// The world of one worker process, from its WorkerEnv (dist/worker_env.h, the launcher's
// contract): the store its ranks rendezvous through (a FileStore in SHARDTRAIN_STORE_DIR, else
// the launcher's TCP store) and the Comm that carries the world's collectives. A world size of
// 1 means a single process.
#pragma once

#include <memory>
#include <string>

#include "dist/comm.h"
#include "dist/comm_backend_choice.h"
#include "dist/store.h"
#include "dist/worker_env.h"
#include "ops/backend.h"
#include "ops/ops.h"

namespace shardtrain {

// Which Comm carries the world's collectives.
enum class WorldComm {
  kSingle,          // one process: collectives are identities, no store
  kGloo,            // CPU ranks: Gloo over TCP
  kNccl,            // CUDA ranks, one GPU each
  kHostStagedGloo,  // CUDA ranks through Gloo, staged via host memory (dist/host_staged_comm.h)
};

// Chooses the world Comm from the config key dist.backend, the
// compute device and this node's ranks (env.local_world) against its visible GPUs:
//   one process -> kSingle; CPU ranks -> kGloo; CUDA ranks -> kNccl, or kHostStagedGloo when
//   backend = "gloo" or when backend = "auto" and the node has more ranks than visible GPUs
//   (NCCL refuses two ranks on one GPU).
// Throws Error naming dist.backend for "nccl" on CPU ranks, and "nccl" with more ranks on the
// node than visible GPUs.
WorldComm choose_world_comm(CommBackendChoice backend, Device device, const WorkerEnv& env,
                            int visible_gpus);

// The world of this process: the store it rendezvoused through (null for one process) and the
// world Comm chosen by choose_world_comm (NCCL collectives run on `compute`, the CUDA stream of
// `ops`'s backend, which make_rank_ops reports).
// Rank 0 logs one line when it picks host-staged Gloo (a correctness/testing path, slow).
// Destroy `comm` before `store`.
struct DistWorld {
  std::unique_ptr<Store> store;
  std::unique_ptr<Comm> comm;
};
// REQUIRES: ops outlives the returned world (for CUDA: made by make_rank_ops, with `compute`
// its stream). Throws Error as choose_world_comm does, when the store cannot be reached, the
// other ranks do not arrive in time, or CUDA ranks need NCCL from a build without it.
DistWorld connect_world(const WorkerEnv& env, Ops& ops, const CudaComputeStream& compute,
                        CommBackendChoice backend = CommBackendChoice::kAuto);

// The compute backend of this rank (ops/backend.h make_ops): CUDA ranks drive GPU
// LOCAL_RANK % (visible GPUs), so ranks share GPUs round-robin when there are more of them than
// GPUs (connect_world then needs host-staged Gloo). `compute`, when given, receives the CUDA
// backend's device and stream for connect_world. A job of one rank (WORLD_SIZE 1) runs aside
// work aside unless SHARDTRAIN_OPS_ASIDE=0 (ops/ops_switches.h). Throws Error as make_ops does.
std::unique_ptr<Ops> make_rank_ops(DeviceChoice device_choice, const WorkerEnv& env,
                                   CudaComputeStream* compute = nullptr);

}  // namespace shardtrain
