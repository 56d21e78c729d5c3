#include "train/train_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "data/data_limits.h"
#include "data/formats.h"
#include "data/packing_mode.h"

namespace shardtrain {

const ChoiceNames<ModelInit>& model_init_names() {
  static const ChoiceNames<ModelInit> names = {{"pretrained", ModelInit::kPretrained},
                                               {"random", ModelInit::kRandom}};
  return names;
}

const ChoiceNames<DType>& model_dtype_names() {
  static const ChoiceNames<DType> names = {{"bf16", DType::kBF16}, {"fp32", DType::kF32}};
  return names;
}

const ChoiceNames<ActivationCheckpointing>& checkpointing_names() {
  static const ChoiceNames<ActivationCheckpointing> names = {
      {"none", ActivationCheckpointing::kNone},
      {"full", ActivationCheckpointing::kFull},
      {"selective", ActivationCheckpointing::kSelective}};
  return names;
}

const ChoiceNames<LrScheduleKind>& lr_schedule_names() {
  static const ChoiceNames<LrScheduleKind> names = {{"cosine", LrScheduleKind::kCosine},
                                                    {"linear", LrScheduleKind::kLinear},
                                                    {"constant", LrScheduleKind::kConstant}};
  return names;
}

const ChoiceNames<FsdpStrategy>& fsdp_strategy_names() {
  static const ChoiceNames<FsdpStrategy> names = [] {
    ChoiceNames<FsdpStrategy> out;
    for (const FsdpStrategy strategy : {FsdpStrategy::kFullShard, FsdpStrategy::kShardGradOp,
                                        FsdpStrategy::kHybridShard, FsdpStrategy::kNoShard})
      out.emplace_back(fsdp_strategy_name(strategy), strategy);
    return out;
  }();
  return names;
}

const ChoiceNames<TrainPrecision>& precision_names() {
  static const ChoiceNames<TrainPrecision> names = {{"bf16", TrainPrecision::kBf16},
                                                    {"fp8", TrainPrecision::kFp8}};
  return names;
}

const ChoiceNames<ComputeCopyChoice>& compute_copy_names() {
  static const ChoiceNames<ComputeCopyChoice> names = {{"auto", ComputeCopyChoice::kAuto},
                                                       {"keep", ComputeCopyChoice::kKeep},
                                                       {"on_demand", ComputeCopyChoice::kOnDemand}};
  return names;
}

namespace {

void register_model_keys(ConfigSchema& schema, ModelSourceConfig& model) {
  schema.add("model.path", &model.path,
             "Hugging Face checkpoint dir (or one with only config.json when init = \"random\"), "
             "or a Hub id org/name: downloaded into the Hugging Face cache (HF_HUB_CACHE)");
  schema.add("model.revision", &model.revision,
             "Hub id only: the branch, tag or commit of the model (\"main\" = the default branch)");
  schema.add_enum("model.init", &model.init, model_init_names(),
                  "load the checkpoint's weights, or initialise randomly from its config.json");
  schema.add_enum("model.dtype", &model.dtype, model_dtype_names(),
                  "dtype of the weights in saved checkpoints");
  schema.add("model.router_aux_loss", &model.router_aux_loss,
             "mixture-of-experts models: add the load-balancing loss (router_aux_loss_coef) in "
             "training, logged as aux_loss; no effect on dense models");
}

void register_data_source_keys(ConfigSchema& schema, DataConfig& data) {
  schema.add("data.path", &data.path,
             "training data: a token file (.bin/.tokens) or JSONL; several sources separated by "
             "commas, each a file, a glob or a directory");
  schema.add("data.weights", &data.weights,
             "mixing weights, one per comma-separated source of data.path (\"3,1\"); \"\" = "
             "each source in its natural size");
  schema.add("data.eval_path", &data.eval_path,
             "held-out data (any format data.path takes) evaluated every train.eval_every steps "
             "and after the last; \"\" = none");
  schema.add_enum("data.format", &data.format, data_format_names(),
                  "tokens = token file; jsonl = input_ids per line; examples = raw text/"
                  "prompt-completion/alpaca/chat JSONL (tokenized into a cache); auto = detect");
  schema.add("data.seq_len", &data.seq_len, "tokens per training sequence");
  schema.add("data.pad_id", &data.pad_id, "token id used to pad short JSONL sequences");
  schema.add_enum("data.packing", &data.packing, packing_choice_names(),
                  "documents = packed documents attend only to themselves, positions restart "
                  "per document; concatenate = one causal stream per sequence; none = one "
                  "document per sequence, padded; auto = documents");
}

void register_data_example_keys(ConfigSchema& schema, DataConfig& data) {
  schema.add("data.tokenizer", &data.tokenizer,
             "raw examples: tokenizer.json or its directory (\"\" = model.path)");
  schema.add_enum("data.example_format", &data.example_format, example_format_choice_names(),
                  "raw examples: record format (auto = from the first line's keys)");
  schema.add_enum("data.chat_template", &data.chat_template, chat_template_choice_names(),
                  "raw examples: chat template (auto = the model's own chat_template when "
                  "tokenizer_config.json has one, else the family's built-in one)");
  schema.add_enum("data.overlong", &data.overlong, overlong_policy_names(),
                  "raw examples: what to do with an example longer than seq_len");
  schema.add_enum("data.on_bad_line", &data.on_bad_line, bad_line_policy_names(),
                  "raw examples: a malformed line fails the run or is skipped and counted");
  schema.add_enum("data.invalid_utf8", &data.invalid_utf8, invalid_utf8_policy_names(),
                  "raw examples: invalid UTF-8 fails, or is replaced with U+FFFD");
  schema.add("data.train_on_prompt", &data.train_on_prompt,
             "raw examples: also compute loss on prompt/user tokens");
  schema.add("data.train_on_eos", &data.train_on_eos,
             "raw chat examples with the model's template: train each assistant turn's "
             "end-of-turn marker");
  schema.add(
      "data.cache_dir", &data.cache_dir,
      "raw examples: where prepared token files are cached (\"\" = ~/.cache/shardtrain/data)");
}

void register_train_loop_keys(ConfigSchema& schema, TrainLoopConfig& train) {
  schema.add("train.steps", &train.steps,
             "optimizer steps to run; 0 = from train.epochs (100 when that is 0 too)");
  schema.add("train.epochs", &train.epochs,
             "passes over the training data instead of train.steps (fractions allowed); 0 = off");
  schema.add("train.micro_batch", &train.micro_batch, "sequences per rank per micro-step");
  schema.add("train.grad_accum", &train.grad_accum, "micro-steps accumulated per optimizer step");
  schema.add("train.seed", &train.seed, "seed for data order and random init");
  schema.add_enum("train.device", &train.device, device_choice_names(),
                  "compute device; auto picks cuda when a GPU is present");
  schema.add("train.log_every", &train.log_every, "print metrics every N steps");
  schema.add(
      "train.eval_every", &train.eval_every,
      "evaluate on data.eval_path every N steps and after the last; 0 = after the last only");
  schema.add("train.output_dir", &train.output_dir,
             "where to save the trained model; empty = don't save");
  schema.add("train.max_grad_norm", &train.max_grad_norm,
             "clip the global gradient norm to this; 0 disables clipping");
  schema.add_enum("train.activation_checkpointing", &train.activation_checkpointing,
                  checkpointing_names(),
                  "full = keep only each block's input and recompute the block in backward "
                  "(less activation memory, one extra block forward); selective = also keep "
                  "the attention output, so the recompute skips attention");
  schema.add_enum("train.precision", &train.precision, precision_names(),
                  "fp8 = the blocks' linear GEMMs in FP8 with per-tensor current scaling "
                  "(GPUs of compute capability 8.9+: L4, H100, H200); bf16 = all in bf16");
  schema.add("train.global_batch", &train.global_batch,
             "sequences per optimizer step over all ranks; 0 = micro_batch x grad_accum x "
             "ranks; when set, grad_accum is derived from it");
}

void register_checkpoint_keys(ConfigSchema& schema, TrainLoopConfig& train) {
  schema.add("train.checkpoint_dir", &train.checkpoint_dir,
             "sharded checkpoints go to DIR/step_XXXXXXXX; empty = no checkpoints");
  schema.add(
      "train.checkpoint_every", &train.checkpoint_every,
      "save a checkpoint every N steps (0 = only on SIGTERM, stop_at_step and the last step)");
  schema.add("train.keep_checkpoints", &train.keep_checkpoints,
             "complete checkpoints to keep (older ones are removed; the newest never is)");
  schema.add("train.resume", &train.resume,
             "auto = continue from the newest complete checkpoint in checkpoint_dir if any; "
             "never; or a checkpoint path");
  schema.add("train.stop_at_step", &train.stop_at_step,
             "save a checkpoint and stop after this step, as on SIGTERM (0 = run to train.steps)");
  schema.add("train.checkpoint_async", &train.checkpoint_async,
             "write checkpoint files on a background thread while training continues (the step "
             "loop stalls only for a copy to host memory); false = wait for the write");
  schema.add("train.checkpoint_max_lag_steps", &train.checkpoint_max_lag_steps,
             "a checkpoint must be complete on disk at most this many steps after it was taken; a "
             "slower write makes the step loop wait for it then (0 = no bound)");
}

void register_parallel_keys(ConfigSchema& schema, FsdpConfig& fsdp, DistConfig& dist) {
  schema.add_enum("fsdp.strategy", &fsdp.strategy, fsdp_strategy_names(),
                  "how parameters, grads and optimizer state are sharded (docs/fsdp.md)");
  schema.add("fsdp.shard_group_size", &fsdp.shard_group_size,
             "HYBRID_SHARD: ranks that shard one replica; 0 = ranks per node (LOCAL_WORLD_SIZE)");
  schema.add("fsdp.reduce_on_last_micro_batch", &fsdp.reduce_on_last_micro_batch,
             "keep full unreduced grads across micro-batches and reduce once (one full fp32 grad "
             "buffer per unit)");
  schema.add_enum("fsdp.compute_copy", &fsdp.compute_copy, compute_copy_names(),
                  "shard group of one: keep a bf16 copy of the parameters, or cast each unit "
                  "from fp32 when it is used (on_demand: 2 bytes/parameter less, same values); "
                  "auto = on_demand when the job would use over 3/4 of the GPU (with "
                  "gradient accumulation: only when it would not fit)");
  schema.add("fsdp.expert_parallel", &fsdp.expert_parallel,
             "MoE models: ranks of a shard group that share each block's experts (E / N each, "
             "tokens moved with all-to-all); must divide the shard group and the expert count; "
             "1 = experts sharded with their block");

  schema.add_enum("dist.backend", &dist.backend, comm_backend_names(),
                  "collectives: auto = NCCL for one GPU per rank, Gloo for CPU ranks, host-staged "
                  "Gloo when ranks share a GPU; gloo on GPUs = host-staged (slow, for testing)");
}

void register_optim_keys(ConfigSchema& schema, OptimConfig& optim) {
  schema.add("optim.lr", &optim.lr, "peak learning rate");
  schema.add("optim.min_lr", &optim.min_lr, "learning rate at the end of the decay");
  schema.add("optim.warmup_steps", &optim.warmup_steps,
             "steps of linear warmup from 0 to lr (clamped to the run's length, with a warning)");
  schema.add_enum("optim.schedule", &optim.schedule, lr_schedule_names(),
                  "learning rate decay after warmup");
  schema.add("optim.weight_decay", &optim.weight_decay, "AdamW decoupled weight decay");
  schema.add("optim.beta1", &optim.beta1, "AdamW first-moment decay");
  schema.add("optim.beta2", &optim.beta2, "AdamW second-moment decay");
  schema.add("optim.eps", &optim.eps, "AdamW epsilon");
  schema.add("optim.decay_norms_and_biases", &optim.decay_norms_and_biases,
             "apply weight decay to norm weights and biases too");
  schema.add("optim.update_in_backward", &optim.update_in_backward,
             "run each unit's AdamW step right after its backward (no whole-model fp32 grads: "
             "4 bytes/parameter less); one rank, train.max_grad_norm = 0, grad_accum 1 only");
}

}  // namespace

void TrainConfig::register_config(ConfigSchema& schema) {
  register_model_keys(schema, model);
  register_data_source_keys(schema, data);
  register_data_example_keys(schema, data);
  register_train_loop_keys(schema, train);
  register_checkpoint_keys(schema, train);
  register_parallel_keys(schema, fsdp, dist);
  metrics.register_config(schema);
  register_optim_keys(schema, optim);
  lora.register_config(schema);
  schema.add("fp8.keep_bf16_layers", &fp8.keep_bf16_layers,
             "train.precision = \"fp8\": the first and the last N blocks stay bf16");
  schema.add("fp8.all_gather", &fp8.all_gather,
             "train.precision = \"fp8\": all-gather the FP8 linears' weights as e4m3");
}

namespace {

template <typename T>
void require(bool ok, const char* key, const char* rule, T value) {
  if (!ok) fail("config key '{}' must be {}, got {}", key, rule, value);
}

}  // namespace

void TrainConfig::validate() const {
  metrics.validate();
  lora.validate();
  if (model.path.empty()) {
    fail(
        "config key 'model.path' is not set; set it to a Hugging Face checkpoint dir "
        "(or a dir with config.json and model.init = \"random\")");
  }
  if (data.path.empty()) {
    fail("config key 'data.path' is not set; set it to a token file (.bin) or a .jsonl file");
  }
  using data_limits::kMaxBatchTokens, data_limits::kMaxSeqLen, data_limits::kMaxStepTokens;
  require(data.seq_len >= 2 && data.seq_len <= kMaxSeqLen, "data.seq_len",
          fmt::format("in [2, {}]", kMaxSeqLen).c_str(), data.seq_len);
  require(data.pad_id >= 0, "data.pad_id", ">= 0", data.pad_id);
  require(train.steps >= 0, "train.steps", ">= 0 (0 = from train.epochs)", train.steps);
  require(train.epochs >= 0, "train.epochs", ">= 0 (0 = use train.steps)", train.epochs);
  if (train.steps > 0 && train.epochs > 0) {
    fail(
        "config keys 'train.steps' ({}) and 'train.epochs' ({}) are both set; HINT: set only "
        "one of them (the other to 0)",
        train.steps, train.epochs);
  }
  require(train.eval_every >= 0, "train.eval_every", ">= 0 (0 = after the last step only)",
          train.eval_every);
  if (train.eval_every > 0 && data.eval_path.empty()) {
    fail(
        "config key 'train.eval_every' ({}) needs 'data.eval_path'; HINT: set data.eval_path to "
        "held-out data",
        train.eval_every);
  }
  require(train.micro_batch > 0, "train.micro_batch", "> 0", train.micro_batch);
  if (train.micro_batch > kMaxBatchTokens / data.seq_len) {
    fail(
        "config keys 'train.micro_batch' ({}) x 'data.seq_len' ({}) exceed {} tokens per "
        "micro-batch; HINT: lower train.micro_batch and raise train.grad_accum",
        train.micro_batch, data.seq_len, kMaxBatchTokens);
  }
  require(train.grad_accum > 0, "train.grad_accum", "> 0", train.grad_accum);
  // A step's micro-batches are drawn and held on the host at once (data/step_batcher.h).
  const int64_t micro_batch_tokens = train.micro_batch * data.seq_len;
  if (train.grad_accum > kMaxStepTokens / micro_batch_tokens) {
    fail(
        "config keys 'train.grad_accum' ({}) x 'train.micro_batch' ({}) x 'data.seq_len' ({}) "
        "exceed {} tokens per optimizer step on a rank; HINT: lower train.grad_accum",
        train.grad_accum, train.micro_batch, data.seq_len, kMaxStepTokens);
  }
  require(train.global_batch >= 0, "train.global_batch", ">= 0 (0 = derived)", train.global_batch);
  if (train.global_batch > kMaxStepTokens / data.seq_len) {
    fail(
        "config keys 'train.global_batch' ({}) x 'data.seq_len' ({}) exceed {} tokens per "
        "optimizer step; HINT: lower train.global_batch",
        train.global_batch, data.seq_len, kMaxStepTokens);
  }
  require(train.log_every > 0, "train.log_every", "> 0", train.log_every);
  require(fp8.keep_bf16_layers >= 0, "fp8.keep_bf16_layers", ">= 0", fp8.keep_bf16_layers);
  if (fp8.all_gather && train.precision != TrainPrecision::kFp8) {
    fail(
        "config key 'fp8.all_gather' gathers the weights of FP8 linears, but train.precision is "
        "\"bf16\"; HINT: set train.precision = \"fp8\" or drop fp8.all_gather");
  }
  require(train.max_grad_norm >= 0, "train.max_grad_norm", ">= 0 (0 disables clipping)",
          train.max_grad_norm);
  require(train.checkpoint_every >= 0, "train.checkpoint_every", ">= 0 (0 = off)",
          train.checkpoint_every);
  require(train.keep_checkpoints >= 1, "train.keep_checkpoints", ">= 1", train.keep_checkpoints);
  require(train.stop_at_step >= 0, "train.stop_at_step", ">= 0 (0 = off)", train.stop_at_step);
  require(train.checkpoint_max_lag_steps >= 0, "train.checkpoint_max_lag_steps",
          ">= 0 (0 = no bound)", train.checkpoint_max_lag_steps);
  require(!train.resume.empty(), "train.resume", "auto, never or a checkpoint path", "\"\"");
  if (train.checkpoint_every > 0 && train.checkpoint_dir.empty()) {
    fail(
        "config key 'train.checkpoint_every' ({}) needs 'train.checkpoint_dir'; HINT: pass "
        "--checkpoint-dir DIR",
        train.checkpoint_every);
  }
  check_output_dir();
  require(fsdp.shard_group_size >= 0, "fsdp.shard_group_size", ">= 0 (0 = ranks per node)",
          fsdp.shard_group_size);
  require(fsdp.expert_parallel >= 1, "fsdp.expert_parallel", ">= 1 (1 = none)",
          fsdp.expert_parallel);
  require(optim.lr > 0, "optim.lr", "> 0", optim.lr);
  require(optim.min_lr >= 0, "optim.min_lr", ">= 0", optim.min_lr);
  require(optim.warmup_steps >= 0, "optim.warmup_steps", ">= 0", optim.warmup_steps);
  require(optim.weight_decay >= 0, "optim.weight_decay", ">= 0", optim.weight_decay);
  require(optim.beta1 >= 0 && optim.beta1 < 1, "optim.beta1", "in [0, 1)", optim.beta1);
  require(optim.beta2 >= 0 && optim.beta2 < 1, "optim.beta2", "in [0, 1)", optim.beta2);
  require(optim.eps > 0, "optim.eps", "> 0", optim.eps);
  if (optim.update_in_backward && train.max_grad_norm != 0) {
    fail(
        "config key 'optim.update_in_backward' needs 'train.max_grad_norm' = 0 (got {}): the clip "
        "coefficient needs every gradient before the first update; HINT: set "
        "--train.max_grad_norm=0 or drop optim.update_in_backward",
        train.max_grad_norm);
  }
  if (optim.min_lr > optim.lr) {
    fail("config key 'optim.min_lr' ({}) must be <= 'optim.lr' ({})", optim.min_lr, optim.lr);
  }
}

void TrainConfig::check_output_dir() const {
  if (train.output_dir.empty()) return;
  namespace fs = std::filesystem;
  const auto resolved = [](const std::string& dir) {
    std::error_code ec;
    fs::path path = fs::weakly_canonical(fs::absolute(dir, ec), ec).lexically_normal();
    return path.has_filename() ? path : path.parent_path();  // "a/b/" names the dir "a/b"
  };
  const fs::path output = resolved(train.output_dir);
  const auto same_dir = [&](const std::string& other) {
    return !other.empty() && resolved(other) == output;
  };
  if (same_dir(model.path)) {
    fail(
        "config key 'train.output_dir' ({}) is the input model dir 'model.path'; saving there "
        "would overwrite the model being trained; HINT: choose another train.output_dir",
        train.output_dir);
  }
  if (same_dir(train.checkpoint_dir)) {
    fail(
        "config key 'train.output_dir' ({}) is 'train.checkpoint_dir'; HINT: keep the Hugging "
        "Face output and the sharded checkpoints in different dirs",
        train.output_dir);
  }
}

int64_t TrainConfig::grad_accum_for(int data_parallel_size) const {
  if (train.global_batch == 0) return train.grad_accum;
  const int64_t per_micro_step = train.micro_batch * data_parallel_size;
  if (train.global_batch % per_micro_step != 0) {
    fail(
        "config key 'train.global_batch' ({}) must be a multiple of 'train.micro_batch' ({}) x "
        "ranks ({}) = {}; HINT: change train.global_batch or train.micro_batch, or run on a "
        "world size that divides it",
        train.global_batch, train.micro_batch, data_parallel_size, per_micro_step);
  }
  const int64_t derived = train.global_batch / per_micro_step;
  if (train.grad_accum != 1 && train.grad_accum != derived) {
    fail(
        "config keys 'train.global_batch' ({}) and 'train.grad_accum' ({}) conflict: with "
        "train.micro_batch = {} on {} ranks the global batch needs grad_accum = {}; HINT: set "
        "only one of them",
        train.global_batch, train.grad_accum, train.micro_batch, data_parallel_size, derived);
  }
  return derived;
}

int64_t TrainConfig::total_steps_for(size_t sequences, int data_parallel_size) const {
  if (train.steps > 0) return train.steps;
  if (train.epochs <= 0) return TrainLoopConfig::kDefaultSteps;
  const double global_batch = static_cast<double>(global_batch_for(data_parallel_size));
  const double steps = std::ceil(train.epochs * static_cast<double>(sequences) / global_batch);
  // Beyond int64 the conversion is undefined (it ran one step); no run is that long anyway.
  constexpr double kMaxSteps = 1e15;
  if (!(steps <= kMaxSteps)) {
    fail(
        "config key 'train.epochs' ({}) over {} sequences gives {:.3g} optimizer steps, more than "
        "{:.0e}; HINT: lower train.epochs",
        train.epochs, sequences, steps, kMaxSteps);
  }
  return std::max<int64_t>(1, static_cast<int64_t>(steps));
}

}  // namespace shardtrain
