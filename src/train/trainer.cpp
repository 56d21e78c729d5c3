#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "fsdp/dist_env.h"
#include "fsdp/fsdp_groups.h"
#include "fsdp/fsdp_units.h"
#include "io/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/llama_model.h"
#include "model/model_flops.h"
#include "model/save_hf.h"
#include "obs/metrics_log.h"
#include "obs/progress.h"
#include "train/blocking_comm_time.h"
#include "train/checkpoint.h"
#include "train/checkpoint_saver.h"
#include "train/checkpoint_signal.h"
#include "train/heartbeat.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"
#include "train/rank_metrics_publisher.h"
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

}  // namespace

// Reads the model's config.json.
static ModelConfig read_model_config(const TrainConfig& config) {
  return read_hf_config(config_json_of(config.model.path));
}

// Fills this rank's shards with the initial weights (each rank reads only its own part).
static void load_initial_weights(const TrainConfig& config, FsdpUnits& units) {
  if (config.model.init == "pretrained") {
    units.load_pretrained(HfCheckpoint::open(config.model.path));
  } else {
    units.init_random(static_cast<uint64_t>(config.train.seed), 0.02);
  }
}

// The whole resolved config as TOML (recorded in checkpoints).
static std::string config_toml(const TrainConfig& config) {
  TrainConfig copy = config;
  ConfigSchema schema;
  copy.register_config(schema);
  return schema.to_toml();
}

// Test hook, for the launcher's hang watchdog test (src/train/restart_resume_dist_test.cpp):
// SHARDTRAIN_TEST_HANG_AT_STEP=N makes rank SHARDTRAIN_TEST_HANG_RANK (default 0) stop
// forever at the start of step N, as a rank stuck outside any collective would. Returns 0
// (never) when unset.
static int64_t test_hang_step(int rank) {
  const char* step = std::getenv("SHARDTRAIN_TEST_HANG_AT_STEP");
  if (step == nullptr || *step == '\0') return 0;
  const char* hang_rank = std::getenv("SHARDTRAIN_TEST_HANG_RANK");
  const int target = hang_rank != nullptr && *hang_rank != '\0' ? std::atoi(hang_rank) : 0;
  return rank == target ? std::atoll(step) : 0;
}

static std::string memory_json(const FsdpMemory& m) {
  return fmt::format(
      "{{\"master_bytes\":{},\"moment_bytes\":{},\"grad_shard_bytes\":{},"
      "\"gathered_peak_bytes\":{},\"full_grad_peak_bytes\":{},\"compute_shard_bytes\":{}}}",
      m.master_bytes, m.moment_bytes, m.grad_shard_bytes, m.gathered_peak_bytes,
      m.full_grad_peak_bytes, m.compute_shard_bytes);
}

