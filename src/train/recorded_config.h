// The job's config as checkpoints record it: every path made absolute against the working
// directory (so export, resume and tools work from any other directory), rendered as the TOML
// that `shardtrain train --config` reads back.
#pragma once

#include <string>

#include "train/train_config.h"

namespace shardtrain {

// `path` made absolute against the working directory, normalised ("" stays "").
std::string absolute_path(const std::string& path);

// The config with every path key absolute (data paths per comma-separated source; resume's
// "auto" and "never" kept).
TrainConfig with_absolute_paths(TrainConfig config);

// with_absolute_paths(config), every key as TOML.
std::string recorded_config_toml(const TrainConfig& config);

}  // namespace shardtrain
