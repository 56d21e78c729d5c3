#include "train/run_length.h"

#include <fmt/format.h>

#include <optional>

#include "core/error.h"

namespace shardtrain {
namespace {

std::optional<TrainConfig> load_saved_config(const std::string& toml) {
  if (toml.empty()) return std::nullopt;
  TrainConfig saved;
  ConfigSchema schema;
  saved.register_config(schema);
  try {
    schema.load_toml_text(toml, "checkpoint config");
  } catch (const Error&) {
    return std::nullopt;
  }
  return saved;
}

template <typename T>
void note_change(std::vector<std::string>& changes, const char* what, const T& before,
                 const T& now) {
  if (before != now) changes.push_back(fmt::format("{}: {} -> {}", what, before, now));
}

}  // namespace

RunLength plan_run_length(const TrainConfig& config, size_t sequences, int world) {
  RunLength run;
  run.total_steps = config.total_steps_for(sequences, world);
  run.global_batch = config.global_batch_for(world);
  run.schedule = config.optim;
  if (run.schedule.warmup_steps > run.total_steps) {
    run.warnings.push_back(
        fmt::format("optim.warmup_steps ({}) is longer than the run ({} steps); clamped to {}",
                    run.schedule.warmup_steps, run.total_steps, run.total_steps));
    run.schedule.warmup_steps = run.total_steps;
  }
  return run;
}

std::vector<std::string> resume_changes(const SavedRun& saved, const TrainConfig& now, int world,
                                        int64_t now_total_steps) {
  std::vector<std::string> changes;
  if (saved.total_steps > 0) note_change(changes, "steps", saved.total_steps, now_total_steps);
  const std::optional<TrainConfig> before = load_saved_config(saved.config_toml);
  if (!before) return changes;
  int64_t saved_batch = 0;
  try {
    saved_batch = before->global_batch_for(saved.world_size);
  } catch (const Error&) {
    return changes;
  }
  note_change(changes, "global batch (sequences per step)", saved_batch,
              now.global_batch_for(world));
  note_change(changes, "optim.schedule", choice_name(lr_schedule_names(), before->optim.schedule),
              choice_name(lr_schedule_names(), now.optim.schedule));
  note_change(changes, "optim.lr", before->optim.lr, now.optim.lr);
  note_change(changes, "optim.min_lr", before->optim.min_lr, now.optim.min_lr);
  note_change(changes, "optim.warmup_steps", before->optim.warmup_steps, now.optim.warmup_steps);
  return changes;
}

}  // namespace shardtrain
