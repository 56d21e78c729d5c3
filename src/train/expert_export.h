// Export under expert parallelism: the Hugging Face checkpoint is written from the model's
// canonical layout (every expert inside its block, model/param_layout.h without placement),
// while each rank trains a layout of its own experts. This turns the training units into the
// canonical units for save_hf_checkpoint, parameter by parameter (matched by name): a sparse
// block is its training unit (attention, router, norms) plus every expert rank's unit of
// experts (FsdpUnits::gather_experts_to_host). Collective: every rank calls gather(u) for every
// canonical unit in order.
#pragma once

#include <functional>
#include <vector>

#include "fsdp/fsdp_units.h"
#include "model/model_config.h"
#include "model/param_layout.h"

namespace shardtrain {

// Copies every parameter of `from` (values laid out as `from`) to where `to` has it (by name).
// REQUIRES: `to` has every parameter of `from`.
void copy_params_by_name(const UnitLayout& from, const float* from_values, const UnitLayout& to,
                         float* to_values);

class ExpertExport {
 public:
  // `units` and `training` (this rank's layout, ParamLayout::expert_parallel > 1) must outlive
  // this object.
  ExpertExport(FsdpUnits& units, const ParamLayout& training, const ModelConfig& config,
               const LoraConfig& lora);
  const ParamLayout& canonical() const { return canonical_; }
  // Canonical unit u's values (its numel floats), valid until the next call.
  const float* gather(int u);

 private:
  FsdpUnits& units_;
  const ParamLayout& training_;
  ParamLayout canonical_;
  std::vector<ParamLayout> per_rank_;  // each expert rank's layout (the names of its experts)
  std::vector<float> host_, staged_;
};

}  // namespace shardtrain
