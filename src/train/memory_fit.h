// Does a job fit a GPU? The per-rank memory of every FSDP strategy x activation-checkpointing
// mode (fsdp/shard_plan.h estimate_fsdp_memory + DecoderModel::activation_bytes_for, the same
// arithmetic the run allocates with), compared with a GPU's memory, and the smallest change of
// setting that fits. Used by `shardtrain plan --gpu-memory` (no GPU needed) and by the trainer,
// which compares the configured setting with the device's free memory before allocating.
//
// A setting fits when plan bytes + 5% + kDeviceReserveBytes <= the GPU's memory: the reserve
// stands for what the plan does not count (CUDA context, cuBLASLt workspace, NCCL buffers,
// allocator rounding; on one H200 nvidia-smi's peak was the plan + 0.8 GiB, bench/RESULTS.md).
// "Fastest setting" = the first that fits in this order (least speed given up first):
// activation_checkpointing none, selective, full; within each, fsdp.strategy NO_SHARD,
// SHARD_GRAD_OP, HYBRID_SHARD (unless its group is FULL_SHARD's: one node), FULL_SHARD.
// "Smallest setting" = the one that fits with the least memory.
//
// fsdp.compute_copy (G = 1 only, fsdp/shard_plan.h ComputeCopy): keep | on_demand | auto. auto
// keeps the persistent bf16 copy (faster: no casts in forward and backward) unless the job with
// it needs more than 3/4 of the GPU's memory (MemoryJob::capacity_bytes; unknown = keep); then
// the copy is built on demand (the same values, 2 bytes per parameter less).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "fsdp/fsdp_strategy.h"
#include "fsdp/shard_plan.h"
#include "model/hf_config.h"
#include "train/train_config.h"

namespace shardtrain {

constexpr size_t kDeviceReserveBytes = size_t{3} << 29;  // 1.5 GiB

// What one rank's memory depends on.
struct MemoryJob {
  ModelConfig model;
  int world = 1, local_world = 1;
  int shard_group_size = 0;  // fsdp.shard_group_size (HYBRID_SHARD); 0 = local world
  int64_t micro_batch = 1, seq_len = 1;
  bool reduce_on_last_micro_batch = false;
  DType activation_dtype = DType::kBF16;
  ComputeCopyChoice compute_copy = ComputeCopyChoice::kAuto;  // fsdp.compute_copy
  bool update_in_backward = false;    // optim.update_in_backward
  bool fp8 = false;                   // train.precision = "fp8": plus model/fp8_memory.h's bytes
  // fp8.all_gather (with fp8): the e4m3 shards of the FP8 blocks, all but the first and last
  // fp8_keep_bf16_layers (fsdp/shard_plan.h fp8_shard, and one gathered block's bytes)
  bool fp8_all_gather = false;
  int64_t fp8_keep_bf16_layers = 0;
  size_t capacity_bytes = 0;          // the GPU memory auto compares with; 0 = unknown (keep)
  int64_t grad_accum = 1;             // micro-batches per optimizer step (auto's compute copy)
  // [lora]: a frozen bf16 base (no master, moments or gradient) and trainable adapters, whose
  // shared scratch adds to the activations (model/lora_config.h).
  LoraConfig lora{};
  // fsdp.expert_parallel: applied to each strategy whose shard group it divides (1 elsewhere);
  // units of experts and the all-to-all buffers (model/moe_memory.h) follow it.
  int expert_parallel = 1;
};

// The expert parallelism `job` runs with at a shard group of `group`: job.expert_parallel when it
// divides the group and the model's experts, else 1.
int expert_parallel_at(const MemoryJob& job, int group);

struct MemorySetting {
  FsdpStrategy strategy = FsdpStrategy::kFullShard;
  ActivationCheckpointing checkpointing = ActivationCheckpointing::kNone;  // train.activation_*
};

struct MemoryVerdict {
  MemorySetting setting;
  bool possible = true;  // false: the strategy is impossible at this world size (why_not)
  std::string why_not;
  int group = 0;            // shard group size
  size_t plan_bytes = 0;    // FSDP state + activations
  size_t needed_bytes = 0;  // plan_bytes + 5% + kDeviceReserveBytes
  bool fits = false;
};

// Bytes a GPU must offer for `plan_bytes` of planned memory.
size_t device_bytes_needed(size_t plan_bytes);
// fsdp.compute_copy for `setting`, auto resolved as the header says (kKeep when the shard
// group is larger than one: the option does not apply there).
ComputeCopy resolve_compute_copy(const MemoryJob& job, const MemorySetting& setting);
// The FSDP layout of `setting` and the resolved compute copy.
FsdpMemory plan_fsdp_memory(const MemoryJob& job, const MemorySetting& setting);
// One rank's planned bytes for `setting` (throws Error when the strategy is impossible).
size_t plan_bytes(const MemoryJob& job, const MemorySetting& setting);
// Every strategy x checkpointing mode, in the preference order above, against `capacity`
// (which auto compute copies are resolved against too).
std::vector<MemoryVerdict> memory_verdicts(const MemoryJob& job, size_t capacity);
// The fitting verdict that needs the least memory (ties: the earlier in preference order); null
// when none fits. HYBRID_SHARD whose group is FULL_SHARD's (one node) is named FULL_SHARD.
const MemoryVerdict* smallest_fitting(const std::vector<MemoryVerdict>& verdicts);
// The first fitting verdict in preference order (the least speed given up); null when none fits.
const MemoryVerdict* fastest_fitting(const std::vector<MemoryVerdict>& verdicts);

// `--gpu-memory`: a size ("24GiB", "80GB", "23034MiB", "0.5TiB"; GB/MB are powers of 10, GiB/MiB
// of 2) or a GPU name (l4, a10g, l40s, a100-40gb, a100-80gb, h100, h200: their usable memory as
// nvidia-smi reports it). Throws Error naming --gpu-memory for anything else.
size_t parse_gpu_memory(const std::string& text);

// The trainer's check before it allocates: throws Error when `configured` needs more than
// `free_bytes` (the device's free memory, shared by `ranks_per_gpu` ranks), naming the GPU, the
// bytes, and the smallest setting that fits (or what else to change when none does).
void require_job_fits_device(const MemoryJob& job, const MemorySetting& configured,
                             size_t free_bytes, int ranks_per_gpu, const std::string& gpu);

// The Trainer's call, before it allocates anything: on a CUDA backend (`device`), the configured
// fsdp.strategy and train.activation_checkpointing against the current GPU's free memory
// (require_job_fits_device); nothing on the CPU.
void check_training_fits_gpu(const TrainConfig& config, const ModelConfig& model, int world,
                             int local_world, Device device);
// The MemoryJob of a training config (fsdp.compute_copy and optim.update_in_backward
// included), with `capacity` the GPU memory auto compute copies are resolved against (0 =
// unknown).
MemoryJob memory_job_for(const TrainConfig& config, const ModelConfig& model, int world,
                         int local_world, size_t capacity, DType activation_dtype = DType::kBF16);
// The compute copy the Trainer builds FSDP with: fsdp.compute_copy, auto resolved against this
// GPU's total memory (shared by the ranks on it); on the CPU auto = keep (fp32: no copy at all).
ComputeCopy compute_copy_for_training(const TrainConfig& config, const ModelConfig& model,
                                      int world, int local_world, Device device);

// "12.34 GiB".
std::string gib_text(size_t bytes);

}  // namespace shardtrain
