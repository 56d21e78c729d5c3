// Per-rank memory verdicts per strategy and checkpointing mode (train/memory_fit.h).
#include "train/memory_fit.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "fsdp/shard_plan.h"
#include "model/decoder_model.h"
#include "model/fp8_memory.h"
#include "model/moe_memory.h"
#include "model/param_layout.h"
#include "ops/backend.h"

namespace shardtrain {
namespace {

constexpr std::array<ActivationCheckpointing, 3> kCheckpointingOrder = {
    ActivationCheckpointing::kNone, ActivationCheckpointing::kSelective,
    ActivationCheckpointing::kFull};
constexpr std::array<FsdpStrategy, 4> kStrategyOrder = {
    FsdpStrategy::kNoShard, FsdpStrategy::kShardGradOp, FsdpStrategy::kHybridShard,
    FsdpStrategy::kFullShard};

constexpr size_t kMiB = size_t{1} << 20;

// Usable memory as nvidia-smi reports memory.total (MiB).
struct GpuMemory {
  const char* name;
  size_t mib;
};
constexpr std::array<GpuMemory, 7> kGpus{{{"l4", 23034},
                                          {"a10g", 23028},
                                          {"l40s", 46068},
                                          {"a100-40gb", 40960},
                                          {"a100-80gb", 81920},
                                          {"h100", 81559},
                                          {"h200", 143771}}};

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string setting_flags(const MemorySetting& s) {
  return fmt::format("--fsdp.strategy={} --train.activation_checkpointing={}",
                     fsdp_strategy_name(s.strategy),
                     choice_name(checkpointing_names(), s.checkpointing));
}

}  // namespace

std::string gib_text(size_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * kMiB));
}

size_t device_bytes_needed(size_t plan) { return plan + plan / 20 + kDeviceReserveBytes; }

namespace {

size_t activation_bytes(const MemoryJob& job, const MemorySetting& setting) {
  // Expert parallelism's all-to-all buffers at their worst case (dropless routing).
  size_t exchange = 0;
  if (job.expert_parallel > 1) {
    const int group =
        shard_group_size_for(setting.strategy, job.world, job.local_world, job.shard_group_size);
    exchange = expert_exchange_bytes(job.model, job.micro_batch * job.seq_len,
                                     expert_parallel_at(job, group), job.activation_dtype,
                                     setting.checkpointing != ActivationCheckpointing::kNone)
                   .worst;
  }
  return DecoderModel::activation_bytes_for(job.model, job.micro_batch, job.seq_len,
                                            job.activation_dtype, setting.checkpointing,
                                            DecoderModel::kDefaultHeadChunkLogits, job.lora) +
         (job.fp8 ? fp8_workspace_bytes(job.model, job.micro_batch * job.seq_len) : 0) + exchange;
}

FsdpMemory fsdp_memory_with(const MemoryJob& job, const MemorySetting& setting, ComputeCopy copy) {
  const int group =
      shard_group_size_for(setting.strategy, job.world, job.local_world, job.shard_group_size);
  FsdpMemoryOptions options;
  options.reduce_on_last_micro_batch = job.reduce_on_last_micro_batch;
  options.compute_copy = copy;
  options.update_in_backward = job.update_in_backward;
  // Expert parallelism: rank 0's layout (every rank's has the same sizes), its units of
  // experts over the expert shard group.
  const int experts = expert_parallel_at(job, group);
  const ParamLayout layout = make_param_layout(job.model, job.lora, ExpertPlacement{experts, 0});
  if (job.fp8 && job.fp8_all_gather) {
    // The blocks DecoderModel::block_uses_fp8 runs in FP8.
    options.fp8_gather_units.assign(layout.units.size(), false);
    const int64_t layers = job.model.num_hidden_layers, keep = job.fp8_keep_bf16_layers;
    for (int64_t layer = keep; layer < layers - keep; ++layer) {
      options.fp8_gather_units[static_cast<size_t>(block_unit(layer))] = true;
    }
  }
  return estimate_fsdp_memory(make_shard_plan(layout, group, group / experts), setting.strategy,
                              options, job.activation_dtype);
}

}  // namespace

int expert_parallel_at(const MemoryJob& job, int group) {
  const int n = job.expert_parallel;
  const bool applies =
      n > 1 && job.model.moe.enabled() && group % n == 0 && job.model.moe.num_experts % n == 0;
  return applies ? n : 1;
}

