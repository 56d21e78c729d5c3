#include "train/rank_metrics_publisher.h"

#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "dist/host_name.h"
#include "io/atomic_file.h"
#include "obs/process_memory.h"

namespace shardtrain {
namespace {

constexpr std::chrono::milliseconds kMinWriteInterval{250};

}  // namespace

RankMetricsPublisher::RankMetricsPublisher(const MetricsConfig& config, const WorkerEnv& env) {
  snapshot_.instance =
      fmt::format("{}-{}", ::getpid(), std::chrono::system_clock::now().time_since_epoch().count());
  snapshot_.rank = env.rank;
  snapshot_.local_rank = env.local_rank;
  snapshot_.world_size = env.world;
  snapshot_.step_seconds_histogram = HistogramValue::with_bounds(step_seconds_bounds());
  if (!env.run_id.empty()) {
    if (env.metrics_dir.empty() && config.endpoint_options().enabled() && env.rank == 0) {
      log::warn(
          "metrics: metrics.port is set, but under shardtrain launch the launcher serves "
          "/metrics; HINT: pass --metrics-port to shardtrain launch");
    }
    if (!env.metrics_dir.empty()) {
      file_ =
          (std::filesystem::path(env.metrics_dir) / fmt::format("local-{}.json", env.local_rank))
              .string();
    }
    return;
  }
  if (!config.endpoint_options().enabled() || env.local_rank != 0) return;
  NodeIdentity identity;
  identity.run_id = "none";
  identity.pod = env.pod.name;
  identity.pod_namespace = env.pod.namespace_name;
  identity.hostname = host_name();
  endpoint_ = std::make_unique<NodeMetricsEndpoint>(
      config.endpoint_options(), identity,
      [this] {
        std::lock_guard<std::mutex> lock(mutex_);
        if (snapshot_.steps_total == 0) return std::vector<RankSnapshot>{};  // no step yet
        return std::vector<RankSnapshot>{snapshot_};
      },
      "metrics.port");
}

RankMetricsPublisher::~RankMetricsPublisher() { endpoint_.reset(); }

void RankMetricsPublisher::publish(const StepReport& r) {
  if (!active()) return;
  std::string json;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    RankSnapshot& s = snapshot_;
    s.world_size = r.world_size;
    s.step = r.step;
    s.total_steps = r.total_steps;
    s.epoch = r.epoch;
    s.loss = r.loss;
    s.learning_rate = r.lr;
    s.grad_norm = r.grad_norm;
    s.aux_loss = r.aux_loss;
    s.tokens_per_second =
        r.step_time_s > 0 ? static_cast<double>(r.local_tokens) / r.step_time_s : 0;
    s.mfu = r.mfu;
    if (r.eval) {
      s.eval_loss = r.eval->loss;
      s.eval_perplexity = r.eval->perplexity;
    }
    s.step_seconds = r.step_time_s;
    s.data_wait_seconds = r.data_wait_s;
    s.checkpoint_stall_seconds = r.checkpoint_stall_s.value_or(0.0);
    s.exposed_communication_seconds = r.exposed_comm_s;
    s.host_wait_seconds = r.host_wait_s;
    s.last_checkpoint_step = r.last_checkpoint_step;
    s.device_memory_peak_bytes = static_cast<double>(r.device_buffers_peak_bytes);
    s.resident_memory_bytes = static_cast<double>(process_resident_bytes());
    s.tokens_total += static_cast<double>(r.local_tokens);
    s.steps_total += 1;
    s.step_seconds_histogram.observe(r.step_time_s);
    if (file_.empty()) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_write_ < kMinWriteInterval && r.step != r.total_steps) return;
    last_write_ = now;
    json = snapshot_to_json(s).dump();
  }
  try {
    // The agent polls this file; it needs whole contents, not durability (no fsync on the
    // training thread every 250 ms).
    write_file_atomically(file_, json, Durability::kVisibleOnly);
  } catch (const Error& error) {
    // The agent removed its directory (it is ending the run): metrics are not worth a failure.
    log::warn("metrics: cannot publish this rank's metrics ({}); stopping", error.what());
    file_.clear();
  }
}

}  // namespace shardtrain
