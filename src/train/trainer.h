// Trainer: one rank of a `shardtrain train` job. Every rank the launcher started runs one
// (a plain `shardtrain train` is a world of one); together they train with FSDP
// (fsdp/fsdp_units.h) under fsdp.strategy.
//
// The constructor sets the rank up: reads the worker environment, the model (pretrained or
// random, each rank loading only its shards) and the data, connects the world (with the hang
// watchdog's heartbeat), builds the FSDP units, resumes from a checkpoint when asked and
// prepares the checkpoint saver. run() then loops over the steps:
//   train_step()       this rank's micro-batches (data/step_batcher.h) through forward/backward
//                      with gradient accumulation, loss normalised by the global target count,
//                      the divergence check, the LR schedule and the optimizer step on the
//                      shards; fills the StepReport (obs/step_report.h)
//   maybe_checkpoint() the checkpoint policy: the per-step poll (SIGTERM agreement, background
//                      writes), periodic / final / stop saves
//   evaluate()         every train.eval_every steps and after the last (when data.eval_path is
//                      set): the mean loss on the eval data, each rank forwarding its share
//                      (sequence i on rank i % world), the sums reduced (EvalReport)
//   log_step()         the consumers of the report: the console line (rank 0, every
//                      train.log_every steps and on eval steps), the JSONL metrics (rank 0,
//                      --metrics), the node's /metrics endpoint (every rank,
//                      train/rank_metrics_publisher.h)
// and ends with export_final(): the Hugging Face checkpoint in train.output_dir. The Trainer
// issues no communication itself: every collective is FSDP's (the step's totals, the gradient
// norm), the checkpoint saver's, or the Mesh's (dist/mesh.h: evaluation sums, the final
// barrier), and all ranks make the same calls in the same order.
// Throws Error for any user mistake (config, paths, data, checkpoint) and when training
// diverges (a non-finite loss or gradient norm).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/step_batcher.h"
#include "dist/dist_env.h"
#include "dist/mesh.h"
#include "dist/worker_env.h"
#include "fsdp/expert_exchange.h"
#include "fsdp/fsdp_units.h"
#include "model/decoder_model.h"
#include "obs/metrics_log.h"
#include "obs/step_report.h"
#include "ops/backend.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"
#include "train/checkpoint/checkpoint.h"
#include "train/checkpoint/checkpoint_saver.h"
#include "train/checkpoint/dir_lock.h"
#include "train/heartbeat.h"
#include "train/optimizer.h"
#include "train/rank_metrics_publisher.h"
#include "train/run_length.h"
#include "train/step_hooks.h"
#include "train/train_config.h"

namespace shardtrain {

struct TrainOutcome {
  std::vector<double> losses;  // one per optimizer step of this run segment
  double tokens_per_s = 0;     // over the whole run
  int stop_signal = 0;         // SIGTERM or SIGINT when one stopped the run before its end
};

struct TrainRunOptions {
  std::string metrics_path;    // "" = no metrics file
  bool quiet = false;          // no per-step console lines
  StepHooks* hooks = nullptr;  // optional (tests); must outlive the Trainer
  // Tests only (train/step_hooks.h WorkerHooks): sleep before each checkpoint file.
  std::chrono::milliseconds checkpoint_write_delay{0};
  WorkerEnv worker;  // the launcher's contract, parsed once by the caller (one process: {})
  CudaComputeStream compute;  // the CUDA stream of `ops`'s backend, for NCCL (ops/backend.h)
};

class Trainer {
 public:
  // `ops` must outlive the Trainer. Throws Error for any setup mistake (see the header comment).
  Trainer(const TrainConfig& config, Ops& ops, const TrainRunOptions& options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains from the step after the resumed one (or 1) to train.steps, or until a stop
  // (SIGTERM, train.stop_at_step) whose checkpoint is then complete, and exports the result.
  TrainOutcome run();

  // One optimizer step: its report, without checkpoint fields (maybe_checkpoint adds them).
  StepReport train_step(int64_t step);
  // Saves a checkpoint when the policy says so and records its stall in `report`. Returns why
  // training must stop now (every rank agrees), or kNone.
  enum class Stop { kNone, kSignal, kStopAtStep };
  Stop maybe_checkpoint(StepReport& report);
  void log_step(const StepReport& report);
  // Collective: the model's mean loss on data.eval_path now. REQUIRES: eval data configured.
  EvalReport evaluate(int64_t step);
  // Writes train.output_dir (when set): every shard group gathers unit by unit; rank 0 streams
  // the units to the file.
  void export_final();

 private:
  void log_setup() const;
  void warn_about_resume_changes() const;
  bool eval_due(int64_t step) const;
  // The FSDP options of this job (compute copy resolved; update_in_backward checked against the
  // world size and accumulation), and the plan's bytes for the units as built.
  FsdpOptions fsdp_options() const;
  FsdpMemory planned_fsdp_memory() const;
  // Rank 0 takes the checkpoint and output dir locks; every rank throws when it could not.
  void lock_run_dirs_or_fail();

  const TrainConfig config_;
  Ops& ops_;
  const TrainRunOptions options_;
  const WorkerEnv env_;
  // First after the environment: a metrics port in use fails the run before any work.
  RankMetricsPublisher metrics_publisher_;
  const FsdpStrategy strategy_;
  const int group_size_;
  const int64_t grad_accum_;
  const ModelConfig model_config_;
  const int expert_parallel_;  // fsdp.expert_parallel, checked against the model and group
  // MFU: training FLOPs per token (model/model_flops.h) over the device's peak; 0 = no MFU.
  const double flops_per_token_;
  const double peak_flops_;
  DecoderModel model_;
  const std::unique_ptr<SequenceDataset> dataset_;
  const std::unique_ptr<SequenceDataset> eval_dataset_;  // null without data.eval_path
  const RunLength run_length_;  // steps (train.steps or train.epochs) and the LR schedule
  // Declared before the world: the heartbeat outlives the Comm that reports to it.
  const std::unique_ptr<Heartbeat> heartbeat_;
  DistWorld world_;
  std::unique_ptr<Mesh> mesh_;  // the groups and the collectives the trainer may call
  // fsdp.expert_parallel > 1: the model's token exchange over the mesh's expert group.
  std::unique_ptr<ExpertExchange> expert_exchange_;
  std::unique_ptr<FsdpUnits> units_;
  // Rank 0's checkpoint/output dir locks; before checkpoints_, so held until its writer ends.
  std::vector<DirLock> run_locks_;
  ResumeResult resumed_;
  // Declared after the units it copies from: its writer thread ends first.
  std::optional<CheckpointSaver> checkpoints_;
  AdamW optimizer_;
  StepBatcher batcher_;
  MetricsLog metrics_;
  DeviceBuffer loss_buffer_;  // f32 [1]: the step's summed loss on this rank

  std::chrono::steady_clock::time_point start_;
  int64_t tokens_seen_ = 0;    // over all ranks, earlier run segments included
  double elapsed_before_ = 0;  // training time of earlier segments of a resumed run
  double eval_seconds_ = 0;    // time this segment spent evaluating (not training time)
  int64_t last_checkpoint_step_ = 0;
  TrainOutcome outcome_;
};

// Trainer(config, ops, options).run().
TrainOutcome run_training(const TrainConfig& config, Ops& ops, const TrainRunOptions& options);

}  // namespace shardtrain
