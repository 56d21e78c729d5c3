// Memory verdicts per GPU (train/memory_fit.h) on real model shapes (bench/shapes/*/config.json):
// the plan's bytes match the measured H200 peak it was checked against, the verdict order and
// the fastest fitting setting follow the documented preference, and bad sizes are errors.
#include "train/memory_fit.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "model/decoder_model.h"

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

// bench/RESULTS.md, 2026-11-30: nvidia-smi's peak for Qwen2.5-1.5B (seq 4096,
// micro-batch 2, one H200) was 43.8 GiB, 29.3 GiB with full checkpointing. The plan stays just
// under the peak (it leaves out the CUDA context and workspaces), and what a verdict asks of the
// GPU (plan + 5% + the reserve) covers it.
TEST(MemoryFit, NeededBytesCoverTheMeasuredH200Peak) {
  const MemoryJob job{shape("qwen2.5-1.5b"), 1, 1, 0, 2, 4096, false, DType::kBF16};
  for (const auto& [mode, measured_gib] :
       {std::pair<ActivationCheckpointing, double>{ActivationCheckpointing::kNone, 43.8},
        std::pair<ActivationCheckpointing, double>{ActivationCheckpointing::kFull, 29.3}}) {
    const std::string name = choice_name(checkpointing_names(), mode);
    const size_t plan = plan_bytes(job, {FsdpStrategy::kFullShard, mode});
    EXPECT_LT(plan / kGiB, measured_gib) << name;
    EXPECT_GT(plan / kGiB, 0.95 * measured_gib) << name;
    EXPECT_GT(device_bytes_needed(plan) / kGiB, measured_gib) << name;
    EXPECT_LT(device_bytes_needed(plan) / kGiB, 1.1 * measured_gib) << name;
  }
  EXPECT_EQ(device_bytes_needed(size_t{20} << 30),
            (size_t{20} << 30) + (size_t{1} << 30) + kDeviceReserveBytes);
}

