// Memory verdicts per GPU (train/memory_fit.h) on real model shapes (bench/shapes/*/config.json):
// the plan's bytes match the measured H200 peak it was checked against, the verdict order and
// the smallest fitting setting follow the documented preference, and bad sizes are errors.
#include "train/memory_fit.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "core/error.h"

namespace shardtrain {
namespace {

ModelConfig shape(const std::string& name) {
  return read_hf_config(std::string(SHARDTRAIN_SOURCE_DIR) + "/bench/shapes/" + name +
                        "/config.json");
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

TEST(MemoryFit, ParsesSizesAndGpuNames) {
  EXPECT_EQ(parse_gpu_memory("24GiB"), size_t{24} << 30);
  EXPECT_EQ(parse_gpu_memory("80GB"), size_t{80'000'000'000});
  EXPECT_EQ(parse_gpu_memory("23034MiB"), size_t{23034} << 20);
  EXPECT_EQ(parse_gpu_memory("0.5TiB"), size_t{512} << 30);
  EXPECT_EQ(parse_gpu_memory("L4"), size_t{23034} << 20);
  EXPECT_EQ(parse_gpu_memory("a100-80gb"), size_t{81920} << 20);
  EXPECT_EQ(parse_gpu_memory("h200"), size_t{143771} << 20);
  for (const char* bad : {"", "24", "24 GiB", "GiB", "1e3GiB", "-1GiB", "0GiB", "v100", "9e9TiB"}) {
    EXPECT_THROW(parse_gpu_memory(bad), Error) << bad;
  }
}

// bench/RESULTS.md session 5 (2026-11-30): nvidia-smi's peak for Qwen2.5-1.5B (seq 4096,
// micro-batch 2, one H200) was 43.8 GiB, 29.3 GiB with full checkpointing. The plan stays just
// under the peak (it leaves out the CUDA context and workspaces), and what a verdict asks of the
// GPU (plan + 5% + the reserve) covers it.
TEST(MemoryFit, NeededBytesCoverTheMeasuredH200Peak) {
  const MemoryJob job{shape("qwen2.5-1.5b"), 1, 1, 0, 2, 4096, false, DType::kBF16};
  for (const auto& [mode, measured_gib] : {std::pair<const char*, double>{"none", 43.8},
                                           std::pair<const char*, double>{"full", 29.3}}) {
    const size_t plan = plan_bytes(job, {FsdpStrategy::kFullShard, mode});
    EXPECT_LT(plan / kGiB, measured_gib) << mode;
    EXPECT_GT(plan / kGiB, 0.95 * measured_gib) << mode;
    EXPECT_GT(device_bytes_needed(plan) / kGiB, measured_gib) << mode;
    EXPECT_LT(device_bytes_needed(plan) / kGiB, 1.1 * measured_gib) << mode;
  }
  EXPECT_EQ(device_bytes_needed(size_t{20} << 30),
            (size_t{20} << 30) + (size_t{1} << 30) + kDeviceReserveBytes);
}

TEST(MemoryFit, SmallestSettingFollowsThePreferenceOrder) {
  // Qwen2.5-1.5B, seq 4096, micro-batch 1 on 8 ranks of 4 per node against an L4.
  const MemoryJob job{shape("qwen2.5-1.5b"), 8, 4, 0, 1, 4096, false, DType::kBF16};
  const std::vector<MemoryVerdict> verdicts = memory_verdicts(job, parse_gpu_memory("l4"));
  ASSERT_EQ(verdicts.size(), 12u);
  EXPECT_EQ(verdicts.front().setting.checkpointing, "none");
  EXPECT_EQ(verdicts.front().setting.strategy, FsdpStrategy::kNoShard);
  EXPECT_EQ(verdicts.back().setting.checkpointing, "full");
  EXPECT_EQ(verdicts.back().setting.strategy, FsdpStrategy::kFullShard);
  const MemoryVerdict* fit = smallest_fitting(verdicts);
  ASSERT_NE(fit, nullptr);
  // Nothing before it fits; it fits; more sharding or checkpointing never needs more memory.
  for (const MemoryVerdict& v : verdicts) {
    if (&v == fit) break;
    EXPECT_FALSE(v.fits) << fsdp_strategy_name(v.setting.strategy) << " "
                         << v.setting.checkpointing;
  }
  EXPECT_TRUE(fit->fits);
  EXPECT_LE(fit->needed_bytes, parse_gpu_memory("l4"));
  for (size_t i = 0; i + 4 < verdicts.size(); ++i) {
    EXPECT_LE(verdicts[i + 4].plan_bytes, verdicts[i].plan_bytes);  // more checkpointing
  }
  // HYBRID_SHARD groups the 4 ranks of a node; FULL_SHARD all 8.
  EXPECT_EQ(verdicts[2].group, 4);
  EXPECT_EQ(verdicts[3].group, 8);
}

TEST(MemoryFit, TheTrainerNamesTheSettingThatFits) {
  const MemoryJob job{shape("qwen2.5-1.5b"), 1, 1, 0, 2, 4096, false, DType::kBF16};
  const size_t free = size_t{40} << 30;  // 42 GiB plan without checkpointing does not fit
  EXPECT_NO_THROW(require_job_fits_device(job, {FsdpStrategy::kFullShard, "full"}, free, 1, "GPU"));
  try {
    require_job_fits_device(job, {FsdpStrategy::kFullShard, "none"}, free, 1, "NVIDIA L40S");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("NVIDIA L40S has 40.00 GiB free"), std::string::npos) << message;
    EXPECT_NE(message.find("HINT: --fsdp.strategy=NO_SHARD --train.activation_checkpointing="
                           "selective fits"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
  // Shared by 4 ranks, 40 GiB is 10 GiB each: nothing fits at micro-batch 2.
  try {
    require_job_fits_device(job, {FsdpStrategy::kFullShard, "full"}, free, 4, "GPU 0");
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("4 ranks share it"), std::string::npos) << message;
    EXPECT_NE(message.find("lower train.micro_batch (now 2)"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace shardtrain
