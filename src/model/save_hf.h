// Saving a model as a Hugging Face checkpoint directory (config.json + model.safetensors)
// that transformers loads with from_pretrained.
#pragma once

#include <functional>
#include <string>

#include "core/dtype.h"
#include "model/model_config.h"
#include "model/param_layout.h"

namespace shardtrain {

// unit_values(u) returns the unit's fp32 values (unit numel), valid until the next call.
using UnitValues = std::function<const float*(int unit)>;

// Writes OUT_DIR/config.json and OUT_DIR/model.safetensors with every parameter in `dtype`
// (bf16 or f32), streaming one tensor at a time. The directory is replaced atomically: the
// files are written into a sibling temp directory that is renamed over OUT_DIR only when
// complete, so an interrupted save never leaves a half-written checkpoint behind.
void save_hf_checkpoint(const std::string& out_dir, const ModelConfig& config,
                        const ParamLayout& layout, const UnitValues& unit_values, DType dtype);

}  // namespace shardtrain
