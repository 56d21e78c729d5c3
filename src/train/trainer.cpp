#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "data/batch.h"
#include "io/hf_checkpoint.h"
#include "io/hub/hub_resolver.h"
#include "model/hf_config.h"
#include "model/model_flops.h"
#include "model/peft_adapter.h"
#include "model/save_hf.h"
#include "obs/progress.h"
#include "train/blocking_comm_time.h"
#include "train/checkpoint/checkpoint_signal.h"
#include "train/checkpoint/dir_lock.h"
#include "train/checkpoint/export_tokenizer.h"
#include "train/evaluator.h"
#include "train/expert_export.h"
#include "train/lr_schedule.h"
#include "train/memory_fit.h"
#include "train/optimizer.h"
#include "train/precision_check.h"
#include "train/recorded_config.h"
#include "train/training_data.h"

namespace shardtrain {
namespace {

std::string config_json_of(const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (model_dir.empty()) fail("model.path is empty; HINT: set it to a Hugging Face checkpoint dir");
  if (!fs::is_directory(model_dir)) {
    fail(
        "model.path {} is not a directory; HINT: point it at a Hugging Face checkpoint dir "
        "(with config.json)",
        model_dir);
  }
  return (fs::path(model_dir) / "config.json").string();
}

// The model's config.json, after checking (before anything is allocated) that the configured
// setting fits this GPU's free memory (train/memory_fit.h; a no-op on CPU).
ModelConfig model_config_that_fits(const TrainConfig& config, const WorkerEnv& env, Ops& ops) {
  ModelConfig model = read_hf_config(config_json_of(config.model.path));
  require_precision_supported(config, model, ops);
  check_training_fits_gpu(config, model, env.world, env.local_world, ops.device());
  return model;
}

// The config checked, with model.path made a local directory: a Hub id ("org/name") becomes its
// snapshot in the Hugging Face cache, downloaded once per node (io/hub/hub_resolver.h).
TrainConfig validated(const TrainConfig& config) {
  config.validate();
  TrainConfig resolved = config;
  const HubFiles files = config.model.init == ModelInit::kPretrained
                             ? HubFiles::kModel
                             : HubFiles::kConfigAndTokenizer;
  resolved.model.path =
      resolve_hub_path({config.model.path, config.model.revision, files, "model.path"});
  // lora.adapter: the adapter's own settings (r, alpha, targets) are the run's.
  resolved.lora = resolve_lora_config(config.lora, config.model.path);
  if (resolved.lora.enabled && !resolved.lora.adapter.empty() &&
      config.model.init != ModelInit::kPretrained) {
    fail(
        "config key 'lora.adapter' needs model.init = \"pretrained\" (the adapter was trained "
        "on a base model); HINT: drop lora.adapter or load the base");
  }
  return resolved;
}

// With LoRA: every rank reads its shards of the frozen base from model.path and of the adapters
// from lora.adapter, or draws new adapters as PEFT does (A Kaiming-uniform, B zero).
void load_lora_model(const TrainConfig& config, const ParamLayout& layout, FsdpUnits& units) {
  if (config.model.init == ModelInit::kRandom) {
    units.init_random(static_cast<uint64_t>(config.train.seed), 0.02);  // adapters as PEFT's
    return;
  }
  const HfCheckpoint base = HfCheckpoint::open(config.model.path);
  std::optional<PeftAdapterWeights> adapter;
  if (!config.lora.adapter.empty()) adapter = PeftAdapterWeights::open(config.lora.adapter, layout);
  const uint64_t seed = static_cast<uint64_t>(config.train.seed);
  std::vector<float> drawn;
  units.load([&](const ParamSpec& spec, int64_t begin, int64_t count, float* dst) {
    if (!is_lora_param(spec)) {
      base.read_range_into_f32(spec.name, spec.shape, begin, count, dst);
    } else if (adapter) {
      adapter->read_range(spec, begin, count, dst);
    } else {
      drawn.resize(spec.numel());
      init_lora_param(spec, seed, drawn.data());
      std::copy(drawn.begin() + begin, drawn.begin() + begin + count, dst);
    }
  });
}

std::string memory_json(const FsdpMemory& m) {
  return fmt::format(
      "{{\"master_bytes\":{},\"moment_bytes\":{},\"grad_shard_bytes\":{},"
      "\"gathered_peak_bytes\":{},\"full_grad_peak_bytes\":{},\"compute_shard_bytes\":{},"
      "\"frozen_shard_bytes\":{},\"fp8_shard_bytes\":{}}}",
      m.master_bytes, m.moment_bytes, m.grad_shard_bytes, m.gathered_peak_bytes,
      m.full_grad_peak_bytes, m.compute_shard_bytes, m.frozen_shard_bytes, m.fp8_shard_bytes);
}

int64_t total_bytes(const FsdpMemory& m) { return static_cast<int64_t>(m.total()); }

// The training data, checked against the model's vocabulary and the number of ranks.
std::unique_ptr<SequenceDataset> open_checked_data(const TrainConfig& config,
                                                   const ModelConfig& model, int world) {
  std::unique_ptr<SequenceDataset> dataset =
      open_training_data(config.data, config.model.path, static_cast<uint64_t>(config.train.seed));
  validate_vocab(*dataset, model.vocab_size, config.data.path);
  const int64_t micro_batch = config.train.micro_batch;
  if (dataset->size() < static_cast<size_t>(micro_batch * world)) {
    fail(
        "data {} has {} sequences of {} tokens, fewer than train.micro_batch = {} x {} ranks; "
        "HINT: lower train.micro_batch or data.seq_len, or add data",
        config.data.path, dataset->size(), config.data.seq_len, micro_batch, world);
  }
  return dataset;
}

// The eval data (data.eval_path, opened like the training data at data.seq_len; raw examples
// packed with seed 0, as `shardtrain eval` packs them), or null.
std::unique_ptr<SequenceDataset> open_eval_data(const TrainConfig& config,
                                                const ModelConfig& model) {
  if (config.data.eval_path.empty()) return nullptr;
  DataConfig data = config.data;
  data.path = config.data.eval_path;
  data.weights.clear();
  std::unique_ptr<SequenceDataset> dataset = open_training_data(data, config.model.path, 0);
  validate_vocab(*dataset, model.vocab_size, data.path);
  return dataset;
}

RunLength run_length_of(const TrainConfig& config, const SequenceDataset& data, int world) {
  RunLength run = plan_run_length(config, data.size(), world);
  for (const std::string& warning : run.warnings) log::warn("{}", warning);
  return run;
}

AdamWSettings adamw_settings(const OptimConfig& optim) {
  AdamWSettings adam;
  adam.beta1 = optim.beta1;
  adam.beta2 = optim.beta2;
  adam.eps = optim.eps;
  adam.weight_decay = optim.weight_decay;
  adam.decay_norms_and_biases = optim.decay_norms_and_biases;
  return adam;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

Trainer::Trainer(const TrainConfig& config, Ops& ops, const TrainRunOptions& options)
    : config_(validated(config)),
      ops_(ops),
      options_(options),
      env_(options.worker),
      metrics_publisher_(config_.metrics, env_),
      strategy_(config_.fsdp.strategy),
      group_size_(shard_group_size_for(strategy_, env_.world, env_.local_world,
                                       static_cast<int>(config_.fsdp.shard_group_size))),
      // Every rank reads its own data: the data-parallel size is the world size.
      grad_accum_(config_.grad_accum_for(env_.world)),
      model_config_(model_config_that_fits(config_, env_, ops_)),
      expert_parallel_(expert_parallel_for(config_.fsdp.expert_parallel, group_size_,
                                           model_config_.moe.num_experts)),
      flops_per_token_(training_flops_per_token(model_config_, config_.data.seq_len, config_.lora)),
      peak_flops_(config_.metrics.peak_flops(ops_.device() == Device::kCuda)),
      model_(model_config_, ops_, config_.lora),
      dataset_(open_checked_data(config_, model_config_, env_.world)),
      eval_dataset_(open_eval_data(config_, model_config_)),
      run_length_(run_length_of(config_, *dataset_, env_.world)),
      heartbeat_(Heartbeat::for_launched_worker(env_)),
      world_(connect_world(env_, ops_, options_.compute, config_.dist.backend)),
      optimizer_(ops_, adamw_settings(config_.optim)),
      batcher_(*dataset_, static_cast<uint64_t>(config_.train.seed),
               {config_.train.micro_batch, grad_accum_, env_.world, env_.rank}),
      loss_buffer_(ops_, sizeof(float)) {
  model_.set_activation_checkpointing(config_.train.activation_checkpointing);
  model_.set_precision(config_.train.precision, config_.fp8.keep_bf16_layers);
  model_.reserve(config_.train.micro_batch, config_.data.seq_len);
  // Blocking backends (Gloo) get their exposed communication time measured around each call.
  world_.comm = with_heartbeat(with_blocking_comm_time(std::move(world_.comm)), *heartbeat_);
  mesh_ = std::make_unique<Mesh>(*world_.comm, group_size_, ops_, expert_parallel_);
  if (expert_parallel_ > 1) {
    // Before the units: the model's layout becomes this rank's experts'.
    expert_exchange_ = std::make_unique<ExpertExchange>(mesh_->expert(), ops_);
    model_.set_expert_dispatch(expert_exchange_.get());
  }
  lock_run_dirs_or_fail();
  units_ = std::make_unique<FsdpUnits>(ops_, model_.layout(), *mesh_, fsdp_options());
  const bool is_rank0 = env_.rank == 0;
  // LoRA checkpoints hold only the adapters and their optimizer state: the frozen base comes
  // from model.path first, then a resume overwrites the adapters.
  if (config_.lora.enabled) load_lora_model(config_, model_.layout(), *units_);
  resumed_ = resume_training(config_.train.resume, config_.train.checkpoint_dir, *units_, ops_,
                             model_.layout());
  if (resumed_.resumed) {
    if (is_rank0)
      log::info("resumed from checkpoint {} (step {})", resumed_.step_dir, resumed_.progress.step);
  } else if (config_.lora.enabled) {
    // loaded above
  } else if (config_.model.init == ModelInit::kPretrained) {
    // Each rank reads only its own part.
    units_->load_pretrained(HfCheckpoint::open(config_.model.path));
  } else {
    units_->init_random(static_cast<uint64_t>(config_.train.seed), 0.02);
  }
  if (config_.train.checkpoint_dir.empty() && env_.world == 1) {
    // Ctrl-C still stops after the step (no checkpoint to save); with several ranks and no
    // checkpoint poll to agree on it, SIGINT keeps its default action.
    install_interrupt_handler();
  }
  if (!config_.train.checkpoint_dir.empty()) {
    install_stop_signal_handler();
    checkpoints_.emplace(
        CheckpointSaverOptions{config_.train.checkpoint_dir, config_.train.keep_checkpoints,
                               config_.train.checkpoint_async,
                               config_.train.checkpoint_max_lag_steps,
                               options_.checkpoint_write_delay},
        *units_, ops_, model_.layout(),
        CheckpointRunInfo{fsdp_strategy_name(config_.fsdp.strategy), recorded_config_toml(config_),
                          absolute_path(config_.model.path),
                          absolute_path(config_json_of(config_.model.path))});
  }
  log_setup();
  if (resumed_.resumed) {
    if (is_rank0) warn_about_resume_changes();
    batcher_.restore(resumed_.progress.sampler);
    if (is_rank0) truncate_metrics_after(options_.metrics_path, resumed_.progress.step);
  }
  if (is_rank0 && !options_.metrics_path.empty()) metrics_ = MetricsLog(options_.metrics_path);
  tokens_seen_ = resumed_.progress.tokens_seen;
  elapsed_before_ = resumed_.progress.elapsed_s;
  if (resumed_.resumed) last_checkpoint_step_ = resumed_.progress.step;
}

Trainer::~Trainer() = default;

void Trainer::lock_run_dirs_or_fail() {
  // One run per checkpoint dir and output dir, refused before anything is read or written there
  // (two runs would interleave their files). Rank 0 holds the locks; every rank learns whether
  // it got them.
  std::string error;
  if (env_.rank == 0) {
    try {
      run_locks_ = lock_run_dirs(config_.train.checkpoint_dir, config_.train.output_dir);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  if (mesh_->any(!error.empty(), "run dir locks")) {
    throw Error(error.empty() ? "rank 0 could not lock the run's dirs (see its error)" : error);
  }
}

void Trainer::warn_about_resume_changes() const {
  const std::vector<std::string> changes =
      resume_changes({resumed_.config_toml, resumed_.world_size, resumed_.progress.total_steps},
                     config_, env_.world, run_length_.total_steps);
  if (changes.empty()) return;
  std::string list;
  for (const std::string& change : changes) list += (list.empty() ? "" : "; ") + change;
  log::warn("resuming {} with a changed run ({}); training continues with the new settings",
            resumed_.step_dir, list);
}

bool Trainer::eval_due(int64_t step) const {
  if (!eval_dataset_) return false;
  const int64_t every = config_.train.eval_every;
  return step == run_length_.total_steps || (every > 0 && step % every == 0);
}

EvalReport Trainer::evaluate(int64_t step) {
  const auto start = std::chrono::steady_clock::now();
  model_.set_router_aux_loss(false);  // plain cross-entropy, as transformers' eval reports
  const EvalTotals local =
      evaluate_share(model_, *units_, ops_, *eval_dataset_,
                     {eval_dataset_->size(), static_cast<size_t>(config_.train.micro_batch),
                      env_.rank, env_.world},
                     loss_buffer_.view(DType::kF32, {1}));
  units_->release_gathered_params();
  const std::vector<double> sums = mesh_->sum(
      {local.loss_sum, static_cast<double>(local.targets), static_cast<double>(local.sequences)},
      "eval totals (loss, targets, sequences)");
  const EvalReport report = eval_report({sums[0], static_cast<int64_t>(std::llround(sums[1])),
                                         static_cast<int64_t>(std::llround(sums[2]))},
                                        step, seconds_since(start));
  if (report.targets == 0 && env_.rank == 0) {
    log::warn("data.eval_path {}: no predicted positions (every label is ignored)",
              config_.data.eval_path);
  }
  return report;
}

FsdpOptions Trainer::fsdp_options() const {
  FsdpOptions options;
  options.strategy = strategy_;
  options.reduce_on_last_micro_batch = config_.fsdp.reduce_on_last_micro_batch;
  options.compute_copy = compute_copy_for_training(config_, model_config_, env_.world,
                                                   env_.local_world, ops_.device());
  options.update_in_backward = config_.optim.update_in_backward;
  if (options.update_in_backward && (env_.world != 1 || grad_accum_ != 1)) {
    fail(
        "config key 'optim.update_in_backward' runs on one rank with one micro-batch per step, "
        "but this job has {} ranks and grad_accum {}; HINT: drop optim.update_in_backward or "
        "run one rank with train.grad_accum = 1",
        env_.world, grad_accum_);
  }
  if (config_.fp8.all_gather) options.fp8_gather_ranges = model_.fp8_weight_ranges();
  return options;
}

FsdpMemory Trainer::planned_fsdp_memory() const {
  FsdpMemoryOptions options;
  options.reduce_on_last_micro_batch = config_.fsdp.reduce_on_last_micro_batch;
  options.compute_copy = units_->compute_copy();
  options.update_in_backward = units_->updates_in_backward();
  if (config_.fp8.all_gather) {
    for (const std::vector<ElementRange>& ranges : model_.fp8_weight_ranges()) {
      options.fp8_gather_units.push_back(!ranges.empty());
    }
  }
  return estimate_fsdp_memory(units_->plan(), strategy_, options, ops_.activation_dtype());
}

void Trainer::log_setup() const {
  const ParamLayout& layout = model_.layout();
  if (env_.rank == 0) {
    log::info("model {}: {} parameters, {} layers; data {}: {} sequences of {} tokens; device {}",
              model_config_.model_type, layout.parameter_count(), model_config_.num_hidden_layers,
              config_.data.path, dataset_->size(), config_.data.seq_len,
              device_name(ops_.device()));
    log::info("run: {} steps of {} sequences ({:.2f} epochs){}", run_length_.total_steps,
              run_length_.global_batch,
              static_cast<double>(run_length_.total_steps * run_length_.global_batch) /
                  static_cast<double>(dataset_->size()),
              eval_dataset_ ? fmt::format("; eval data {}: {} sequences", config_.data.eval_path,
                                          eval_dataset_->size())
                            : "");
  }
  if (env_.world > 1) {
    const int64_t micro_batch = config_.train.micro_batch;
    log::info(
        "fsdp rank {}/{}: {} shard group {}, global batch {} = micro_batch {} x "
        "grad_accum {} x ranks {}; memory estimate {}",
        env_.rank, env_.world, fsdp_strategy_name(strategy_), group_size_,
        micro_batch * grad_accum_ * env_.world, micro_batch, grad_accum_, env_.world,
        memory_json(planned_fsdp_memory()));
    if (env_.rank == 0 && config_.fp8.all_gather) {
      log::info("fp8.all_gather: {}",
                units_->gathers_fp8()
                    ? "the FP8 linears' weights are all-gathered as e4m3, one scale per weight"
                    : "no effect: no unit with FP8 weights is sharded over several ranks");
    }
  } else if (env_.rank == 0) {
    if (config_.fp8.all_gather) {
      log::info("fp8.all_gather: no effect on one rank (nothing is gathered)");
    }
    log::info("fsdp one rank: compute copy {}, update {}; memory estimate {}",
              units_->compute_copy() == ComputeCopy::kKeep ? "kept" : "built on demand",
              units_->updates_in_backward() ? "in backward"
              : units_->updates_aside()     ? "aside, beside the next step's forward"
                                            : "after backward",
              memory_json(planned_fsdp_memory()));
  }
}

TrainOutcome Trainer::run() {
  start_ = std::chrono::steady_clock::now();
  const int64_t steps = run_length_.total_steps;
  bool stopped_early = false;
  for (int64_t step = resumed_.progress.step + 1; step <= steps; ++step) {
    StepReport report = train_step(step);
    Stop stop = maybe_checkpoint(report);
    if (stop == Stop::kNone && !checkpoints_ && stop_signal_received()) stop = Stop::kSignal;
    if (eval_due(step)) {
      report.eval = evaluate(step);
      eval_seconds_ += report.eval->eval_time_s;  // not training time
    }
    log_step(report);
    if (stop != Stop::kNone && step < steps) {
      // A stop's checkpoint is complete on disk before the process ends.
      if (checkpoints_) checkpoints_->finish();
      heartbeat_->end_saving();
      if (env_.rank == 0) {
        log::info("stopped after step {} ({}); {}", step,
                  stop == Stop::kSignal ? stop_signal_name() : "train.stop_at_step",
                  checkpoints_ ? "resume with --resume auto"
                               : "no checkpoint saved (train.checkpoint_dir is not set)");
      }
      if (stop == Stop::kSignal) outcome_.stop_signal = stop_signal_number();
      stopped_early = true;
      break;
    }
  }
  if (checkpoints_) checkpoints_->finish();
  log::info("fsdp rank {}/{}: memory measured {}", env_.rank, env_.world,
            memory_json(units_->memory()));
  if (!stopped_early) export_final();
  mesh_->barrier();
  return outcome_;
}

StepReport Trainer::train_step(int64_t step) {
  const auto step_start = std::chrono::steady_clock::now();
  const std::optional<double> host_wait_start = ops_.host_wait_seconds();
  heartbeat_->set_step(step);
  if (options_.hooks != nullptr) options_.hooks->before_step(step);
  const StepBatches batches = batcher_.next();
  const double data_wait_s = seconds_since(step_start);

  units_->begin_step(batches.target_count);
  const double lr = learning_rate(run_length_.schedule, step, run_length_.total_steps);
  if (units_->updates_in_backward()) units_->set_update_in_backward(optimizer_, lr, step);
  // Asked for by the first micro-batch's loss, once its forward is enqueued (FsdpUnits).
  const auto grad_scale = [&] {
    const double targets = units_->global_targets();
    return targets > 0 ? static_cast<float>(1.0 / targets) : 0.0f;
  };
  const Tensor loss_sum = loss_buffer_.view(DType::kF32, {1});
  ops_.fill_zero(loss_sum);
  const int64_t micro_batches = static_cast<int64_t>(batches.micro_batches.size());
  // Mixture of experts: each micro-batch's load-balancing loss is one term of the step's mean
  // (every rank runs the same number of micro-batches), as one forward call is in transformers.
  const bool aux_loss = config_.model.router_aux_loss && model_.config().moe.enabled();
  const double aux_share =
      1.0 / static_cast<double>(std::max<int64_t>(micro_batches, 1) * env_.world);
  model_.set_router_aux_loss(aux_loss, static_cast<float>(aux_share));
  double aux_sum = 0;
  for (int64_t m = 0; m < micro_batches; ++m) {
    units_->begin_micro_batch(m, micro_batches);
    model_.set_batch(batches.micro_batches[m]);
    model_.forward_backward(*units_, grad_scale, loss_sum);
    aux_sum += model_.last_aux_loss();
  }
  const double targets = units_->global_targets();  // summed already unless no micro-batch ran
  const StepTotals totals = units_->end_backward(batches.token_count, ops_.read_scalar(loss_sum));
  const std::optional<double> step_aux_loss =
      aux_loss ? std::optional<double>(mesh_->sum(aux_sum, "step aux loss") * aux_share)
               : std::nullopt;
  const double loss = targets > 0 ? totals.loss_sum / targets : 0;
  if (!std::isfinite(loss) || !std::isfinite(totals.grad_norm)) {
    fail(
        "training diverged at step {} (loss {}, grad norm {}); HINT: lower optim.lr or "
        "check the data",
        step, loss, totals.grad_norm);
  }
  units_->apply_optimizer(optimizer_, lr, step,
                          AdamW::clip_coefficient(totals.grad_norm, config_.train.max_grad_norm));
  ops_.end_step();
  outcome_.losses.push_back(loss);
  tokens_seen_ += static_cast<int64_t>(totals.tokens);

  StepReport report;
  report.step = step;
  report.total_steps = run_length_.total_steps;
  report.epoch =
      static_cast<double>(step * run_length_.global_batch) / static_cast<double>(dataset_->size());
  report.loss = loss;
  report.lr = lr;
  report.grad_norm = totals.grad_norm;
  report.aux_loss = step_aux_loss;
  report.step_tokens = static_cast<int64_t>(totals.tokens);
  report.tokens_total = tokens_seen_;
  report.elapsed_s = elapsed_before_ + seconds_since(start_) - eval_seconds_;
  report.tokens_per_s =
      report.elapsed_s > 0 ? static_cast<double>(tokens_seen_) / report.elapsed_s : 0;
  report.step_time_s = seconds_since(step_start);
  report.data_wait_s = data_wait_s;
  report.local_tokens = batches.token_count;
  report.world_size = env_.world;
  if (peak_flops_ > 0 && report.step_time_s > 0) {
    report.mfu = flops_per_token_ * static_cast<double>(batches.token_count) / report.step_time_s /
                 peak_flops_;
  }
  // The step's collectives are done (the scalar reads above synchronised).
  report.exposed_comm_s = units_->take_compute_wait_seconds();
  if (const std::optional<double> host_wait = ops_.host_wait_seconds();
      host_wait && host_wait_start) {
    report.host_wait_s = *host_wait - *host_wait_start;
  }
  report.last_checkpoint_step = last_checkpoint_step_;
  report.fsdp_peak_bytes = total_bytes(units_->memory());
  report.device_buffers_peak_bytes = static_cast<int64_t>(ops_.buffer_peak_bytes());
  outcome_.tokens_per_s = report.tokens_per_s;
  return report;
}

Trainer::Stop Trainer::maybe_checkpoint(StepReport& report) {
  if (!checkpoints_) return Stop::kNone;
  const int64_t step = report.step;
  // Every rank must agree to stop (SIGTERM may reach them at different steps); the same
  // collective advances a checkpoint being written in the background.
  const CheckpointPoll polled = checkpoints_->poll(step, stop_signal_received());
  const Stop stop = polled.stop                          ? Stop::kSignal
                    : step == config_.train.stop_at_step ? Stop::kStopAtStep
                                                         : Stop::kNone;
  if (polled.waited) report.checkpoint_stall_s = polled.wait_s;
  const bool periodic =
      config_.train.checkpoint_every > 0 && step % config_.train.checkpoint_every == 0;
  if (stop == Stop::kSignal) {
    // The launcher's stop grace waits for a rank that reports it is saving.
    heartbeat_->begin_saving(fmt::format("step {} before stopping", step));
  }
  if (stop != Stop::kNone || periodic || step == run_length_.total_steps) {
    const CheckpointStall stall =
        checkpoints_->save({step, run_length_.total_steps, tokens_seen_, report.elapsed_s,
                            report.lr, batcher_.state()});
    report.checkpoint_stall_s = polled.wait_s + stall.total_s();
    last_checkpoint_step_ = step;
    report.last_checkpoint_step = step;
  }
  heartbeat_->note_save_seconds(checkpoints_->last_write_seconds());
  return stop;
}

void Trainer::log_step(const StepReport& report) {
  metrics_publisher_.publish(report);
  if (env_.rank != 0) return;
  const int64_t step = report.step;
  if (!options_.quiet && (step % config_.train.log_every == 0 || step == run_length_.total_steps ||
                          step == 1 || report.eval)) {
    std::printf("%s\n", format_progress_line(report).c_str());
    std::fflush(stdout);
  }
  metrics_.append(report);
}

void Trainer::export_final() {
  if (config_.train.output_dir.empty()) return;
  // Expert parallelism: the file holds the canonical layout (every expert in its block),
  // assembled from every rank's experts (train/expert_export.h).
  std::optional<ExpertExport> experts;
  if (expert_parallel_ > 1) experts.emplace(*units_, model_.layout(), model_config_, config_.lora);
  const ParamLayout& layout = experts ? experts->canonical() : model_.layout();
  std::vector<float> host;
  const auto gather = [&](int u) -> const float* {
    if (experts) return experts->gather(u);
    host.assign(layout.units[u].numel, 0.0f);
    units_->gather_unit_to_host(u, host.data());
    return host.data();
  };
  if (env_.rank == 0) {
    SaveHfOptions save;
    // The tokenizer and chat template training used, so the output is usable as trained.
    const ExportedTokenizer tokenizer = exported_tokenizer(
        {config_.data.tokenizer, config_.data.chat_template, config_.data.example_format},
        config_.model.path, "");
    save.extra_files = tokenizer.files;
    if (tokenizer.chat_template_jinja) {
      save.extra_contents.emplace_back("chat_template.jinja", *tokenizer.chat_template_jinja);
    }
    save.protected_dirs = {config_.model.path, config_.train.checkpoint_dir};
    if (config_.lora.enabled) {  // the adapter only: PEFT loads it onto the base
      save_peft_adapter(config_.train.output_dir, config_.lora, layout, gather,
                        {config_.model.path, config_.model.dtype, save.extra_files,
                         save.extra_contents, save.protected_dirs});
      log::info("saved PEFT LoRA adapter to {}", config_.train.output_dir);
      return;
    }
    save_hf_checkpoint(config_.train.output_dir, model_config_, layout, gather, config_.model.dtype,
                       save);
    log::info("saved Hugging Face checkpoint to {}", config_.train.output_dir);
  } else {
    for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) gather(u);
  }
}

TrainOutcome run_training(const TrainConfig& config, Ops& ops, const TrainRunOptions& options) {
  Trainer trainer(config, ops, options);
  return trainer.run();
}

}  // namespace shardtrain
