// Mesh over real Gloo ranks (threads of one process, a FileStore rendezvous): the groups each
// rank lands in, and the collectives train/ calls (sums that keep ~48 bits, agreement counts,
// barrier).
#include "dist/mesh.h"

#include <gtest/gtest.h>

#include <vector>

#include "core/testing/test_support.h"
#include "dist/file_store.h"
#include "dist/gloo_comm.h"
#include "dist/single_rank_comm.h"
#include "ops/backend.h"

namespace shardtrain {
namespace {

// Runs body(mesh) on `world` Gloo ranks with shard groups of `group`.
void run_mesh(int world, int group, const std::function<void(Mesh&)>& body,
              int expert_parallel = 1) {
  testing::TempDir dir("shardtrain_mesh_");
  FileStore store(dir.path());
  testing::run_threads(world, [&](int rank) {
    std::unique_ptr<Ops> ops = make_ops(DeviceChoice::kCpu);
    std::unique_ptr<Comm> comm = make_gloo_comm(store, rank, world, "mesh");
    Mesh mesh(*comm, group, *ops, expert_parallel);
    body(mesh);
  });
}

// The world ranks of this rank's group: an all-reduce of one-hot vectors over it.
std::vector<int> members(Comm& group, int world_rank, int world) {
  std::vector<float> hot(world, 0.0f);
  hot[world_rank] = 1.0f;
  group.all_reduce(Tensor(hot.data(), DType::kF32, {world}), ReduceOp::kSum);
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) {
    if (hot[r] == 1.0f) ranks.push_back(r);
  }
  return ranks;
}

TEST(Mesh, HybridGroupsAreConsecutiveShardsAndStridedReplicas) {
  run_mesh(4, 2, [](Mesh& mesh) {
    const int r = mesh.world_rank();
    EXPECT_EQ(mesh.world_size(), 4);
    EXPECT_EQ(mesh.shard_size(), 2);
    EXPECT_EQ(mesh.replicate_size(), 2);
    EXPECT_EQ(mesh.shard_rank(), r % 2);
    EXPECT_EQ(mesh.replicate_rank(), r / 2);
    const std::vector<int> shard = members(mesh.shard(), r, 4);
    const std::vector<int> replicate = members(mesh.replicate(), r, 4);
    EXPECT_EQ(shard, (r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}));
    EXPECT_EQ(replicate, (r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}));
  });
}

TEST(Mesh, ExpertGroupsAreConsecutiveAndExpertShardsJoinTheSameExpertRank) {
  // FULL_SHARD on 4 ranks, 2-way expert parallel: experts {0,1}, {2,3}; same experts {0,2}, {1,3}.
  run_mesh(
      4, 4,
      [](Mesh& mesh) {
        const int r = mesh.world_rank();
        EXPECT_EQ(mesh.expert_size(), 2);
        EXPECT_EQ(mesh.expert_rank(), r % 2);
        EXPECT_EQ(mesh.expert_shard_size(), 2);
        EXPECT_EQ(members(mesh.expert(), r, 4),
                  (r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}));
        EXPECT_EQ(members(mesh.expert_shard(), r, 4),
                  (r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}));
      },
      2);
  // HYBRID_SHARD 2 x 2 with expert parallel 2: the expert group is the shard group, each expert
  // held whole by one rank of it and replicated across the replicate group.
  run_mesh(
      4, 2,
      [](Mesh& mesh) {
        const int r = mesh.world_rank();
        EXPECT_EQ(members(mesh.expert(), r, 4),
                  (r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}));
        EXPECT_EQ(mesh.expert_shard_size(), 1);
      },
      2);
  // 4-way on 4 ranks: the world is the expert group.
  run_mesh(
      4, 4,
      [](Mesh& mesh) {
        EXPECT_EQ(&mesh.expert(), &mesh.world());
        EXPECT_EQ(mesh.expert_rank(), mesh.world_rank());
        EXPECT_EQ(mesh.expert_shard_size(), 1);
      },
      4);
  // Without expert parallelism the expert shard group is the shard group.
  run_mesh(2, 2, [](Mesh& mesh) {
    EXPECT_EQ(mesh.expert_size(), 1);
    EXPECT_EQ(&mesh.expert_shard(), &mesh.shard());
  });
}

TEST(Mesh, FullShardAndNoShardUseTheWorldAndSingleRankGroups) {
  run_mesh(2, 2, [](Mesh& mesh) {
    EXPECT_EQ(&mesh.shard(), &mesh.world());
    EXPECT_EQ(mesh.replicate_size(), 1);
    EXPECT_EQ(mesh.shard_rank(), mesh.world_rank());
  });
  run_mesh(2, 1, [](Mesh& mesh) {
    EXPECT_EQ(&mesh.replicate(), &mesh.world());
    EXPECT_EQ(mesh.shard_size(), 1);
    EXPECT_EQ(mesh.replicate_rank(), mesh.world_rank());
  });
}

TEST(Mesh, SumsKeepMoreThanFloatPrecision) {
  run_mesh(4, 4, [](Mesh& mesh) {
    const int r = mesh.world_rank();
    // 1e8 + 0.25 is not a float (spacing 8 there); as two floats it survives the all-reduce.
    const std::vector<double> sums =
        mesh.sum({1e8 + 0.25, static_cast<double>(r), -0.5 * r}, "test sums");
    ASSERT_EQ(sums.size(), 3u);
    EXPECT_EQ(sums[0], 4e8 + 1.0);
    EXPECT_EQ(sums[1], 6.0);
    EXPECT_EQ(sums[2], -3.0);
    EXPECT_EQ(mesh.sum(1.0 + r, "test sum"), 10.0);
  });
}

TEST(Mesh, AgreementCountsTheRanksThatSayYes) {
  run_mesh(4, 2, [](Mesh& mesh) {
    const int r = mesh.world_rank();
    EXPECT_EQ(mesh.count(r == 1 || r == 3, "test count"), 2);
    EXPECT_TRUE(mesh.any(r == 2, "test any"));
    EXPECT_FALSE(mesh.any(false, "test any"));
    EXPECT_FALSE(mesh.all(r != 0, "test all"));
    EXPECT_TRUE(mesh.all(true, "test all"));
    mesh.barrier();
  });
}

TEST(MeshDeathTest, AGroupThatDoesNotDivideTheWorldIsABug) {
  std::unique_ptr<Ops> ops = make_ops(DeviceChoice::kCpu);
  std::unique_ptr<Comm> world = make_single_rank_comm();
  EXPECT_DEATH(Mesh(*world, 2, *ops), "group 2 world 1");
}

}  // namespace
}  // namespace shardtrain
