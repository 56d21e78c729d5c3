#include "dist/dist_env.h"

#include "core/error.h"
#include "core/log.h"
#include "dist/file_store.h"
#include "dist/single_rank_comm.h"
#include "dist/gloo_comm.h"
#include "dist/host_staged_comm.h"
#include "dist/nccl_comm.h"
#include "dist/store_keys.h"
#include "dist/store_secret.h"
#include "dist/tcp_store.h"
#include "ops/backend.h"

namespace shardtrain {
WorldComm choose_world_comm(CommBackendChoice backend, Device device, const WorkerEnv& env,
                            int visible_gpus) {
  if (backend == CommBackendChoice::kNccl && device != Device::kCuda) {
    fail(
        "config key 'dist.backend' = \"nccl\" needs CUDA ranks, but this rank computes on the "
        "{}; HINT: use --train.device=cuda, or --dist.backend=auto",
        device_name(device));
  }
  if (env.world == 1) return WorldComm::kSingle;
  if (device != Device::kCuda) return WorldComm::kGloo;
  if (backend == CommBackendChoice::kGloo) return WorldComm::kHostStagedGloo;
  if (env.local_world <= visible_gpus) return WorldComm::kNccl;
  if (backend == CommBackendChoice::kAuto) return WorldComm::kHostStagedGloo;
  fail(
      "{} ranks on this node (LOCAL_WORLD_SIZE) but {} GPU(s) visible, and dist.backend = "
      "\"nccl\" needs one GPU per rank (NCCL refuses two ranks on one GPU); HINT: use "
      "--nproc-per-node {}, check CUDA_VISIBLE_DEVICES, or use --dist.backend=gloo (host-staged, "
      "slow: for testing the sharded path on fewer GPUs)",
      env.local_world, visible_gpus, visible_gpus);
}

std::unique_ptr<Ops> make_rank_ops(DeviceChoice device_choice, const WorkerEnv& env,
                                   CudaComputeStream* compute) {
  const int gpus = visible_gpu_count();
  const bool wants_cuda = device_choice == DeviceChoice::kCuda ||
                          (device_choice == DeviceChoice::kAuto && gpus > 0);
  // A job of one rank runs the optimizer update and the gradient norm aside by default
  // (ops/ops_switches.h SHARDTRAIN_OPS_ASIDE).
  return make_ops(device_choice, wants_cuda && gpus > 0 ? env.local_rank % gpus : 0, compute,
                  /*aside_by_default=*/env.world == 1);
}

DistWorld connect_world(const WorkerEnv& env, Ops& ops, const CudaComputeStream& compute,
                        CommBackendChoice backend) {
  const int gpus = ops.device() == Device::kCuda ? visible_gpu_count() : 0;
  const WorldComm choice = choose_world_comm(backend, ops.device(), env, gpus);
  DistWorld world;
  if (choice == WorldComm::kSingle) {
    world.comm = make_single_rank_comm();
    return world;
  }
  if (!env.store_dir.empty()) {
    world.store = std::make_unique<FileStore>(env.store_dir);
  } else {
    if (env.rendezvous_host().empty() || env.rendezvous_port() <= 0) {
      fail(
          "WORLD_SIZE={} but neither SHARDTRAIN_STORE nor MASTER_ADDR/MASTER_PORT are set; "
          "HINT: start workers with `shardtrain launch`, or set SHARDTRAIN_STORE_DIR to a "
          "directory all ranks share",
          env.world);
    }
    world.store =
        std::make_unique<TcpStoreClient>(env.rendezvous_host(), env.rendezvous_port(),
                                         std::chrono::minutes(5), require_store_secret(env));
  }
  // Keys scoped by restart, so a restarted group never reads the previous group's addresses.
  const std::string prefix = store_keys::world_comm(env.restart_count);
  GlooCommOptions gloo;
  gloo.iface = env.gloo_ifname;
  gloo.one_node = env.world == env.local_world;
  if (env.comm_timeout) gloo.timeout = *env.comm_timeout;
  switch (choice) {
    case WorldComm::kNccl: {
      NcclCommOptions nccl;
      nccl.compute = compute;
      nccl.job_rank = env.rank;
      if (env.comm_timeout) nccl.timeout = *env.comm_timeout;
      world.comm = make_nccl_comm(*world.store, env.rank, env.world, prefix, nccl);
      break;
    }
    case WorldComm::kGloo:
      world.comm = make_gloo_comm(*world.store, env.rank, env.world, prefix, gloo);
      break;
    case WorldComm::kHostStagedGloo:
      if (env.rank == 0) {
        log::info(
            "dist: {}: collectives go through Gloo staged via host memory, each rank on GPU "
            "LOCAL_RANK % {}; a correctness/testing path, much slower than NCCL",
            backend == CommBackendChoice::kGloo
                ? std::string("dist.backend = gloo")
                : fmt::format("{} ranks on this node but {} visible GPU(s)", env.local_world, gpus),
            gpus);
      }
      world.comm = make_host_staged_comm(
          make_gloo_comm(*world.store, env.rank, env.world, prefix, gloo), ops);
      break;
    case WorldComm::kSingle:
      break;
  }
  return world;
}

}  // namespace shardtrain