TEST(MemoryFit, FastestSettingFollowsThePreferenceOrder) {
  // Qwen2.5-1.5B, seq 4096, micro-batch 1 on 8 ranks of 4 per node against an L4.
  const MemoryJob job{shape("qwen2.5-1.5b"), 8, 4, 0, 1, 4096, false, DType::kBF16};
  const std::vector<MemoryVerdict> verdicts = memory_verdicts(job, parse_gpu_memory("l4"));
  ASSERT_EQ(verdicts.size(), 12u);
  EXPECT_EQ(verdicts.front().setting.checkpointing, ActivationCheckpointing::kNone);
  EXPECT_EQ(verdicts.front().setting.strategy, FsdpStrategy::kNoShard);
  EXPECT_EQ(verdicts.back().setting.checkpointing, ActivationCheckpointing::kFull);
  EXPECT_EQ(verdicts.back().setting.strategy, FsdpStrategy::kFullShard);
  const MemoryVerdict* fit = fastest_fitting(verdicts);
  ASSERT_NE(fit, nullptr);
  // Nothing before it fits; it fits; more sharding or checkpointing never needs more memory.
  for (const MemoryVerdict& v : verdicts) {
    if (&v == fit) break;
    EXPECT_FALSE(v.fits) << fsdp_strategy_name(v.setting.strategy) << " "
                         << choice_name(checkpointing_names(), v.setting.checkpointing);
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
  EXPECT_NO_THROW(require_job_fits_device(
      job, {FsdpStrategy::kFullShard, ActivationCheckpointing::kFull}, free, 1, "GPU"));
  const std::string message = testing::error_of([&] {
    require_job_fits_device(job, {FsdpStrategy::kFullShard, ActivationCheckpointing::kNone}, free,
                            1, "NVIDIA L40S");
  });
  EXPECT_NE(message.find("NVIDIA L40S has 40.00 GiB free"), std::string::npos) << message;
  EXPECT_NE(message.find("HINT: --fsdp.strategy=NO_SHARD --train.activation_checkpointing="
                         "selective fits"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find('\n'), std::string::npos);
  // Shared by 4 ranks, 40 GiB is 10 GiB each: nothing fits at micro-batch 2.
  const std::string shared = testing::error_of([&] {
    require_job_fits_device(job, {FsdpStrategy::kFullShard, ActivationCheckpointing::kFull}, free,
                            4, "GPU 0");
  });
  EXPECT_NE(shared.find("4 ranks share it"), std::string::npos) << shared;
  EXPECT_NE(shared.find("lower train.micro_batch (now 2)"), std::string::npos) << shared;
}

// Llama-2-7B on one H200 (micro-batch 1, seq 4096, full checkpointing), by category, from the
// shapes: root = 2 x vocab x hidden + hidden, block = 4 hidden^2 + 3 hidden x intermediate +
// 2 hidden, both multiples of 64 (no padding). bench/RESULTS.md: nvidia-smi peak 116.4 GiB with
// the persistent bf16 copy (plan 115.3); PyTorch FSDP2 106.8 GiB.
TEST(MemoryFit, Llama2SevenBOnOneGpuByCategory) {
  const int64_t C = 4096, F = 11008, V = 32000, L = 32, N = 4096;
  const size_t root = 2 * V * C + C, block = 4 * C * C + 3 * C * F + 2 * C;
  const size_t P = root + L * block;
  ASSERT_EQ(P, 6738415616u);
  MemoryJob job{shape("llama2-7b"), 1, 1, 0, 1, N, false, DType::kBF16};
  const MemorySetting full{FsdpStrategy::kFullShard, ActivationCheckpointing::kFull};

  job.compute_copy = ComputeCopyChoice::kKeep;
  FsdpMemory m = plan_fsdp_memory(job, full);
  EXPECT_EQ(m.master_bytes, 4 * P);
  EXPECT_EQ(m.moment_bytes, 8 * P);
  EXPECT_EQ(m.grad_shard_bytes, 4 * P);
  EXPECT_EQ(m.compute_shard_bytes, 2 * P);  // the 12.55 GiB persistent copy
  EXPECT_EQ(m.gathered_peak_bytes, 0u);
  EXPECT_EQ(m.full_grad_peak_bytes, 0u);
  const DecoderModel::ActivationBytes acts = DecoderModel::activation_breakdown_for(
      job.model, 1, N, DType::kBF16, DecoderModel::Checkpointing::kFull);
  EXPECT_EQ(acts.checkpoints, L * (N * C * 2 + Arena::kAlignment));  // each block's bf16 input
  EXPECT_EQ(acts.head_logits, static_cast<size_t>(N * V * 2));       // one chunk of 4096 rows
  EXPECT_EQ(acts.total(), DecoderModel::activation_bytes_for(job.model, 1, N, DType::kBF16,
                                                           DecoderModel::Checkpointing::kFull));
  const size_t keep_total = plan_bytes(job, full);
  EXPECT_EQ(keep_total, 18 * P + acts.total());
  EXPECT_GT(keep_total / kGiB, 0.95 * 116.4);  // within 5% of the measured peak
  EXPECT_LT(keep_total / kGiB, 116.4);

  job.compute_copy =
      ComputeCopyChoice::kOnDemand;  // the root and one block in bf16 instead of the whole copy
  m = plan_fsdp_memory(job, full);
  EXPECT_EQ(m.compute_shard_bytes, 0u);
  EXPECT_EQ(m.gathered_peak_bytes, 2 * (root + block));
  EXPECT_EQ(plan_bytes(job, full), 16 * P + 2 * (root + block) + acts.total());
  EXPECT_LT(plan_bytes(job, full) / kGiB, 106.8 - 2);  // under PyTorch's peak with room

  job.update_in_backward = true;  // no grad shard; the root's and one block's fp32 grads
  m = plan_fsdp_memory(job, full);
  EXPECT_EQ(m.grad_shard_bytes, 0u);
  EXPECT_EQ(m.full_grad_peak_bytes, 4 * (root + block));
  EXPECT_EQ(plan_bytes(job, full), 12 * P + 6 * (root + block) + acts.total());
  EXPECT_LT(plan_bytes(job, full) / kGiB, 0.8 * 106.8);

  // auto: on demand for 7B on an H200 (the copy would take it past 3/4), kept for Qwen2.5-1.5B
  // there, kept with gradient accumulation while the job fits, kept when the GPU is unknown,
  // and always kept when the shard group is larger.
  job.compute_copy = ComputeCopyChoice::kAuto;
  job.update_in_backward = false;
  job.capacity_bytes = parse_gpu_memory("h200");
  EXPECT_EQ(resolve_compute_copy(job, full), ComputeCopy::kOnDemand);
  MemoryJob qwen{shape("qwen2.5-1.5b"), 1, 1, 0, 2, 4096, false, DType::kBF16};
  qwen.capacity_bytes = parse_gpu_memory("h200");
  EXPECT_EQ(resolve_compute_copy(qwen, {FsdpStrategy::kFullShard, ActivationCheckpointing::kNone}),
            ComputeCopy::kKeep);
  // The MoE bench shape (5.6B parameters): past 3/4 of an H200 with the copy, so on demand at
  // one micro-batch a step; with 8 micro-batches a step the copy is kept, as the job still fits.
  // (No activation checkpointing, as the bench runs it.)
  const MemorySetting no_ckpt{FsdpStrategy::kFullShard, ActivationCheckpointing::kNone};
  MemoryJob moe{shape("qwen3-30b-a3b-8l"), 1, 1, 0, 1, 4096, false, DType::kBF16};
  moe.capacity_bytes = parse_gpu_memory("h200");
  EXPECT_EQ(resolve_compute_copy(moe, no_ckpt), ComputeCopy::kOnDemand);
  moe.grad_accum = 8;
  EXPECT_EQ(resolve_compute_copy(moe, no_ckpt), ComputeCopy::kKeep);
  EXPECT_LE(device_bytes_needed(plan_bytes(moe, no_ckpt)), moe.capacity_bytes);
  moe.capacity_bytes = parse_gpu_memory("h100");  // too small with the copy: on demand
  EXPECT_EQ(resolve_compute_copy(moe, no_ckpt), ComputeCopy::kOnDemand);
  job.capacity_bytes = 0;
  EXPECT_EQ(resolve_compute_copy(job, full), ComputeCopy::kKeep);
  MemoryJob eight{shape("llama2-7b"), 8, 8, 0, 1, N, false, DType::kBF16};
  eight.compute_copy = ComputeCopyChoice::kOnDemand;
  eight.capacity_bytes = parse_gpu_memory("l4");
  EXPECT_EQ(resolve_compute_copy(eight, full), ComputeCopy::kKeep);
  EXPECT_EQ(plan_fsdp_memory(eight, full).compute_shard_bytes, 2 * P / 8);
}

}  // namespace
}  // namespace shardtrain
