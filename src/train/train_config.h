// TrainConfig: everything a training job is told, declared key by key with ConfigSchema
// (core/config.h) so that it is typed, validated at load time and printable whole.
//
// Sections and keys (defaults in the struct initialisers below):
//   [model] path, init, dtype     [data] path, weights, eval_path, format, seq_len, pad_id
//   [train] steps | epochs, micro_batch, grad_accum, seed, device, log_every, output_dir,
//           max_grad_norm, eval_every
//   [train] global_batch (0 = micro_batch x grad_accum x data-parallel size)
//   [train] checkpoint_dir, checkpoint_every, keep_checkpoints, resume, stop_at_step,
//           checkpoint_async, checkpoint_max_lag_steps
//   [optim] lr, min_lr, warmup_steps, schedule, weight_decay, beta1, beta2, eps,
//           decay_norms_and_biases, update_in_backward
//   [fsdp]  strategy, shard_group_size, reduce_on_last_micro_batch, compute_copy (docs/fsdp.md)
//   [dist]  backend (docs/fsdp.md "Rendezvous and communication")
//   [train] precision        [fp8] keep_bf16_layers, all_gather
//   [metrics] port, address, gpu, gpu_interval, nvml_library, peak_tflops (train/metrics_config.h)
//   [lora]  enabled, rank, alpha, dropout, target_modules, use_rslora, adapter
//           (model/lora_config.h)
//
// Usage: TrainConfig config; ConfigSchema schema; config.register_config(schema);
//        schema.load_toml_file(path); schema.apply_override(...); config.validate();
// register_config() binds the schema to this object's fields: the schema must not outlive it,
// and the object must not move while the schema is in use.
// validate() throws shardtrain::Error naming the offending key (and the related key for
// cross-field checks) and the allowed range.
// Choices are enums, parsed once when the file or override is applied (ConfigSchema::add_enum):
// a value outside the choices is one line naming the key and listing them. Their names are
// written once (core/choice_names.h), beside their enums: the *_names() tables below, and the
// data choices' in data/ (data_format.h, formats.h, chat_template.h, packing.h,
// packing_mode.h, prepare.h), train.device's in ops/device_choice.h, dist.backend's in
// dist/comm_backend_choice.h; the schema, the flags and every message use them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/choice_names.h"
#include "core/config.h"
#include "core/dtype.h"
#include "data/chat_template.h"
#include "data/data_format.h"
#include "data/formats.h"
#include "data/packing.h"
#include "data/packing_mode.h"
#include "data/prepare.h"
#include "dist/comm_backend_choice.h"
#include "fsdp/fsdp_strategy.h"
#include "model/decoder_model.h"
#include "model/lora_config.h"
#include "ops/device_choice.h"
#include "train/metrics_config.h"

