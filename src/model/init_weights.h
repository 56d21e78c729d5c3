// Filling a unit's flat fp32 parameters: random initialisation from the config alone, or
// values read from a Hugging Face checkpoint.
#pragma once

#include <cstdint>

#include "io/hf_checkpoint.h"
#include "model/model_config.h"
#include "model/param_layout.h"

namespace shardtrain {

// transformers-style init: linear and embedding weights ~ N(0, std), norm weights 1 (0 where
// ParamSpec::zero_init: Gemma's 1 + weight norms), biases 0.
// Deterministic in (seed, unit index, element index) on every platform: the same unit gets
// the same values whatever the world size. dst_unit holds unit.numel floats; padding is zeroed.
void init_unit_random(const UnitLayout& unit, int unit_index, uint64_t seed, double std,
                      float* dst_unit);

// Reads every parameter of `unit` from the checkpoint, converting to fp32. Throws Error naming
// the checkpoint and tensor when a tensor is missing or has the wrong shape.
void load_unit_from_checkpoint(const HfCheckpoint& checkpoint, const UnitLayout& unit,
                               float* dst_unit);

}  // namespace shardtrain
