#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "core/error.h"
#include "core/log.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data/sampler.h"
#include "io/hf_checkpoint.h"
#include "model/hf_config.h"
#include "model/init_weights.h"
#include "model/llama_model.h"
#include "model/save_hf.h"
#include "obs/metrics_log.h"
#include "obs/progress.h"
#include "train/local_units.h"
#include "train/lr_schedule.h"
#include "train/optimizer.h"

namespace shardtrain {
namespace {

std::string config_json_of(const std::string& model_dir) {
  namespace fs = std::filesystem;
  if (model_dir.empty()) fail("model.path is empty; HINT: set it to a Hugging Face checkpoint dir");
  if (!fs::is_directory(model_dir)) {
    fail("model.path {} is not a directory; HINT: point it at a Hugging Face checkpoint dir "
         "(with config.json)", model_dir);
  }
  return (fs::path(model_dir) / "config.json").string();
}

}  // namespace

// Reads the model's config and fills `units` with its initial weights.
static ModelConfig load_initial_weights(const TrainConfig& config, const ParamLayout* layout,
                                        LocalUnits* units) {
  const ModelConfig model_config = read_hf_config(config_json_of(config.model.path));
  if (layout == nullptr) return model_config;
  std::unique_ptr<HfCheckpoint> checkpoint;
  if (config.model.init == "pretrained") {
    checkpoint = std::make_unique<HfCheckpoint>(HfCheckpoint::open(config.model.path));
  }
  std::vector<float> values;
  for (size_t u = 0; u < layout->units.size(); ++u) {
    values.assign(layout->units[u].numel, 0.0f);
    if (checkpoint) {
      load_unit_from_checkpoint(*checkpoint, layout->units[u], values.data());
    } else {
      init_unit_random(layout->units[u], static_cast<int>(u),
                       static_cast<uint64_t>(config.train.seed), 0.02, values.data());
    }
    units->upload_master(static_cast<int>(u), values.data());
  }
  units->refresh_compute_params();
  return model_config;
}

TrainOutcome run_training(const TrainConfig& config, Ops& ops, const TrainRunOptions& options) {
  config.validate();
  const ModelConfig model_config = load_initial_weights(config, nullptr, nullptr);
  LlamaModel model(model_config, ops);
  const ParamLayout& layout = model.layout();

  const int64_t seq_len = config.data.seq_len, micro_batch = config.train.micro_batch;
  std::unique_ptr<SequenceDataset> dataset =
      open_dataset(config.data.path, config.data.format, seq_len, config.data.pad_id);
  validate_vocab(*dataset, model_config.vocab_size, config.data.path);
  if (dataset->size() < static_cast<size_t>(micro_batch)) {
    fail("data {} has {} sequences of {} tokens, fewer than train.micro_batch = {}; HINT: "
         "lower train.micro_batch or data.seq_len, or add data",
         config.data.path, dataset->size(), seq_len, micro_batch);
  }
  model.reserve(micro_batch, seq_len);

  LocalUnits units(ops, layout, /*with_optimizer_state=*/true);
  load_initial_weights(config, &layout, &units);
  log::info("model {}: {} parameters, {} layers; data {}: {} sequences of {} tokens; device {}",
            model_config.model_type, layout.parameter_count(), model_config.num_hidden_layers,
            config.data.path, dataset->size(), seq_len, device_name(ops.device()));

  AdamWSettings adam;
  adam.beta1 = config.optim.beta1;
  adam.beta2 = config.optim.beta2;
  adam.eps = config.optim.eps;
  adam.weight_decay = config.optim.weight_decay;
  adam.decay_norms_and_biases = config.optim.decay_norms_and_biases;
  AdamW optimizer(ops, adam);
  std::vector<UnitBuffers> buffers;
  for (int u = 0; u < units.unit_count(); ++u) {
    buffers.push_back({&layout.units[u], 0, units.master(u), units.grads(u), units.exp_avg(u),
                       units.exp_avg_sq(u)});
  }

  ShuffleSampler sampler(dataset->size(), static_cast<uint64_t>(config.train.seed));
  MetricsLog metrics;
  if (!options.metrics_path.empty()) metrics = MetricsLog(options.metrics_path);
  DeviceBuffer loss_buffer(ops, sizeof(float));
  const Tensor loss_sum = loss_buffer.view(DType::kF32, {1});

  TrainOutcome outcome;
  const auto start = std::chrono::steady_clock::now();
  int64_t tokens_seen = 0;
  const int64_t steps = config.train.steps;
  for (int64_t step = 1; step <= steps; ++step) {
    // Draw the whole accumulation window first: the loss is normalised by its target count.
    std::vector<Batch> micro_batches;
    int64_t targets = 0;
    for (int64_t m = 0; m < config.train.grad_accum; ++m) {
      std::vector<Example> examples;
      for (int64_t b = 0; b < micro_batch; ++b) examples.push_back(dataset->get(sampler.next()));
      micro_batches.push_back(make_batch(examples));
      targets += micro_batches.back().target_count;
    }
    const float grad_scale = targets > 0 ? 1.0f / static_cast<float>(targets) : 0.0f;
    units.zero_grads();
    ops.fill_zero(loss_sum);
    for (const Batch& batch : micro_batches) {
      model.set_batch(batch);
      model.forward_backward(units, grad_scale, loss_sum);
      tokens_seen += batch.batch_size * batch.seq_len;
    }
    const double loss = targets > 0 ? ops.read_scalar(loss_sum) / static_cast<double>(targets) : 0;
    const double grad_norm = std::sqrt(static_cast<double>(ops.read_scalar(optimizer.grad_square_sum(buffers))));
    if (!std::isfinite(loss) || !std::isfinite(grad_norm)) {
      fail("training diverged at step {} (loss {}, grad norm {}); HINT: lower optim.lr or "
           "check the data",
           step, loss, grad_norm);
    }
    const double lr = learning_rate(config.optim, step, steps);
    optimizer.step(buffers, lr, step, AdamW::clip_coefficient(grad_norm, config.train.max_grad_norm));
    units.refresh_compute_params();
    outcome.losses.push_back(loss);

    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    StepReport report{step, steps, loss, lr, grad_norm,
                      elapsed > 0 ? static_cast<double>(tokens_seen) / elapsed : 0, elapsed};
    if (!options.quiet && (step % config.train.log_every == 0 || step == steps || step == 1)) {
      std::printf("%s\n", format_progress_line(report).c_str());
      std::fflush(stdout);
    }
    metrics.append({{"step", step}, {"loss", loss}, {"lr", lr}, {"grad_norm", grad_norm},
                    {"tokens_per_s", report.tokens_per_s}, {"tokens", tokens_seen},
                    {"elapsed_s", elapsed}});
    outcome.tokens_per_s = report.tokens_per_s;
  }

  if (!config.train.output_dir.empty()) {
    std::vector<float> host;
    save_hf_checkpoint(
        config.train.output_dir, model_config, layout,
        [&](int u) {
          host.assign(layout.units[u].numel, 0.0f);
          units.download_master(u, host.data());
          return host.data();
        },
        config.model.dtype == "bf16" ? DType::kBF16 : DType::kF32);
    log::info("saved Hugging Face checkpoint to {}", config.train.output_dir);
  }
  return outcome;
}

}  // namespace shardtrain
