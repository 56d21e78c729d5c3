#include "obs/training_metrics.h"

#include <functional>
#include <optional>

namespace shardtrain {
namespace {

// One per-rank family: its name, help, type and how to read its value from a snapshot.
struct RankFamily {
  const char* name;
  const char* help;
  MetricType type;
  std::function<std::optional<double>(const RankSnapshot&, const GroupState&)> value;
};

std::optional<double> as_double(int64_t v) { return static_cast<double>(v); }

const std::vector<RankFamily>& rank_families() {
  using S = const RankSnapshot&;
  using G = const GroupState&;
  constexpr MetricType kGauge = MetricType::kGauge, kCounter = MetricType::kCounter;
  static const std::vector<RankFamily> families = {
      {"shardtrain_step", "Last completed optimizer step.", kGauge,
       [](S s, G) { return as_double(s.step); }},
      {"shardtrain_steps_planned", "Optimizer steps the run is configured for.", kGauge,
       [](S s, G) { return as_double(s.total_steps); }},
      {"shardtrain_epoch", "Passes over the training data so far (fractional).", kGauge,
       [](S s, G) { return s.epoch; }},
      {"shardtrain_loss", "Mean training loss of the last step (all ranks).", kGauge,
       [](S s, G) { return std::optional<double>(s.loss); }},
      {"shardtrain_learning_rate", "Learning rate of the last step.", kGauge,
       [](S s, G) { return std::optional<double>(s.learning_rate); }},
      {"shardtrain_grad_norm", "Global gradient norm of the last step, before clipping.", kGauge,
       [](S s, G) { return std::optional<double>(s.grad_norm); }},
      {"shardtrain_aux_loss",
       "Mixture-of-experts load-balancing loss of the last step (all ranks), before its "
       "coefficient.",
       kGauge, [](S s, G) { return s.aux_loss; }},
      {"shardtrain_tokens_per_second", "Tokens per second of this rank (GPU) in the last step.",
       kGauge, [](S s, G) { return std::optional<double>(s.tokens_per_second); }},
      {"shardtrain_eval_loss", "Mean loss of the last evaluation on data.eval_path (all ranks).",
       kGauge, [](S s, G) { return s.eval_loss; }},
      {"shardtrain_eval_perplexity", "Perplexity of the last evaluation on data.eval_path.", kGauge,
       [](S s, G) { return s.eval_perplexity; }},
      {"shardtrain_mfu_ratio",
       "Model FLOPs utilisation of this rank in the last step (metrics.peak_tflops).", kGauge,
       [](S s, G) { return s.mfu; }},
      {"shardtrain_step_time_seconds", "Wall time of the last step.", kGauge,
       [](S s, G) { return std::optional<double>(s.step_seconds); }},
      {"shardtrain_data_wait_seconds", "Time the last step waited for its batches.", kGauge,
       [](S s, G) { return std::optional<double>(s.data_wait_seconds); }},
      {"shardtrain_exposed_communication_seconds",
       "Time the last step's compute waited for collectives.", kGauge,
       [](S s, G) { return s.exposed_communication_seconds; }},
      {"shardtrain_host_wait_seconds",
       "Time the last step's host waited for its GPU (near the step time: the GPU sets the pace).",
       kGauge, [](S s, G) { return s.host_wait_seconds; }},
      {"shardtrain_checkpoint_stall_seconds", "Time the last step stood still for checkpointing.",
       kGauge, [](S s, G) { return std::optional<double>(s.checkpoint_stall_seconds); }},
      {"shardtrain_last_checkpoint_step", "Step of the newest checkpoint taken (0 = none).", kGauge,
       [](S s, G) { return as_double(s.last_checkpoint_step); }},
      {"shardtrain_world_size", "Ranks in the worker group.", kGauge,
       [](S s, G) { return as_double(s.world_size); }},
      {"shardtrain_rendezvous_generation", "Rendezvous generation of the worker group.", kGauge,
       [](S, G g) { return as_double(g.generation); }},
      {"shardtrain_device_memory_peak_bytes",
       "Peak bytes held in this rank's device buffers (host memory on CPU ranks).", kGauge,
       [](S s, G) { return std::optional<double>(s.device_memory_peak_bytes); }},
      {"shardtrain_process_resident_memory_bytes", "Resident set size of the rank's process.",
       kGauge, [](S s, G) { return std::optional<double>(s.resident_memory_bytes); }},
      {"shardtrain_tokens_total", "Tokens this rank has trained on in this run.", kCounter,
       [](S s, G) { return std::optional<double>(s.tokens_total); }},
      {"shardtrain_steps_total", "Optimizer steps this rank has completed in this run.", kCounter,
       [](S s, G) { return std::optional<double>(s.steps_total); }},
      {"shardtrain_restarts_total", "Restarts of the worker group in this run.", kCounter,
       [](S, G g) { return as_double(g.restarts); }},
  };
  return families;
}

}  // namespace

MetricLabels rank_labels(const NodeIdentity& node, const RankSnapshot& snapshot) {
  MetricLabels labels = {{"rank", std::to_string(snapshot.rank)},
                         {"local_rank", std::to_string(snapshot.local_rank)},
                         {"node", node.node},
                         {"run_id", node.run_id}};
  if (!node.pod.empty()) labels.emplace_back("pod", node.pod);
  if (!node.pod_namespace.empty()) labels.emplace_back("namespace", node.pod_namespace);
  return labels;
}

void add_training_families(Exposition& out, const NodeIdentity& node, const GroupState& group,
                           const std::vector<RankSnapshot>& ranks) {
  for (const RankFamily& f : rank_families()) {
    MetricFamily& family = out.family(f.name, f.help, f.type);
    for (const RankSnapshot& s : ranks) {
      if (const std::optional<double> v = f.value(s, group)) family.add(rank_labels(node, s), *v);
    }
  }
  MetricFamily& histogram =
      out.family("shardtrain_step_duration_seconds",
                 "Wall time of the optimizer steps of this rank.", MetricType::kHistogram);
  for (const RankSnapshot& s : ranks) {
    histogram.add(rank_labels(node, s), s.step_seconds_histogram);
  }
}

}  // namespace shardtrain
