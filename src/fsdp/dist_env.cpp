#include "fsdp/dist_env.h"

#include <cstdlib>

#include "core/error.h"
#include "dist/file_store.h"
#include "dist/gloo_comm.h"
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

std::unique_ptr<Ops> make_rank_ops(const std::string& device_choice, const DistEnv& env) {
  const int gpus = visible_gpu_count();
  const bool wants_cuda = device_choice == "cuda" || (device_choice == "auto" && gpus > 0);
  if (wants_cuda && gpus > 0 && env.local_world > gpus) {
    fail("{} ranks on this node (LOCAL_WORLD_SIZE) but {} GPU(s) visible: NCCL needs one GPU per "
         "rank; HINT: use --nproc-per-node {} (or gpu), check CUDA_VISIBLE_DEVICES, or train on "
         "the CPU with --train.device=cpu",
         env.local_world, gpus, gpus);
  }
  return make_ops(device_choice, wants_cuda ? env.local_rank : 0);
}

DistWorld connect_world(const DistEnv& env, Ops& ops) {
  DistWorld world;
  if (env.world == 1) {
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
  if (ops.device() == Device::kCuda) {
    world.comm = make_nccl_comm(*world.store, env.rank, env.world, prefix, ops);
  } else {
    world.comm = make_gloo_comm(*world.store, env.rank, env.world, prefix);
  }
  return world;
}

}  // namespace shardtrain