namespace shardtrain {

enum class ModelInit { kPretrained, kRandom };
// fsdp.compute_copy: kAuto resolves against the GPU's memory (train/memory_fit.h) to the
// fsdp/shard_plan.h ComputeCopy the units are built with.
enum class ComputeCopyChoice { kAuto, kKeep, kOnDemand };
enum class LrScheduleKind { kCosine, kLinear, kConstant };
using ActivationCheckpointing = DecoderModel::Checkpointing;
using TrainPrecision = DecoderModel::Precision;

const ChoiceNames<ModelInit>& model_init_names();                   // pretrained, random
const ChoiceNames<DType>& model_dtype_names();                      // bf16, fp32
const ChoiceNames<ActivationCheckpointing>& checkpointing_names();  // none, full, selective
const ChoiceNames<LrScheduleKind>& lr_schedule_names();             // cosine, linear, constant
const ChoiceNames<FsdpStrategy>& fsdp_strategy_names();             // FULL_SHARD, ...
const ChoiceNames<ComputeCopyChoice>& compute_copy_names();         // auto, keep, on_demand
const ChoiceNames<TrainPrecision>& precision_names();               // bf16, fp8

struct ModelSourceConfig {
  std::string path;  // HF checkpoint dir, or a dir with only config.json for random init
  // When path is a Hugging Face Hub id ("org/name"): the branch, tag or commit to use.
  std::string revision = "main";
  ModelInit init = ModelInit::kPretrained;
  DType dtype = DType::kF32;  // dtype of saved checkpoints: bf16 | fp32
  // Mixture-of-experts models: train with the load-balancing loss (router_aux_loss_coef of
  // config.json), logged as aux_loss; evaluation never adds it.
  bool router_aux_loss = true;
};

struct DataConfig {
  // One source, or several separated by commas; each a file, a glob ("shards/*.jsonl") or a
  // directory (its data files) (data/data_sources.h).
  std::string path;
  // Per-source mixing weights, one per comma-separated source of path ("3,1" = three quarters
  // of the mix from the first); "" = every source in its natural size (data/mixture_dataset.h).
  std::string weights;
  // Held-out data in any format path accepts, evaluated every train.eval_every steps and after
  // the last one; "" = no evaluation.
  std::string eval_path;
  // tokens | jsonl (input_ids per line) | examples (raw text, prompt/completion, alpaca or chat
  // JSONL, tokenized and packed into a cache) | auto: by extension, and for JSONL by the first
  // line's keys (data/data_format.h).
  DataFormat format = DataFormat::kAuto;
  int64_t seq_len = 512;
  int64_t pad_id = 0;
  // auto | documents | concatenate | none (data/packing_mode.h): whether packed documents attend
  // only to themselves with positions restarting (documents), form one causal stream
  // (concatenate), or get a sequence each (none). Raw examples and token files that record
  // documents. auto = documents: every backend masks documents apart
  // (train/training_data.h: with_packing_resolved). nullopt = auto.
  PackingChoice packing;
  // Raw examples only (data/training_data.h):
  std::string tokenizer;               // tokenizer.json or its dir; "" = model.path
  ExampleFormatChoice example_format;  // nullopt = auto: by the first line's keys
  ChatTemplateChoice chat_template = ChatTemplateChoice::kAuto;
  OverlongPolicy overlong = OverlongPolicy::kSplit;
  BadLinePolicy on_bad_line = BadLinePolicy::kFail;
  InvalidUtf8Policy invalid_utf8 = InvalidUtf8Policy::kFail;
  bool train_on_prompt = false;
  bool train_on_eos = true;
  std::string cache_dir;  // "" = $HOME/.cache/shardtrain/data
};

struct TrainLoopConfig {
  // Optimizer steps; 0 = from epochs, or kDefaultSteps when epochs is 0 too. Setting both
  // steps and epochs is an error.
  int64_t steps = 0;
  static constexpr int64_t kDefaultSteps = 100;
  // Passes over the training data (fractions allowed): steps = ceil(epochs x sequences /
  // global batch). 0 = use steps.
  double epochs = 0;
  // Evaluate on data.eval_path every N steps (and after the last step); 0 = only after the last.
  int64_t eval_every = 0;
  int64_t micro_batch = 4;  // sequences per rank per micro-step
  int64_t grad_accum = 1;   // micro-steps per optimizer step
  int64_t seed = 1234;
  DeviceChoice device = DeviceChoice::kAuto;
  int64_t log_every = 1;
  std::string output_dir;      // "" = don't save
  double max_grad_norm = 1.0;  // 0 disables clipping
  // none | full | selective: full recomputes each block in backward from its saved input;
  // selective also keeps the attention output, so the recompute skips attention
  // (model/decoder_model.h DecoderModel::Checkpointing).
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::kNone;
  // bf16 | fp8: fp8 runs the blocks' linear GEMMs in FP8 with per-tensor current scaling
  // (GPUs of compute capability 8.9+; refused elsewhere). Master weights, optimizer state and
  // gradient reduction are the same in both.
  TrainPrecision precision = TrainPrecision::kBf16;
  // Sequences per optimizer step over all ranks; 0 = micro_batch x grad_accum x ranks. When
  // set, grad_accum is derived from it (see TrainConfig::grad_accum_for).
  int64_t global_batch = 0;
  // Sharded checkpoints (train/checkpoint/checkpoint.h, docs/checkpoints.md). "" = none.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;  // save every N steps (0 = only on stop and at the end)
  int64_t keep_checkpoints = 3;  // complete checkpoints kept (the newest is never removed)
  std::string resume = "auto";   // "auto" | "never" | a checkpoint path
  int64_t stop_at_step = 0;      // save a checkpoint and stop after this step (0 = run on)
  // Write checkpoint files on a background thread while training continues (the step loop
  // stalls only for a host copy); false = the step loop waits for the write.
  bool checkpoint_async = true;
  // A checkpoint must be complete on disk at most this many steps after it was taken; a slower
  // write makes the step loop wait for it there (0 = no bound: only the next checkpoint waits).
  int64_t checkpoint_max_lag_steps = 0;
};

struct OptimConfig {
  double lr = 3e-4;
  double min_lr = 0.0;
  int64_t warmup_steps = 0;
  LrScheduleKind schedule = LrScheduleKind::kCosine;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  bool decay_norms_and_biases = false;
  // Opt-in: each unit's AdamW step runs as soon as its backward is done, so no whole-model fp32
  // gradient is kept (4 bytes per parameter less). One rank, train.max_grad_norm = 0 (the clip
  // coefficient would need every gradient first) and one micro-batch per step only; the update
  // is then the same bit for bit (fsdp/fsdp_units.h).
  bool update_in_backward = false;
};

struct FsdpConfig {
  FsdpStrategy strategy = FsdpStrategy::kFullShard;
  int64_t shard_group_size = 0;  // HYBRID_SHARD's shard group; 0 = LOCAL_WORLD_SIZE
  bool reduce_on_last_micro_batch = false;
  // Shard group of one (one rank, NO_SHARD): "keep" a persistent bf16 copy of the parameters,
  // build it "on_demand" per unit from the fp32 master (2 bytes per parameter less, two casts
  // per unit and step, the same values), or "auto": on_demand when the job with the copy needs
  // more than 3/4 of the GPU's memory (train/memory_fit.h).
  ComputeCopyChoice compute_copy = ComputeCopyChoice::kAuto;
  // Mixture of experts: N ranks of a shard group share each sparse block's experts (E / N
  // each, tokens moved with all-to-all); 1 = experts sharded with their block (docs/fsdp.md).
  int64_t expert_parallel = 1;
};

struct DistConfig {
  // "auto" | "nccl" | "gloo": which engine carries collectives (dist/dist_env.h
  // choose_world_comm). auto = NCCL for CUDA ranks with one GPU each, Gloo for CPU ranks, and
  // host-staged Gloo when a node has more CUDA ranks than GPUs; gloo on CUDA ranks = host-staged.
  CommBackendChoice backend = CommBackendChoice::kAuto;
};

struct Fp8Config {
  // train.precision = "fp8": the first and the last N blocks stay bf16 (as torchtitan and
  // Megatron allow; the blocks nearest the embedding and the head are the most sensitive).
  int64_t keep_bf16_layers = 0;
  // train.precision = "fp8": the FP8 linears' weights are all-gathered as e4m3 with one scale
  // each (fsdp/fp8_gather.h), half the all-gather bytes of bf16. No effect with one rank per
  // shard group (nothing is gathered).
  bool all_gather = false;
};

struct TrainConfig {
  ModelSourceConfig model;
  DataConfig data;
  TrainLoopConfig train;
  OptimConfig optim;
  FsdpConfig fsdp;
  DistConfig dist;
  MetricsConfig metrics;
  Fp8Config fp8;
  LoraConfig lora;

  // Declares every key above in `schema`, bound to this object's fields.
  void register_config(ConfigSchema& schema);
  // Cross-field and range checks; throws Error naming the key.
  void validate() const;
  // Micro-steps per optimizer step on `data_parallel_size` ranks: train.grad_accum, or
  // global_batch / (micro_batch x ranks) when train.global_batch is set. Throws Error naming
  // the keys when the global batch is not a multiple of micro_batch x ranks, or conflicts with
  // an explicit train.grad_accum.
  int64_t grad_accum_for(int data_parallel_size) const;
  // The run's length in optimizer steps on `data_parallel_size` ranks over `sequences` training
  // sequences: train.steps, or ceil(train.epochs x sequences / global batch), or kDefaultSteps.
  int64_t total_steps_for(size_t sequences, int data_parallel_size) const;
  // Sequences per optimizer step over all ranks.
  int64_t global_batch_for(int data_parallel_size) const {
    return train.micro_batch * grad_accum_for(data_parallel_size) * data_parallel_size;
  }

 private:
  // train.output_dir must be neither model.path nor train.checkpoint_dir (saving there would
  // overwrite the input model or mix with the sharded checkpoints).
  void check_output_dir() const;
};

}  // namespace shardtrain
