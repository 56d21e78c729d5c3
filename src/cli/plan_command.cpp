// `shardtrain plan --config FILE --world-size N`: the per-rank FSDP memory of the job for each
// sharding strategy, computed from config.json alone before anything runs (fsdp/shard_plan.h
// has the formulas), plus the activation memory of one micro-batch (DecoderModel::
// activation_bytes_for, the same arithmetic the model reserves with). With --gpu-memory SIZE|GPU
// (no GPU needed; implies --device cuda) also a fits / does not fit verdict per strategy and
// activation-checkpointing mode and the smallest setting that fits (train/memory_fit.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/config_args.h"
#include "core/config.h"
#include "core/error.h"
#include "fsdp/fsdp_strategy.h"
#include "fsdp/shard_plan.h"
#include "model/decoder_model.h"
#include "model/fp8_memory.h"
#include "model/moe_memory.h"
#include "model/param_layout.h"
#include "ops/backend.h"
#include "train/job_model_config.h"
#include "train/memory_fit.h"
#include "train/train_config.h"

namespace shardtrain::cli {
namespace {

struct PlanArgs {
  std::vector<std::string> config_paths;  // layered in order (cli/config_args.h)
  int world_size = 1;
  int local_world_size = 0;  // 0 = world size (one node)
  std::string gpu_memory;    // empty: no verdicts
  std::optional<DeviceChoice> device;  // unset: train.device (cuda when --gpu-memory is given)
};

std::string mib(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return text;
}

std::string setting_text(const MemoryVerdict& v) {
  return std::string("--fsdp.strategy=") + fsdp_strategy_name(v.setting.strategy) +
         " --train.activation_checkpointing=" +
         choice_name(checkpointing_names(), v.setting.checkpointing);
}

// Across nodes: HYBRID_SHARD keeps the parameter all-gathers and gradient reduce-scatters inside
// a node and sends only an all-reduce of the gradient shard between nodes. Per step and node,
// about 8 bytes per parameter cross the node boundary with FULL_SHARD (bf16 all-gather in
// forward and backward, fp32 reduce-scatter), 8 / ranks-per-node with HYBRID_SHARD: with one
// EFA (g6, g6e, g5) or plain TCP between nodes, that is the step time.
void print_hybrid_advice(const MemoryJob& job, const std::vector<MemoryVerdict>& verdicts) {
  if (job.world <= job.local_world) return;
  const MemoryVerdict* hybrid = nullptr;
  for (const MemoryVerdict& v : verdicts) {
    if (v.setting.strategy == FsdpStrategy::kHybridShard && v.possible && v.fits &&
        (hybrid == nullptr || v.needed_bytes < hybrid->needed_bytes)) {
      hybrid = &v;
    }
  }
  const double params = static_cast<double>(make_param_layout(job.model).parameter_count());
  const double full_gb = 8.0 * params / 1e9, hybrid_gb = full_gb / std::max(1, job.local_world);
  if (hybrid == nullptr) {
    std::printf(
        "across %d nodes: HYBRID_SHARD (shard within a node of %d, replicate across nodes) does "
        "not fit; FULL_SHARD moves about %.1f GB between nodes per step and node: on nodes "
        "joined by one EFA or TCP, expect the step to wait on the network\n",
        job.world / job.local_world, job.local_world, full_gb);
    return;
  }
  std::printf(
      "across %d nodes: HYBRID_SHARD fits with %s (%s): between nodes it sends only the "
      "gradient all-reduce, about %.1f GB per step and node against %.1f GB for FULL_SHARD; "
      "prefer it where nodes are joined by one EFA or TCP (g6, g6e, g5), keep FULL_SHARD where "
      "memory is short or the fabric is fast (p4d, p5)\n",
      job.world / job.local_world, setting_text(*hybrid).c_str(),
      gib_text(hybrid->needed_bytes).c_str(), hybrid_gb, full_gb);
}

// Nothing fits even at micro_batch 1: whether the sharded state alone is too large (then a
// shorter sequence cannot help: only more GPUs), and how many nodes make FULL_SHARD + full
// checkpointing fit.
void print_nothing_fits(MemoryJob job, size_t capacity) {
  job.micro_batch = 1;
  const MemorySetting leanest{FsdpStrategy::kFullShard, ActivationCheckpointing::kFull};
  const size_t state = plan_fsdp_memory(job, leanest).total();
  const size_t activations = plan_bytes(job, leanest) - state;
  const int nodes = job.world / job.local_world;
  int fitting_nodes = 0;
  MemoryJob more = job;
  for (int n = nodes + 1; n <= 4096 && fitting_nodes == 0; ++n) {
    more.world = n * job.local_world;
    if (device_bytes_needed(plan_bytes(more, leanest)) <= capacity) fitting_nodes = n;
  }
  const std::string more_gpus =
      fitting_nodes > 0 ? fmt::format(
                              "FULL_SHARD + full checkpointing fits from {} GPUs ({} "
                              "nodes of {})",
                              fitting_nodes * job.local_world, fitting_nodes, job.local_world)
                        : std::string("no node count up to 4096 makes it fit");
  if (device_bytes_needed(state) > capacity) {
    std::printf(
        "nothing fits, even at micro_batch 1 with FULL_SHARD and full checkpointing: the "
        "sharded state alone needs %s per rank on %d GPUs (activations add %s), so a shorter "
        "data.seq_len cannot help; HINT: %s\n",
        gib_text(device_bytes_needed(state)).c_str(), job.world, gib_text(activations).c_str(),
        more_gpus.c_str());
    return;
  }
  std::printf(
      "nothing fits, even at micro_batch 1 with FULL_SHARD and full checkpointing: activations "
      "are %s of it; HINT: lower data.seq_len (now %lld), or use more GPUs: %s\n",
      gib_text(activations).c_str(), static_cast<long long>(job.seq_len), more_gpus.c_str());
}

// One line per strategy, one column per checkpointing mode: "fits" or "no", and the bytes the
// GPU must offer; then the smallest setting that fits, or the largest micro-batch with one.
void print_gpu_fit(MemoryJob job, const std::string& gpu_text) {
  const size_t capacity = parse_gpu_memory(gpu_text);
  std::printf(
      "fit on %s per GPU (%s; needed = plan + 5%% + %s reserve for CUDA context, "
      "cuBLASLt, NCCL):\n",
      gib_text(capacity).c_str(), gpu_text.c_str(), gib_text(kDeviceReserveBytes).c_str());
  const std::vector<MemoryVerdict> verdicts = memory_verdicts(job, capacity);
  std::printf("%-14s %6s %22s %22s %22s\n", "strategy", "group", "none", "selective", "full");
  for (FsdpStrategy strategy : {FsdpStrategy::kNoShard, FsdpStrategy::kShardGradOp,
                                FsdpStrategy::kHybridShard, FsdpStrategy::kFullShard}) {
    std::string line;
    int group = 0;
    for (const MemoryVerdict& v : verdicts) {
      if (v.setting.strategy != strategy) continue;
      group = v.group;
      const std::string cell =
          v.possible ? std::string(v.fits ? "fits " : "no   ") + gib_text(v.needed_bytes)
                     : std::string("not possible");
      char text[32];
      std::snprintf(text, sizeof(text), " %22s", cell.c_str());
      line += text;
    }
    std::printf("%-14s %6d%s\n", fsdp_strategy_name(strategy), group, line.c_str());
  }
  if (const MemoryVerdict* fit = smallest_fitting(verdicts)) {
    std::printf("smallest setting that fits: %s (%s of %s)\n", setting_text(*fit).c_str(),
                gib_text(fit->needed_bytes).c_str(), gib_text(capacity).c_str());
    const MemoryVerdict* fastest = fastest_fitting(verdicts);
    if (fastest != fit) {
      std::printf("fastest setting that fits (least recomputation and communication): %s (%s)\n",
                  setting_text(*fastest).c_str(), gib_text(fastest->needed_bytes).c_str());
    }
    print_hybrid_advice(job, verdicts);
    return;
  }
  const int64_t configured = job.micro_batch;
  for (job.micro_batch = configured - 1; job.micro_batch >= 1; --job.micro_batch) {
    const std::vector<MemoryVerdict> smaller = memory_verdicts(job, capacity);
    if (const MemoryVerdict* fit = smallest_fitting(smaller)) {
      std::printf(
          "nothing fits at micro_batch %lld; smallest setting that fits: "
          "--train.micro_batch=%lld %s (%s)\n",
          static_cast<long long>(configured), static_cast<long long>(job.micro_batch),
          setting_text(*fit).c_str(), gib_text(fit->needed_bytes).c_str());
      return;
    }
  }
  print_nothing_fits(job, capacity);
}

// The per-rank bytes by category for every strategy (rows), then what the activations hold.
void print_plan_table(const MemoryJob& job, ActivationCheckpointing checkpointing) {
  const DecoderModel::ActivationBytes acts = DecoderModel::activation_breakdown_for(
      job.model, job.micro_batch, job.seq_len, job.activation_dtype, checkpointing,
      DecoderModel::kDefaultHeadChunkLogits, job.lora);
  // train.precision = "fp8": the FP8 copies and GEMM workspace, counted with the activations.
  const size_t fp8 = job.fp8 ? fp8_workspace_bytes(job.model, job.micro_batch * job.seq_len) : 0;
  std::printf(
      "per-rank bytes (fsdp.reduce_on_last_micro_batch = %s, fsdp.compute_copy = %s, "
      "optim.update_in_backward = %s; activations for micro_batch %lld x seq_len %lld, "
      "activation_checkpointing = %s):\n",
      job.reduce_on_last_micro_batch ? "true" : "false",
      choice_name(compute_copy_names(), job.compute_copy).c_str(),
      job.update_in_backward ? "true" : "false", static_cast<long long>(job.micro_batch),
      static_cast<long long>(job.seq_len),
      choice_name(checkpointing_names(), checkpointing).c_str());
  std::printf("%-14s %5s %13s %13s %13s %13s %13s %13s %13s %13s\n", "strategy", "group",
              "fp32 master", "compute copy", "moments", "grad shard", "full grads", "gathered",
              "activations", "total");
  std::string copy_note;  // what fsdp.compute_copy resolved to at a shard group of one
  std::string expert_note;  // fsdp.expert_parallel's all-to-all buffers
  for (FsdpStrategy strategy : {FsdpStrategy::kFullShard, FsdpStrategy::kShardGradOp,
                                FsdpStrategy::kHybridShard, FsdpStrategy::kNoShard}) {
    const MemorySetting setting{strategy, checkpointing};
    int group = 0;
    FsdpMemory m;
    try {
      group = shard_group_size_for(strategy, job.world, job.local_world, job.shard_group_size);
      m = plan_fsdp_memory(job, setting);
    } catch (const Error& e) {
      std::printf("%-14s (not possible: %s)\n", fsdp_strategy_name(strategy), e.what());
      continue;
    }
    // Expert parallelism: the all-to-all buffers at their worst case count as activations.
    const int experts = expert_parallel_at(job, group);
    const ExpertExchangeBytes exchange = expert_exchange_bytes(
        job.model, job.micro_batch * job.seq_len, experts, job.activation_dtype,
        checkpointing != ActivationCheckpointing::kNone);
    if (exchange.worst > 0 && expert_note.empty()) {
      expert_note = fmt::format(
          "fsdp.expert_parallel = {}: each rank holds {} of {} experts per sparse block (its "
          "units of experts sharded over {} ranks); all-to-all buffers {} at worst (every "
          "peer's rows to one rank, in activations), {} with balanced routing",
          experts, job.model.moe.num_experts / experts, job.model.moe.num_experts, group / experts,
          mib(exchange.worst), mib(exchange.balanced));
    }
    const size_t activations = acts.total() + fp8 + exchange.worst;
    std::printf("%-14s %5d %13s %13s %13s %13s %13s %13s %13s %13s\n", fsdp_strategy_name(strategy),
                group, mib(m.master_bytes).c_str(),
                mib(m.compute_shard_bytes + m.frozen_shard_bytes + m.fp8_shard_bytes).c_str(),
                mib(m.moment_bytes).c_str(), mib(m.grad_shard_bytes).c_str(),
                mib(m.full_grad_peak_bytes).c_str(), mib(m.gathered_peak_bytes).c_str(),
                mib(activations).c_str(), mib(m.total() + activations).c_str());
    if (group == 1 && job.activation_dtype != DType::kF32 && copy_note.empty()) {
      copy_note = resolve_compute_copy(job, setting) == ComputeCopy::kKeep
                      ? "kept (persistent, written by the optimizer step)"
                      : "built on demand (each unit cast from fp32 into the gathered pool)";
    }
  }
  if (!copy_note.empty()) std::printf("shard group of one: compute copy %s\n", copy_note.c_str());
  if (!expert_note.empty()) std::printf("%s\n", expert_note.c_str());
  std::printf(
      "activations: block sets %s, checkpoints %s, lm-head logits chunk %s, scratch %s "
      "(plan leaves out the CUDA context and library workspaces: see the fit reserve)\n",
      mib(acts.block_sets).c_str(), mib(acts.checkpoints).c_str(), mib(acts.head_logits).c_str(),
      mib(acts.scratch).c_str());
  if (job.fp8) {
    std::printf(
        "train.precision = fp8: FP8 copies of the largest linear's operands (incl. the "
        "transposed ones the backward GEMMs read) and the FP8 GEMM workspace %s, in activations\n",
        mib(fp8).c_str());
    if (job.fp8_all_gather) {
      std::printf(
          "fp8.all_gather: where the shard group has more than one rank, each rank keeps an e4m3 "
          "copy of its shard of the FP8 blocks (1 byte per element, in the compute copy column) "
          "and the gathers move half the bytes of bf16\n");
    }
  }
}

void run_plan(const PlanArgs& args, const std::vector<std::string>& overrides) {
  if (!args.gpu_memory.empty()) parse_gpu_memory(args.gpu_memory);  // a bad value fails first
  TrainConfig config;
  ConfigSchema schema;
  config.register_config(schema);
  apply_config_args(schema, args.config_paths, overrides);
  const int world = args.world_size;
  const int local_world = args.local_world_size > 0 ? args.local_world_size : world;
  if (world % local_world != 0) {
    fail("--local-world-size {} must divide --world-size {}", local_world, world);
  }
  const ModelConfig model_config = read_job_model_config(config);
  // The configured strategy's shard group must take fsdp.expert_parallel, as training checks.
  expert_parallel_for(config.fsdp.expert_parallel,
                      shard_group_size_for(config.fsdp.strategy, world, local_world,
                                           static_cast<int>(config.fsdp.shard_group_size)),
                      model_config.moe.num_experts);
  const ParamLayout layout = make_param_layout(model_config, config.lora);
  const DeviceChoice device =
      args.device ? *args.device
                  : (args.gpu_memory.empty() ? config.train.device : DeviceChoice::kCuda);
  const bool gpu = device == DeviceChoice::kCuda || (device == DeviceChoice::kAuto && cuda_available());
  const DType act = gpu ? DType::kBF16 : DType::kF32;
  const int64_t grad_accum = config.grad_accum_for(world);

  std::printf(
      "plan: %s, %lld parameters in %zu units; world size %d (%d per node); "
      "compute dtype %s; global batch %lld = micro_batch %lld x grad_accum %lld x %d\n",
      model_config.model_type.c_str(), static_cast<long long>(layout.parameter_count()),
      layout.units.size(), world, local_world, std::string(dtype_name(act)).c_str(),
      static_cast<long long>(config.train.micro_batch * grad_accum * world),
      static_cast<long long>(config.train.micro_batch), static_cast<long long>(grad_accum), world);
  if (config.lora.enabled) {
    int64_t trainable = 0;
    for (const UnitLayout& unit : layout.units) {
      for (const ParamSpec& p : unit.params) trainable += p.trainable ? p.numel() : 0;
    }
    std::printf(
        "lora: rank %lld on %s: %lld trainable adapter parameters; the base is frozen (its bf16 "
        "shard in \"compute copy\", no master, moments or gradient)\n",
        static_cast<long long>(config.lora.rank), config.lora.target_modules.c_str(),
        static_cast<long long>(trainable));
  }
  const MemoryJob job =
      memory_job_for(config, model_config, world, local_world,
                     args.gpu_memory.empty() ? 0 : parse_gpu_memory(args.gpu_memory), act);
  print_plan_table(job, config.train.activation_checkpointing);
  if (!args.gpu_memory.empty()) print_gpu_fit(job, args.gpu_memory);
}

}  // namespace

void add_plan_command(CLI::App& app, int& exit_code) {
  const auto [cmd, args] = add_command<PlanArgs>(
      app, exit_code, "plan",
      "Print the per-rank memory of each FSDP strategy for a job, before running it", run_plan);
  cmd->add_option("--config", args->config_paths, "TOML job config; repeat to layer several")
      ->allow_extra_args(false)
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--world-size", args->world_size, "number of ranks")->check(CLI::PositiveNumber);
  cmd->add_option("--local-world-size", args->local_world_size,
                  "ranks per node (HYBRID_SHARD's default shard group); default: world size")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--gpu-memory", args->gpu_memory,
                  "per-GPU memory to check the job against: a size (24GiB, 80GB) or a GPU "
                  "(l4, a10g, l40s, a100-40gb, a100-80gb, h100, h200); implies --device cuda");
  std::optional<DeviceChoice>& device = args->device;
  cmd->add_option_function<std::string>(
         "--device",
         [&device](const std::string& value) {
           device = parse_choice(device_choice_names(), value, "--device");
         },
         "compute device to plan for (default train.device)")
      ->check(CLI::IsMember(choice_list(device_choice_names())));
  cmd->allow_extras();
}

}  // namespace shardtrain::cli
