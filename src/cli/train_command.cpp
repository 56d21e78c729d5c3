// `shardtrain train`: runs a training job from a TOML config plus overrides.
#include <fmt/ranges.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/config_args.h"
#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "dist/dist_env.h"
#include "launch/launcher.h"
#include "train/train_config.h"
#include "train/trainer.h"

namespace shardtrain::cli {
namespace {

struct TrainArgs {
  std::vector<std::string> config_paths;  // layered in order (cli/config_args.h)
  int64_t steps = 0;
  std::string metrics_path;
  bool print_config = false;
  int nproc_per_node = 1;
  // Shortcuts for train.checkpoint_dir / checkpoint_every / resume ("" = not given); applied as
  // overrides so they are checked like the config keys.
  std::string checkpoint_dir, checkpoint_every, resume;
  std::string metrics_port;  // shortcut for metrics.port ("" = not given)
};

// Loads args.config_paths and applies the overrides and the flag shortcuts to `config`.
// REQUIRES: config.register_config(schema) was called.
void resolve_config(const TrainArgs& args, const std::vector<std::string>& overrides,
                    TrainConfig& config, ConfigSchema& schema) {
  apply_config_args(schema, args.config_paths, overrides);
  if (!args.checkpoint_dir.empty())
    schema.apply_override("train.checkpoint_dir=" + args.checkpoint_dir);
  if (!args.checkpoint_every.empty()) {
    schema.apply_override("train.checkpoint_every=" + args.checkpoint_every);
  }
  if (!args.resume.empty()) schema.apply_override("train.resume=" + args.resume);
  if (!args.metrics_port.empty()) schema.apply_override("metrics.port=" + args.metrics_port);
  if (args.steps > 0) config.train.steps = args.steps;
}

int run_train(const TrainArgs& args, const std::vector<std::string>& overrides,
              const WorkerEnv& worker, const WorkerHooks& hooks) {
  TrainConfig config;
  ConfigSchema schema;
  config.register_config(schema);
  resolve_config(args, overrides, config, schema);
  if (args.print_config) {
    std::printf("%s", schema.to_toml().c_str());
    return 0;
  }
  config.validate();
  if (const std::vector<std::string> keys = config.lora.keys_set_while_disabled(); !keys.empty()) {
    log::warn(
        "config keys {} are set but 'lora.enabled' is false: the whole model is trained; set "
        "lora.enabled = true to train adapters",
        fmt::join(keys, ", "));
  }
  TrainRunOptions options;
  options.worker = worker;
  std::unique_ptr<Ops> ops = make_rank_ops(config.train.device, options.worker, &options.compute);
  if (hooks.cpu_ops && ops->device() == Device::kCpu) ops = hooks.cpu_ops();
  const std::unique_ptr<StepHooks> step_hooks =
      hooks.step_hooks ? hooks.step_hooks(worker.rank) : nullptr;
  options.metrics_path = args.metrics_path;
  options.hooks = step_hooks.get();
  options.checkpoint_write_delay = hooks.checkpoint_write_delay;
  const TrainOutcome outcome = run_training(config, *ops, options);
  if (!outcome.losses.empty()) {
    std::printf("first loss %.4f, last loss %.4f over %zu steps (%.0f tokens/s)\n",
                outcome.losses.front(), outcome.losses.back(), outcome.losses.size(),
                outcome.tokens_per_s);
  }
  // Ctrl-C ends the run in order (checkpoint saved when configured) with the shell's code for
  // SIGINT, so scripts still see that it was interrupted.
  return outcome.stop_signal == SIGINT ? 128 + SIGINT : 0;
}

}  // namespace

void add_train_command(CLI::App& app, int& exit_code, const WorkerHooks& hooks) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd =
      app.add_subcommand("train",
                         "Train (fine-tune) a model. Any config key can be overridden with "
                         "--section.key=value or --section.key value (dashes or underscores), "
                         "e.g. --optim.lr=1e-4 --train.micro-batch 2");
  cmd->add_option("--config", args->config_paths,
                  "TOML job config (see examples/demo.toml); repeat to layer several, later "
                  "files win")
      ->allow_extra_args(false)
      ->check(CLI::ExistingFile);
  cmd->add_option("--steps", args->steps, "optimizer steps (overrides train.steps)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--metrics", args->metrics_path,
                  "append one JSON object per step to this file (JSONL)");
  cmd->add_option("--checkpoint-dir", args->checkpoint_dir,
                  "write sharded checkpoints to DIR/step_XXXXXXXX (train.checkpoint_dir)");
  cmd->add_option("--checkpoint-every", args->checkpoint_every,
                  "save a checkpoint every N steps (train.checkpoint_every; 0 = off)");
  cmd->add_option("--resume", args->resume,
                  "auto (newest complete checkpoint in --checkpoint-dir, if any), never, or a "
                  "checkpoint path (train.resume)");
  cmd->add_option("--metrics-port", args->metrics_port,
                  "serve Prometheus /metrics of this node on PORT (0 = a free port; "
                  "metrics.port); see also metrics.address, metrics.gpu");
  cmd->add_flag("--print-config", args->print_config,
                "print the whole resolved config as TOML and exit");
  cmd->add_option("--nproc-per-node", args->nproc_per_node,
                  "run N workers on this node (shortcut for shardtrain launch --standalone "
                  "--nproc-per-node N -- train ...)")
      ->check(CLI::PositiveNumber);
  cmd->allow_extras();
  cmd->callback([cmd, args, &exit_code, hooks] {
    const WorkerEnv worker = read_worker_env();
    if (args->nproc_per_node > 1 && !worker.launched) {
      // The launcher serves the node's metrics: it needs the [metrics] settings of the job.
      TrainConfig config;
      ConfigSchema schema;
      config.register_config(schema);
      resolve_config(*args, cmd->remaining(), config, schema);
      config.metrics.validate();
      exit_code = launch::launch_local_workers(args->nproc_per_node,
                                               launch::own_args_without("--nproc-per-node"),
                                               config.metrics.endpoint_options());
      return;
    }
    exit_code = run_train(*args, cmd->remaining(), worker, hooks);
  });
}

}  // namespace shardtrain::cli
