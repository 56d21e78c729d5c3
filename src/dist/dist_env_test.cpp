// Choosing the world Comm (dist/dist_env.h choose_world_comm) from dist.backend, the compute
// device and this node's ranks against its GPUs; a pure function, so GPU counts are given.
#include "dist/dist_env.h"

#include <gtest/gtest.h>

#include "core/testing/test_support.h"
#include "ops/backend.h"

namespace shardtrain {
namespace {

using testing::error_of;

WorkerEnv node_with(int local_world, int nodes = 1) {
  WorkerEnv env;
  env.local_world = local_world;
  env.world = local_world * nodes;
  return env;
}

TEST(ChooseWorldComm, AutoPicksNcclForOneGpuPerRankAndHostStagedGlooForSharedGpus) {
  EXPECT_EQ(choose_world_comm(CommBackendChoice::kAuto, Device::kCuda, node_with(2), 2), WorldComm::kNccl);
  EXPECT_EQ(choose_world_comm(CommBackendChoice::kAuto, Device::kCuda, node_with(4, 2), 8), WorldComm::kNccl);
  EXPECT_EQ(choose_world_comm(CommBackendChoice::kAuto, Device::kCuda, node_with(2), 1), WorldComm::kHostStagedGloo);
  EXPECT_EQ(choose_world_comm(CommBackendChoice::kAuto, Device::kCuda, node_with(8, 2), 4),
            WorldComm::kHostStagedGloo);
  EXPECT_EQ(choose_world_comm(CommBackendChoice::kAuto, Device::kCpu, node_with(4), 0), WorldComm::kGloo);
  EXPECT_EQ(choose_world_comm(CommBackendChoice::kAuto, Device::kCuda, node_with(1), 1), WorldComm::kSingle);
}

TEST(ChooseWorldComm, GlooOnCudaRanksIsHostStagedEvenWithAGpuPerRank) {
  EXPECT_EQ(choose_world_comm(CommBackendChoice::kGloo, Device::kCuda, node_with(2), 2), WorldComm::kHostStagedGloo);
  EXPECT_EQ(choose_world_comm(CommBackendChoice::kGloo, Device::kCuda, node_with(2), 1), WorldComm::kHostStagedGloo);
  EXPECT_EQ(choose_world_comm(CommBackendChoice::kGloo, Device::kCpu, node_with(2), 0), WorldComm::kGloo);
  EXPECT_EQ(choose_world_comm(CommBackendChoice::kGloo, Device::kCuda, node_with(1), 1), WorldComm::kSingle);
}

TEST(ChooseWorldComm, ExplicitNcclWithSharedGpusIsRefusedWithTheFix) {
  EXPECT_EQ(choose_world_comm(CommBackendChoice::kNccl, Device::kCuda, node_with(2), 2), WorldComm::kNccl);
  const std::string message =
      error_of([] { choose_world_comm(CommBackendChoice::kNccl, Device::kCuda, node_with(2), 1); });
  EXPECT_NE(message.find("2 ranks on this node"), std::string::npos) << message;
  EXPECT_NE(message.find("1 GPU(s) visible"), std::string::npos) << message;
  EXPECT_NE(message.find("--dist.backend=gloo"), std::string::npos) << message;
  EXPECT_NE(message.find("--nproc-per-node 1"), std::string::npos) << message;
}

TEST(ChooseWorldComm, NcclOnCpuAndUnknownValuesNameTheKey) {
  const std::string on_cpu =
      error_of([] { choose_world_comm(CommBackendChoice::kNccl, Device::kCpu, node_with(2), 0); });
  EXPECT_NE(on_cpu.find("'dist.backend'"), std::string::npos) << on_cpu;
  EXPECT_NE(on_cpu.find("--train.device=cuda"), std::string::npos) << on_cpu;
  // Also for one process: the config contradicts itself whatever the world size.
  EXPECT_NE(error_of([] { choose_world_comm(CommBackendChoice::kNccl, Device::kCpu, node_with(1), 0); }), "");
  const std::string unknown =
      error_of([] { parse_choice(comm_backend_names(), "mpi", "dist.backend"); });
  EXPECT_NE(unknown.find("dist.backend must be one of auto, nccl, gloo; got \"mpi\""),
            std::string::npos)
      << unknown;
}

TEST(MakeRankOps, CpuRanksNeedNoGpu) {
  WorkerEnv env = node_with(4);
  env.rank = env.local_rank = 3;
  EXPECT_EQ(make_rank_ops(DeviceChoice::kCpu, env)->device(), Device::kCpu);
  if (visible_gpu_count() == 0) {
    EXPECT_EQ(make_rank_ops(DeviceChoice::kAuto, env)->device(), Device::kCpu);
  }
}

}  // namespace
}  // namespace shardtrain
