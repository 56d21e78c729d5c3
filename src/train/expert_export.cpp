#include "train/expert_export.h"

#include <algorithm>

#include "core/error.h"

namespace shardtrain {
void copy_params_by_name(const UnitLayout& from, const float* from_values, const UnitLayout& to,
                         float* to_values) {
  for (const ParamSpec& spec : from.params) {
    const int index = to.find(spec.name);
    SHARDTRAIN_CHECK(index >= 0, "{} not in unit {}", spec.name, to.name);
    const ParamSpec& target = to.params[index];
    std::copy_n(from_values + spec.offset, spec.numel(), to_values + target.offset);
  }
}

ExpertExport::ExpertExport(FsdpUnits& units, const ParamLayout& training, const ModelConfig& config,
                           const LoraConfig& lora)
    : units_(units), training_(training), canonical_(make_param_layout(config, lora)) {
  for (int r = 0; r < training.expert_parallel; ++r) {
    per_rank_.push_back(
        make_param_layout(config, lora, ExpertPlacement{training.expert_parallel, r}));
  }
}

const float* ExpertExport::gather(int u) {
  const UnitLayout& want = canonical_.units[u];
  host_.assign(static_cast<size_t>(want.numel), 0.0f);
  const UnitLayout& have = training_.units[u];
  staged_.assign(static_cast<size_t>(have.numel), 0.0f);
  units_.gather_unit_to_host(u, staged_.data());
  copy_params_by_name(have, staged_.data(), want, host_.data());
  const int64_t layer = u - block_unit(0);
  if (u == kRootUnit || training_.expert_unit[layer] < 0) return host_.data();
  const int experts_unit = training_.expert_unit[layer];
  const int64_t numel = training_.units[experts_unit].numel;
  staged_.assign(static_cast<size_t>(numel) * per_rank_.size(), 0.0f);
  units_.gather_experts_to_host(experts_unit, staged_.data());
  for (size_t r = 0; r < per_rank_.size(); ++r) {
    copy_params_by_name(per_rank_[r].units[experts_unit], staged_.data() + r * numel, want,
                        host_.data());
  }
  return host_.data();
}

}  // namespace shardtrain
