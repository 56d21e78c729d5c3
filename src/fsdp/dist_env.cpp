#include "fsdp/dist_env.h"

#include <cstdlib>

#include "core/error.h"
#include "core/log.h"
#include "dist/file_store.h"
#include "dist/gloo_comm.h"
#include "dist/host_staged_comm.h"
#include "dist/nccl_comm.h"
#include "dist/tcp_store.h"
#include "fsdp/fsdp_groups.h"
#include "ops/backend.h"

namespace shardtrain {
namespace {

std::string env_or(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return value && *value ? std::string(value) : fallback;
}

int env_int(const char* name, int fallback) {
  const std::string text = env_or(name, "");
  if (text.empty()) return fallback;
  try {
    size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  fail(
      "environment variable {}='{}' is not an integer; HINT: start workers with "
      "`shardtrain launch` (or torchrun), which sets it",
      name, text);
}

}  // namespace

DistEnv read_dist_env() {
  DistEnv env;
  env.world = env_int("WORLD_SIZE", 1);
  env.rank = env_int("RANK", 0);
  env.local_world = env_int("LOCAL_WORLD_SIZE", env.world);
  env.local_rank = env_int("LOCAL_RANK", env.rank % std::max(env.local_world, 1));
  env.master_addr = env_or("MASTER_ADDR", "");
  env.master_port = env_int("MASTER_PORT", 0);
  env.store_dir = env_or("SHARDTRAIN_STORE_DIR", "");
  env.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0);
  env.run_id = env_or("SHARDTRAIN_RUN_ID", "");
  env.metrics_dir = env_or("SHARDTRAIN_METRICS_DIR", "");
  env.pod_name = env_or("POD_NAME", "");
  env.pod_namespace = env_or("POD_NAMESPACE", "");
  if (env.world < 1 || env.rank < 0 || env.rank >= env.world) {
    fail("RANK={} and WORLD_SIZE={} are inconsistent: need 0 <= RANK < WORLD_SIZE", env.rank,
         env.world);
  }
  if (env.local_world < 1 || env.world % env.local_world != 0) {
    fail("LOCAL_WORLD_SIZE={} must divide WORLD_SIZE={} (the same number of ranks per node)",
         env.local_world, env.world);
  }
  return env;
}

WorldComm choose_world_comm(const std::string& backend, Device device, const DistEnv& env,
                            int visible_gpus) {
  if (backend != "auto" && backend != "nccl" && backend != "gloo") {
    fail("config key 'dist.backend' must be one of \"auto\", \"nccl\", \"gloo\"; got \"{}\"",
         backend);
  }
  if (backend == "nccl" && device != Device::kCuda) {
    fail(
        "config key 'dist.backend' = \"nccl\" needs CUDA ranks, but this rank computes on the "
        "{}; HINT: use --train.device=cuda, or --dist.backend=auto",
        device_name(device));
  }
  if (env.world == 1) return WorldComm::kSingle;
  if (device != Device::kCuda) return WorldComm::kGloo;
  if (backend == "gloo") return WorldComm::kHostStagedGloo;
  if (env.local_world <= visible_gpus) return WorldComm::kNccl;
  if (backend == "auto") return WorldComm::kHostStagedGloo;
  fail(
      "{} ranks on this node (LOCAL_WORLD_SIZE) but {} GPU(s) visible, and dist.backend = "
      "\"nccl\" needs one GPU per rank (NCCL refuses two ranks on one GPU); HINT: use "
      "--nproc-per-node {}, check CUDA_VISIBLE_DEVICES, or use --dist.backend=gloo (host-staged, "
      "slow: for testing the sharded path on fewer GPUs)",
      env.local_world, visible_gpus, visible_gpus);
}

std::unique_ptr<Ops> make_rank_ops(const std::string& device_choice, const DistEnv& env) {
  const int gpus = visible_gpu_count();
  const bool wants_cuda = device_choice == "cuda" || (device_choice == "auto" && gpus > 0);
  return make_ops(device_choice, wants_cuda && gpus > 0 ? env.local_rank % gpus : 0);
}

DistWorld connect_world(const DistEnv& env, Ops& ops, const std::string& backend) {
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
    if (env.master_addr.empty() || env.master_port <= 0) {
      fail(
          "WORLD_SIZE={} but MASTER_ADDR/MASTER_PORT are not set; HINT: start workers with "
          "`shardtrain launch`, or set SHARDTRAIN_STORE_DIR to a directory all ranks share",
          env.world);
    }
    world.store =
        std::make_unique<TcpStoreClient>(env.master_addr, env.master_port, std::chrono::minutes(5));
  }
  // Keys scoped by restart, so a restarted group never reads the previous group's addresses.
  const std::string prefix = "shardtrain/restart" + std::to_string(env.restart_count) + "/world";
  switch (choice) {
    case WorldComm::kNccl:
      world.comm = make_nccl_comm(*world.store, env.rank, env.world, prefix, ops);
      break;
    case WorldComm::kGloo:
      world.comm = make_gloo_comm(*world.store, env.rank, env.world, prefix);
      break;
    case WorldComm::kHostStagedGloo:
      if (env.rank == 0) {
        log::info(
            "dist: {}: collectives go through Gloo staged via host memory, each rank on GPU "
            "LOCAL_RANK % {}; a correctness/testing path, much slower than NCCL",
            backend == "gloo"
                ? std::string("dist.backend = gloo")
                : fmt::format("{} ranks on this node but {} visible GPU(s)", env.local_world, gpus),
            gpus);
      }
      world.comm =
          make_host_staged_comm(make_gloo_comm(*world.store, env.rank, env.world, prefix), ops);
      break;
    case WorldComm::kSingle:
      break;
  }
  return world;
}

}  // namespace shardtrain
