// Saving a model as a Hugging Face checkpoint directory (config.json + model.safetensors)
// that transformers loads with from_pretrained.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "model/model_config.h"
#include "model/param_layout.h"

namespace shardtrain {

// unit_values(u) returns the unit's fp32 values (unit numel), valid until the next call.
using UnitValues = std::function<const float*(int unit)>;

struct SaveHfOptions {
  // Above this many bytes of weights, write model-0000K-of-0000N.safetensors files of at most
  // this size each (a larger single tensor gets a file of its own) plus
  // model.safetensors.index.json, as transformers does. 0 = always one model.safetensors.
  uint64_t max_shard_bytes = 0;
  // Files copied into OUT_DIR under their own names (e.g. tokenizer files).
  std::vector<std::string> extra_files;
  // Files written into OUT_DIR: (file name, contents), after extra_files (so they win).
  std::vector<std::pair<std::string, std::string>> extra_contents;
};

// The tokenizer and generation files (tokenizer.json, tokenizer_config.json, ...) present in
// `model_dir`, as full paths: what a saved checkpoint should carry along (SaveHfOptions).
std::vector<std::string> tokenizer_files_in(const std::string& model_dir);

// Writes OUT_DIR/config.json and the weights (see SaveHfOptions) with every parameter in `dtype`
// (bf16 or f32), streaming one tensor at a time; unit_values is called once per unit, in order.
// The directory is replaced atomically: the files are written into a sibling temp directory
// that is renamed over OUT_DIR only when complete, so an interrupted save never leaves a
// half-written checkpoint behind.
void save_hf_checkpoint(const std::string& out_dir, const ModelConfig& config,
                        const ParamLayout& layout, const UnitValues& unit_values, DType dtype,
                        const SaveHfOptions& options = {});

}  // namespace shardtrain
