// Which setting `plan --gpu-memory` proposes (train/memory_fit.h): the smallest that fits is the
// one needing the least memory, not the first in the speed order (Qwen2.5-1.5B on 8 x L4 at a
// long sequence: FULL_SHARD + full checkpointing, not SHARD_GRAD_OP + selective), the fastest is
// still the first in that order, and the L40S is known by name.
#include <gtest/gtest.h>

#include <string>

#include "train/memory_fit.h"

namespace shardtrain {
namespace {

ModelConfig shape(const std::string& name) {
  return read_hf_config(std::string(SHARDTRAIN_SOURCE_DIR) + "/bench/shapes/" + name +
                        "/config.json");
}

TEST(MemoryFitChoice, SmallestIsTheLeastMemoryAndFastestTheFirstInSpeedOrder) {
  // 8 ranks, 4 per node (two g6.12xlarge), micro-batch 1 at seq 8192: no setting without
  // checkpointing fits an L4.
  const MemoryJob job{shape("qwen2.5-1.5b"), 8, 4, 0, 1, 8192, false, DType::kBF16};
  const std::vector<MemoryVerdict> verdicts = memory_verdicts(job, parse_gpu_memory("l4"));
  const MemoryVerdict* smallest = smallest_fitting(verdicts);
  const MemoryVerdict* fastest = fastest_fitting(verdicts);
  ASSERT_NE(smallest, nullptr);
  ASSERT_NE(fastest, nullptr);
  EXPECT_EQ(smallest->setting.strategy, FsdpStrategy::kFullShard);
  EXPECT_EQ(smallest->setting.checkpointing, ActivationCheckpointing::kFull);
  for (const MemoryVerdict& v : verdicts) {
    if (v.possible && v.fits) EXPECT_LE(smallest->needed_bytes, v.needed_bytes);
  }
  EXPECT_NE(fastest, smallest);
  EXPECT_LT(smallest->needed_bytes, fastest->needed_bytes);
  EXPECT_NE(fastest->setting.checkpointing, ActivationCheckpointing::kNone);    // none fits without
  EXPECT_EQ(smallest_fitting(memory_verdicts(job, size_t{1} << 30)), nullptr);  // 1 GiB: nothing
}

TEST(MemoryFitChoice, L40sIsKnownByName) {
  EXPECT_EQ(parse_gpu_memory("l40s"), size_t{46068} << 20);
  EXPECT_EQ(parse_gpu_memory("L40S"), size_t{46068} << 20);
}

}  // namespace
}  // namespace shardtrain
