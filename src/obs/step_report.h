// StepReport: what one optimizer step did, as every consumer reads it: the console progress
// line (obs/progress.h), the JSONL metrics (obs/metrics_log.h), and the /metrics endpoint
// (obs/rank_snapshot.h, train/rank_metrics_publisher.h). The
// trainer (train/trainer.h) fills one per step on every rank; values are this rank's unless
// they say "all ranks". Units are in the names: seconds (_s), bytes (_bytes), counts.
#pragma once

#include <cstdint>
#include <optional>

#include "obs/eval_report.h"

namespace shardtrain {

struct StepReport {
  int64_t step = 0;         // 1-based optimizer step just completed
  int64_t total_steps = 0;  // the run's length in steps (train.steps, or from train.epochs)
  double loss = 0;          // mean cross-entropy over the global batch's targets (all ranks)
  // Mixture-of-experts models trained with model.router_aux_loss: the load-balancing loss, mean
  // over the step's micro-batches (all ranks), before router_aux_loss_coef; else nullopt.
  std::optional<double> aux_loss;
  double lr = 0;            // the learning rate this step used
  double grad_norm = 0;     // global L2 gradient norm before clipping (all ranks)
  int64_t step_tokens = 0;  // tokens in this step's global batch (all ranks)
  // Tokens trained on so far (all ranks), earlier segments of a resumed run included.
  int64_t tokens_total = 0;
  double tokens_per_s = 0;  // tokens_total / elapsed_s (all ranks)
  double elapsed_s = 0;     // training time so far, earlier segments of a resumed run included
  double step_time_s = 0;   // wall time of this step: data, forward/backward, collectives, update
  double data_wait_s = 0;   // the part of step_time_s spent drawing and batching the data
  // Seconds the compute stream waited for FSDP's overlapped collectives this step (exposed
  // communication); nullopt when the backend does not measure it (Gloo, CPU).
  std::optional<double> exposed_comm_s;
  // Seconds the step loop was blocked waiting for this rank's device (the batch upload, the loss
  // and norm reads: Ops::host_wait_seconds; a checkpoint's device reads during the step count
  // too); nullopt on CPU. When the GPU sets the pace the host also blocks inside kernel launches
  // once the driver's launch queue is full, which is not counted: a lower bound of the host's
  // idle time, large when the host is far ahead of its GPU.
  std::optional<double> host_wait_s;
  // Seconds the step loop waited for checkpoints at this step (snapshot copy, a previous write
  // still in flight, the train.checkpoint_max_lag_steps bound); nullopt when it did not.
  std::optional<double> checkpoint_stall_s;
  int64_t last_checkpoint_step = 0;  // newest step a checkpoint was taken at; 0 = none yet
  // Peak bytes of the FSDP-owned device buffers so far (shards, moments, gathered and gradient
  // pools; activations not included).
  int64_t fsdp_peak_bytes = 0;
  // Peak bytes of every DeviceBuffer made through this rank's Ops so far (the FSDP buffers
  // above plus the model's activations and workspaces; not the backend's internals).
  int64_t device_buffers_peak_bytes = 0;
  int64_t local_tokens = 0;  // tokens this rank trained on in this step
  int world_size = 1;        // ranks in the job
  // Passes over the training data so far (steps x global batch / sequences).
  std::optional<double> epoch;
  // Model FLOPs utilisation of this rank's step, 0..1 (model/model_flops.h over
  // metrics.peak_tflops); nullopt without a known device peak (CPU by default).
  std::optional<double> mfu;
  // The evaluation run after this step (data.eval_path, train.eval_every); nullopt when none ran.
  std::optional<EvalReport> eval;
};

}  // namespace shardtrain