TrainOutcome run_training(const TrainConfig& config, Ops& ops, const TrainRunOptions& options) {
  config.validate();
  const DistEnv env = read_dist_env();
  // First: a metrics port in use fails the run before any work.
  RankMetricsPublisher metrics_publisher(config.metrics, env);
  const FsdpStrategy strategy = parse_fsdp_strategy(config.fsdp.strategy);
  const int group_size = shard_group_size_for(strategy, env.world, env.local_world,
                                              static_cast<int>(config.fsdp.shard_group_size));
  // Every rank reads its own data: the data-parallel size is the world size.
  const int64_t grad_accum = config.grad_accum_for(env.world);
  const bool is_rank0 = env.rank == 0;

  const ModelConfig model_config = read_model_config(config);
  LlamaModel model(model_config, ops);
  model.set_activation_checkpointing(
      LlamaModel::checkpointing_from_name(config.train.activation_checkpointing));
  const ParamLayout& layout = model.layout();

  const int64_t seq_len = config.data.seq_len, micro_batch = config.train.micro_batch;
  const int64_t global_batch = micro_batch * grad_accum * env.world;
  std::unique_ptr<SequenceDataset> dataset =
      open_training_data(config.data, config.model.path, static_cast<uint64_t>(config.train.seed));
  validate_vocab(*dataset, model_config.vocab_size, config.data.path);
  if (dataset->size() < static_cast<size_t>(micro_batch * env.world)) {
    fail(
        "data {} has {} sequences of {} tokens, fewer than train.micro_batch = {} x {} ranks; "
        "HINT: lower train.micro_batch or data.seq_len, or add data",
        config.data.path, dataset->size(), seq_len, micro_batch, env.world);
  }
  model.reserve(micro_batch, seq_len);

  // Declared before the world: the heartbeat outlives the Comm that reports to it.
  const std::unique_ptr<Heartbeat> heartbeat = Heartbeat::for_launched_worker(env);
  DistWorld world = connect_world(env, ops, config.dist.backend);
  world.comm = with_heartbeat(with_blocking_comm_time(std::move(world.comm)), *heartbeat);
  FsdpGroups groups(*world.comm, group_size);
  FsdpUnits units(ops, layout, groups, {strategy, config.fsdp.reduce_on_last_micro_batch});
  const ResumeResult resumed =
      resume_training(config.train.resume, config.train.checkpoint_dir, units, ops, layout);
  if (resumed.resumed) {
    if (is_rank0)
      log::info("resumed from checkpoint {} (step {})", resumed.step_dir, resumed.progress.step);
  } else {
    load_initial_weights(config, units);
  }
  const bool checkpointing = !config.train.checkpoint_dir.empty();
  if (checkpointing) install_stop_signal_handler();
  // Declared after the units it copies from: its writer thread ends first.
  std::optional<CheckpointSaver> checkpoints;
  if (checkpointing) {
    checkpoints.emplace(
        CheckpointSaverOptions{config.train.checkpoint_dir, config.train.keep_checkpoints,
                               config.train.checkpoint_async,
                               config.train.checkpoint_max_lag_steps},
        units, ops, layout,
        CheckpointRunInfo{config.fsdp.strategy, config_toml(config), config.model.path,
                          config_json_of(config.model.path)});
  }
  if (is_rank0) {
    log::info("model {}: {} parameters, {} layers; data {}: {} sequences of {} tokens; device {}",
              model_config.model_type, layout.parameter_count(), model_config.num_hidden_layers,
              config.data.path, dataset->size(), seq_len, device_name(ops.device()));
  }
  if (env.world > 1) {
    log::info(
        "fsdp rank {}/{}: {} shard group {}, global batch {} = micro_batch {} x "
        "grad_accum {} x ranks {}; memory estimate {}",
        env.rank, env.world, fsdp_strategy_name(strategy), group_size, global_batch, micro_batch,
        grad_accum, env.world,
        memory_json(estimate_fsdp_memory(units.plan(), strategy,
                                         config.fsdp.reduce_on_last_micro_batch,
                                         ops.activation_dtype())));
  }

  AdamWSettings adam;
  adam.beta1 = config.optim.beta1;
  adam.beta2 = config.optim.beta2;
  adam.eps = config.optim.eps;
  adam.weight_decay = config.optim.weight_decay;
  adam.decay_norms_and_biases = config.optim.decay_norms_and_biases;
  AdamW optimizer(ops, adam);
  std::vector<UnitBuffers> buffers;
  for (int u = 0; u < units.unit_count(); ++u) {
    buffers.push_back({&layout.units[u], units.shard_begin(u), units.master_shard(u),
                       units.grad_shard(u), units.exp_avg_shard(u), units.exp_avg_sq_shard(u),
                       units.compute_shard(u)});
  }

  // Every rank draws the same global batches (as one process would) and takes its slice, so
  // any world size trains on the same sequences per step.
  ShuffleSampler sampler(dataset->size(), static_cast<uint64_t>(config.train.seed));
  if (resumed.resumed) {
    sampler.restore(resumed.progress.sampler);
    if (is_rank0) truncate_metrics_after(options.metrics_path, resumed.progress.step);
  }
  MetricsLog metrics;
  if (is_rank0 && !options.metrics_path.empty()) metrics = MetricsLog(options.metrics_path);
  DeviceBuffer loss_buffer(ops, sizeof(float));
  const Tensor loss_sum = loss_buffer.view(DType::kF32, {1});

  TrainOutcome outcome;
  const auto start = std::chrono::steady_clock::now();
  int64_t tokens_seen = resumed.progress.tokens_seen;        // over all ranks
  const double elapsed_before = resumed.progress.elapsed_s;  // earlier segments of a resumed run
  const int64_t steps = config.train.steps;
  std::vector<size_t> step_indices(global_batch);
  bool stopped_early = false;
  const int64_t hang_step = test_hang_step(env.rank);
  const double flops_per_token = training_flops_per_token(model_config, seq_len);
  const double peak_flops = config.metrics.peak_flops(ops.device() == Device::kCuda);
  int64_t last_checkpoint_step = resumed.resumed ? resumed.progress.step : 0;
  for (int64_t step = resumed.progress.step + 1; step <= steps; ++step) {
    const auto step_start = std::chrono::steady_clock::now();
    heartbeat->set_step(step);
    while (step == hang_step) std::this_thread::sleep_for(std::chrono::seconds(1));
    for (size_t& index : step_indices) index = sampler.next();
    // Draw the whole accumulation window first: the loss is normalised by its target count.
    std::vector<Batch> micro_batches;
    int64_t local_targets = 0, local_tokens = 0;
    for (int64_t m = 0; m < grad_accum; ++m) {
      std::vector<Example> examples;
      const int64_t first = (m * env.world + env.rank) * micro_batch;
      for (int64_t b = 0; b < micro_batch; ++b) {
        examples.push_back(dataset->get(step_indices[first + b]));
      }
      micro_batches.push_back(make_batch(examples));
      local_targets += micro_batches.back().target_count;
      local_tokens += micro_batches.back().batch_size * micro_batches.back().seq_len;
    }
    const double data_wait_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    const double targets = units.sum_over_ranks(static_cast<double>(local_targets));
    const float grad_scale = targets > 0 ? static_cast<float>(1.0 / targets) : 0.0f;
    units.zero_grads();  // no fill: G = 1 overwrites, G > 1 was zeroed by the last update
    ops.fill_zero(loss_sum);
    for (int64_t m = 0; m < grad_accum; ++m) {
      units.begin_micro_batch(m, grad_accum);
      model.set_batch(micro_batches[m]);
      model.forward_backward(units, grad_scale, loss_sum);
    }
    const std::vector<double> totals =
        units.sum_over_ranks({static_cast<double>(local_tokens), ops.read_scalar(loss_sum)});
    tokens_seen += static_cast<int64_t>(totals[0]);
    const double loss_total = totals[1];
    const double loss = targets > 0 ? loss_total / targets : 0;
    const double grad_norm = std::sqrt(units.global_grad_square_sum(
        static_cast<double>(ops.read_scalar(optimizer.grad_square_sum(buffers)))));
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      fail(
          "training diverged at step {} (loss {}, grad norm {}); HINT: lower optim.lr or "
          "check the data",
          step, loss, grad_norm);
    }
    const double lr = learning_rate(config.optim, step, steps);
    // One pass: the update also writes the compute shards (no refresh_compute_params) and,
    // when the next backward adds into the grad shards (G > 1), zeroes them as it reads them
    // (the next step's zero_grads skips its fill). G = 1: the next backward overwrites them.
    const bool overwrite = units.backward_overwrites_grads();
    optimizer.step(buffers, lr, step,
                   AdamW::clip_coefficient(grad_norm, config.train.max_grad_norm),
                   overwrite ? GradsAfterStep::kKeep : GradsAfterStep::kZero);
    if (!overwrite) units.note_grads_zeroed();
    outcome.losses.push_back(loss);

    const double elapsed =
        elapsed_before +
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double tokens_per_s = elapsed > 0 ? static_cast<double>(tokens_seen) / elapsed : 0;
    StepReport report;
    report.step = step;
    report.total_steps = steps;
    report.loss = loss;
    report.lr = lr;
    report.grad_norm = grad_norm;
    report.tokens_per_s = tokens_per_s;
    report.elapsed_s = elapsed;
    report.data_wait_s = data_wait_s;
    report.local_tokens = local_tokens;
    report.world_size = env.world;
    report.epoch = static_cast<double>(step * global_batch) / static_cast<double>(dataset->size());
    nlohmann::json record = {{"step", step},
                             {"loss", loss},
                             {"lr", lr},
                             {"grad_norm", grad_norm},
                             {"tokens_per_s", report.tokens_per_s},
                             {"tokens", tokens_seen},
                             {"elapsed_s", elapsed}};
    outcome.tokens_per_s = report.tokens_per_s;
    // The step's collectives are done (the scalar reads above synchronised).
    if (const std::optional<double> waited = units.take_compute_wait_seconds()) {
      record["comm_wait_s"] = *waited;
      report.comm_wait_s = *waited;
    }

    bool stop = false, signalled = false;
    if (checkpoints) {
      // Every rank must agree to stop (SIGTERM may reach them at different steps); the same
      // collective advances a checkpoint being written in the background.
      const CheckpointPoll polled = checkpoints->poll(step, stop_signal_received());
      signalled = polled.stop;
      stop = signalled || step == config.train.stop_at_step;
      if (polled.waited) record["checkpoint_stall_s"] = polled.wait_s;
      const bool periodic =
          config.train.checkpoint_every > 0 && step % config.train.checkpoint_every == 0;
      if (stop || periodic || step == steps) {
        const CheckpointStall stall =
            checkpoints->save({step, steps, tokens_seen, elapsed, lr, sampler.state()});
        record["checkpoint_stall_s"] = polled.wait_s + stall.total_s();
        last_checkpoint_step = step;
      }
      report.checkpoint_stall_s = record.value("checkpoint_stall_s", 0.0);
    }
    report.last_checkpoint_step = last_checkpoint_step;
    report.step_time_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - step_start).count();
    if (peak_flops > 0 && report.step_time_s > 0) {
      report.mfu = flops_per_token * static_cast<double>(local_tokens) / report.step_time_s /
                   peak_flops;
    }
    report.device_memory_peak_bytes = static_cast<double>(ops.buffer_peak_bytes());
    if (is_rank0 && !options.quiet &&
        (step % config.train.log_every == 0 || step == steps || step == 1)) {
      std::printf("%s\n", format_progress_line(report).c_str());
      std::fflush(stdout);
    }
    metrics_publisher.publish(report);
    metrics.append(record);
    if (stop && step < steps) {
      checkpoints->finish();  // a stop's checkpoint is complete on disk before the process ends
      if (is_rank0) {
        log::info("stopped after step {} ({}); resume with --resume auto", step,
                  signalled ? "SIGTERM" : "train.stop_at_step");
      }
      stopped_early = true;
      break;
    }
  }
  if (checkpoints) checkpoints->finish();
  if (env.world > 1) {
    log::info("fsdp rank {}/{}: memory measured {}", env.rank, env.world,
              memory_json(units.memory()));
  }

  if (!config.train.output_dir.empty() && !stopped_early) {
    // Unit by unit: every shard group gathers; rank 0 streams its units to the file.
    std::vector<float> host;
    const auto gather = [&](int u) {
      host.assign(layout.units[u].numel, 0.0f);
      units.gather_master_to_host(u, host.data());
      return host.data();
    };
    if (is_rank0) {
      SaveHfOptions save;
      save.extra_files = tokenizer_files_in(config.model.path);  // so the output is usable
      save_hf_checkpoint(config.train.output_dir, model_config, layout, gather,
                         config.model.dtype == "bf16" ? DType::kBF16 : DType::kF32, save);
      log::info("saved Hugging Face checkpoint to {}", config.train.output_dir);
    } else {
      for (int u = 0; u < units.unit_count(); ++u) gather(u);
    }
  }
  world.comm->barrier();
  return outcome;
}

}  // namespace shardtrain