ComputeCopy resolve_compute_copy(const MemoryJob& job, const MemorySetting& setting) {
  const int group =
      shard_group_size_for(setting.strategy, job.world, job.local_world, job.shard_group_size);
  if (group > 1 || job.compute_copy == ComputeCopyChoice::kKeep) return ComputeCopy::kKeep;
  if (job.compute_copy == ComputeCopyChoice::kOnDemand) return ComputeCopy::kOnDemand;
  if (job.capacity_bytes == 0) return ComputeCopy::kKeep;
  const size_t with_copy =
      fsdp_memory_with(job, setting, ComputeCopy::kKeep).total() + activation_bytes(job, setting);
  // One micro-batch a step gives the copy up once the job would use 3/4 of the GPU (headroom
  // for a few casts a step). With gradient accumulation on_demand casts every unit again for
  // each micro-batch (15 ms a micro-batch on the 5.6B-parameter MoE bench shape, 17% of its
  // micro-step), so the copy is then kept whenever the job fits with it.
  const size_t limit = job.grad_accum > 1 ? job.capacity_bytes : job.capacity_bytes / 4 * 3;
  return device_bytes_needed(with_copy) > limit ? ComputeCopy::kOnDemand : ComputeCopy::kKeep;
}

FsdpMemory plan_fsdp_memory(const MemoryJob& job, const MemorySetting& setting) {
  return fsdp_memory_with(job, setting, resolve_compute_copy(job, setting));
}

size_t plan_bytes(const MemoryJob& job, const MemorySetting& setting) {
  return plan_fsdp_memory(job, setting).total() + activation_bytes(job, setting);
}

std::vector<MemoryVerdict> memory_verdicts(const MemoryJob& given, size_t capacity) {
  MemoryJob job = given;
  if (job.capacity_bytes == 0) job.capacity_bytes = capacity;
  std::vector<MemoryVerdict> verdicts;
  for (const ActivationCheckpointing checkpointing : kCheckpointingOrder) {
    for (const FsdpStrategy strategy : kStrategyOrder) {
      MemoryVerdict v;
      v.setting = {strategy, checkpointing};
      try {
        v.group = shard_group_size_for(strategy, job.world, job.local_world, job.shard_group_size);
        v.plan_bytes = plan_bytes(job, v.setting);
      } catch (const Error& e) {
        v.possible = false;
        v.why_not = e.what();
        verdicts.push_back(std::move(v));
        continue;
      }
      v.needed_bytes = device_bytes_needed(v.plan_bytes);
      v.fits = v.needed_bytes <= capacity;
      verdicts.push_back(std::move(v));
    }
  }
  return verdicts;
}

namespace {

// HYBRID_SHARD with the FULL_SHARD group (one node) is FULL_SHARD: name the latter.
bool same_as_full_shard(const std::vector<MemoryVerdict>& verdicts, const MemoryVerdict& v) {
  if (v.setting.strategy != FsdpStrategy::kHybridShard) return false;
  for (const MemoryVerdict& w : verdicts) {
    if (w.setting.strategy == FsdpStrategy::kFullShard &&
        w.setting.checkpointing == v.setting.checkpointing && w.group == v.group) {
      return true;
    }
  }
  return false;
}

bool usable(const std::vector<MemoryVerdict>& verdicts, const MemoryVerdict& v) {
  return v.possible && v.fits && !same_as_full_shard(verdicts, v);
}

}  // namespace

const MemoryVerdict* fastest_fitting(const std::vector<MemoryVerdict>& verdicts) {
  for (const MemoryVerdict& v : verdicts) {
    if (usable(verdicts, v)) return &v;
  }
  return nullptr;
}

const MemoryVerdict* smallest_fitting(const std::vector<MemoryVerdict>& verdicts) {
  // Verdicts come fastest first, so on equal bytes the faster setting stays.
  const MemoryVerdict* best = nullptr;
  for (const MemoryVerdict& v : verdicts) {
    if (usable(verdicts, v) && (best == nullptr || v.needed_bytes < best->needed_bytes)) best = &v;
  }
  return best;
}

size_t parse_gpu_memory(const std::string& text) {
  const std::string key = lower(text);
  for (const GpuMemory& gpu : kGpus) {
    if (key == gpu.name) return gpu.mib * kMiB;
  }
  // A number then a unit.
  size_t digits = 0;
  while (digits < key.size() &&
         (std::isdigit(static_cast<unsigned char>(key[digits])) || key[digits] == '.')) {
    ++digits;
  }
  const std::string number = key.substr(0, digits), unit = key.substr(digits);
  static constexpr std::array<std::pair<const char*, double>, 6> kUnits{{{"tib", 1099511627776.0},
                                                                         {"gib", 1073741824.0},
                                                                         {"mib", 1048576.0},
                                                                         {"tb", 1e12},
                                                                         {"gb", 1e9},
                                                                         {"mb", 1e6}}};
  double scale = 0;
  for (const auto& [name, factor] : kUnits) {
    if (unit == name) scale = factor;
  }
  char* end = nullptr;
  const double value = number.empty() ? 0 : std::strtod(number.c_str(), &end);
  const bool parsed = !number.empty() && end == number.c_str() + number.size();
  if (!parsed || scale == 0 || !(value > 0) || value * scale > 1e15) {
    fail(
        "--gpu-memory '{}' is neither a size nor a GPU name; HINT: give e.g. 24GiB, 80GB or one of "
        "l4, a10g, l40s, a100-40gb, a100-80gb, h100, h200",
        text);
  }
  return static_cast<size_t>(value * scale);
}

