#include "obs/rank_snapshot.h"

#include "core/error.h"

namespace shardtrain {
namespace {

nlohmann::json optional_json(const std::optional<double>& value) {
  return value ? nlohmann::json(*value) : nlohmann::json(nullptr);
}

std::optional<double> optional_from(const nlohmann::json& json, const char* key) {
  const nlohmann::json& v = json.at(key);
  if (v.is_null()) return std::nullopt;
  return v.get<double>();
}

}  // namespace

std::vector<double> step_seconds_bounds() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};
}

nlohmann::json snapshot_to_json(const RankSnapshot& s) {
  return {{"instance", s.instance},
          {"rank", s.rank},
          {"local_rank", s.local_rank},
          {"world_size", s.world_size},
          {"step", s.step},
          {"total_steps", s.total_steps},
          {"epoch", optional_json(s.epoch)},
          {"loss", s.loss},
          {"learning_rate", s.learning_rate},
          {"grad_norm", s.grad_norm},
          {"aux_loss", optional_json(s.aux_loss)},
          {"tokens_per_second", s.tokens_per_second},
          {"mfu", optional_json(s.mfu)},
          {"eval_loss", optional_json(s.eval_loss)},
          {"eval_perplexity", optional_json(s.eval_perplexity)},
          {"step_seconds", s.step_seconds},
          {"data_wait_seconds", s.data_wait_seconds},
          {"checkpoint_stall_seconds", s.checkpoint_stall_seconds},
          {"exposed_communication_seconds", optional_json(s.exposed_communication_seconds)},
          {"host_wait_seconds", optional_json(s.host_wait_seconds)},
          {"last_checkpoint_step", s.last_checkpoint_step},
          {"device_memory_peak_bytes", s.device_memory_peak_bytes},
          {"resident_memory_bytes", s.resident_memory_bytes},
          {"tokens_total", s.tokens_total},
          {"steps_total", s.steps_total},
          {"step_seconds_bounds", s.step_seconds_histogram.bounds},
          {"step_seconds_counts", s.step_seconds_histogram.counts},
          {"step_seconds_sum", s.step_seconds_histogram.sum}};
}

RankSnapshot snapshot_from_json(const nlohmann::json& j, const std::string& source) {
  try {
    RankSnapshot s;
    s.instance = j.at("instance").get<std::string>();
    s.rank = j.at("rank").get<int>();
    s.local_rank = j.at("local_rank").get<int>();
    s.world_size = j.at("world_size").get<int>();
    s.step = j.at("step").get<int64_t>();
    s.total_steps = j.at("total_steps").get<int64_t>();
    s.epoch = optional_from(j, "epoch");
    s.loss = j.at("loss").get<double>();
    s.learning_rate = j.at("learning_rate").get<double>();
    s.grad_norm = j.at("grad_norm").get<double>();
    if (j.contains("aux_loss")) s.aux_loss = optional_from(j, "aux_loss");
    s.tokens_per_second = j.at("tokens_per_second").get<double>();
    s.mfu = optional_from(j, "mfu");
    if (j.contains("eval_loss")) s.eval_loss = optional_from(j, "eval_loss");
    if (j.contains("eval_perplexity")) s.eval_perplexity = optional_from(j, "eval_perplexity");
    s.step_seconds = j.at("step_seconds").get<double>();
    s.data_wait_seconds = j.at("data_wait_seconds").get<double>();
    s.checkpoint_stall_seconds = j.at("checkpoint_stall_seconds").get<double>();
    s.exposed_communication_seconds = optional_from(j, "exposed_communication_seconds");
    if (j.contains("host_wait_seconds"))
      s.host_wait_seconds = optional_from(j, "host_wait_seconds");
    s.last_checkpoint_step = j.at("last_checkpoint_step").get<int64_t>();
    s.device_memory_peak_bytes = j.at("device_memory_peak_bytes").get<double>();
    s.resident_memory_bytes = j.at("resident_memory_bytes").get<double>();
    s.tokens_total = j.at("tokens_total").get<double>();
    s.steps_total = j.at("steps_total").get<double>();
    s.step_seconds_histogram.bounds = j.at("step_seconds_bounds").get<std::vector<double>>();
    s.step_seconds_histogram.counts = j.at("step_seconds_counts").get<std::vector<uint64_t>>();
    s.step_seconds_histogram.sum = j.at("step_seconds_sum").get<double>();
    if (s.step_seconds_histogram.counts.size() != s.step_seconds_histogram.bounds.size() + 1) {
      fail("rank metrics {}: step_seconds_counts must have one entry more than the bounds", source);
    }
    return s;
  } catch (const nlohmann::json::exception& e) {
    fail(
        "rank metrics {} is malformed ({}); HINT: it is written by a shardtrain worker of the "
        "same version",
        source, e.what());
  }
}

}  // namespace shardtrain
