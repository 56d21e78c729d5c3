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
  // Dirs OUT_DIR must not be (the input model dir, the checkpoint being exported).
  std::vector<std::string> protected_dirs;
};

// The tokenizer and generation files (tokenizer.json, tokenizer_config.json, ...) present in
// `model_dir`, as full paths: what a saved checkpoint should carry along (SaveHfOptions).
std::vector<std::string> tokenizer_files_in(const std::string& model_dir);

// Writes OUT_DIR/config.json and the weights (see SaveHfOptions) with every parameter in `dtype`
// (bf16 or f32), streaming one tensor at a time; unit_values is called once per unit, in order.
// Only the files this writes are touched: config.json, the weight files and index, the extra
// files. The save is whole or nothing: every new file is first written completely into a
// staging dir inside OUT_DIR (OUT_DIR/.shardtrain-save.PID); only then are they moved over the
// old ones (weights first, config.json last). When writing fails (unit_values throws, a full
// disk, a file-size limit) the staging dir is removed and the old files are all still there,
// unchanged: old weights never sit beside a new tokenizer. Weight files of an earlier save that
// this one did not write (model.safetensors, model-0000K-of-0000N.safetensors, the index) are
// removed after the move, so old and new weights never mix; every other file in OUT_DIR is left
// as it was. A dir this save created is removed again when the save fails. A staging dir left
// by a killed save is removed by the next save (the caller holds OUT_DIR's lock).
// Throws Error when OUT_DIR is a file, is one of options.protected_dirs, or holds sharded
// training checkpoints (step_*/manifest.json), before anything is written.
void save_hf_checkpoint(const std::string& out_dir, const ModelConfig& config,
                        const ParamLayout& layout, const UnitValues& unit_values, DType dtype,
                        const SaveHfOptions& options = {});

}  // namespace shardtrain