void require_job_fits_device(const MemoryJob& job, const MemorySetting& configured,
                             size_t free_bytes, int ranks_per_gpu, const std::string& gpu) {
  const size_t per_rank = free_bytes / static_cast<size_t>(std::max(1, ranks_per_gpu));
  // (job.capacity_bytes, which auto compute copies are resolved against, is the caller's.)
  const size_t needed = device_bytes_needed(plan_bytes(job, configured));
  if (needed <= per_rank) return;
  const std::vector<MemoryVerdict> verdicts = memory_verdicts(job, per_rank);
  const MemoryVerdict* fit = fastest_fitting(verdicts);
  const std::string share =
      ranks_per_gpu > 1 ? fmt::format(" ({} ranks share it)", ranks_per_gpu) : std::string();
  if (fit != nullptr) {
    fail(
        "this job needs {} per rank with fsdp.strategy = {} and train.activation_checkpointing = "
        "{} (plan + 5% + {} reserve), but {} has {} free{}; HINT: {} fits ({}); see `shardtrain "
        "plan --gpu-memory`",
        gib_text(needed), fsdp_strategy_name(configured.strategy),
        choice_name(checkpointing_names(), configured.checkpointing), gib_text(kDeviceReserveBytes),
        gpu, gib_text(free_bytes), share, setting_flags(fit->setting), gib_text(fit->needed_bytes));
  }
  fail(
      "this job needs {} per rank with fsdp.strategy = {} and train.activation_checkpointing = {}, "
      "but {} has {} free{}, and no strategy or checkpointing mode fits; HINT: lower "
      "train.micro_batch (now {}) or data.seq_len (now {}), or use more GPUs",
      gib_text(needed), fsdp_strategy_name(configured.strategy),
      choice_name(checkpointing_names(), configured.checkpointing), gpu, gib_text(free_bytes),
      share, job.micro_batch, job.seq_len);
}

namespace {

int ranks_per_gpu(int local_world) {
  const int gpus = std::max(1, visible_gpu_count());
  return (local_world + gpus - 1) / gpus;  // > 1: the host-staged test path
}

}  // namespace

MemoryJob memory_job_for(const TrainConfig& config, const ModelConfig& model, int world,
                         int local_world, size_t capacity, DType activation_dtype) {
  MemoryJob job{model,
                world,
                local_world,
                static_cast<int>(config.fsdp.shard_group_size),
                config.train.micro_batch,
                config.data.seq_len,
                config.fsdp.reduce_on_last_micro_batch,
                activation_dtype};
  job.compute_copy = config.fsdp.compute_copy;
  job.update_in_backward = config.optim.update_in_backward;
  job.fp8 = config.train.precision == TrainPrecision::kFp8;
  job.fp8_all_gather = config.fp8.all_gather;
  job.fp8_keep_bf16_layers = config.fp8.keep_bf16_layers;
  job.capacity_bytes = capacity;
  job.grad_accum = config.grad_accum_for(world);
  job.lora = config.lora;
  job.expert_parallel = static_cast<int>(config.fsdp.expert_parallel);
  return job;
}

ComputeCopy compute_copy_for_training(const TrainConfig& config, const ModelConfig& model,
                                      int world, int local_world, Device device) {
  if (config.fsdp.compute_copy == ComputeCopyChoice::kKeep) return ComputeCopy::kKeep;
  if (config.fsdp.compute_copy == ComputeCopyChoice::kOnDemand) return ComputeCopy::kOnDemand;
  const std::optional<GpuMemoryInfo> gpu =
      device == Device::kCuda ? current_gpu_memory() : std::nullopt;
  if (!gpu) return ComputeCopy::kKeep;
  const size_t capacity =
      gpu->total_bytes / static_cast<size_t>(std::max(1, ranks_per_gpu(local_world)));
  const MemoryJob job = memory_job_for(config, model, world, local_world, capacity);
  return resolve_compute_copy(job, {config.fsdp.strategy, config.train.activation_checkpointing});
}

void check_training_fits_gpu(const TrainConfig& config, const ModelConfig& model, int world,
                             int local_world, Device device) {
  if (device != Device::kCuda) return;
  const std::optional<GpuMemoryInfo> gpu = current_gpu_memory();
  if (!gpu) return;
  const int ranks_per_gpu = shardtrain::ranks_per_gpu(local_world);
  const MemoryJob job =
      memory_job_for(config, model, world, local_world,
                     gpu->total_bytes / static_cast<size_t>(std::max(1, ranks_per_gpu)));
  require_job_fits_device(job, {config.fsdp.strategy, config.train.activation_checkpointing},
                          gpu->free_bytes, ranks_per_gpu, gpu->name);
}

}  // namespace shardtrain
