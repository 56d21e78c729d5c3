// Config files and overrides as users type them on a command line (train, plan):
//   --config a.toml --config b.toml     layered in order, later files win (each still checked
//                                       for unknown keys, which are named with the file)
//   --section.key=value                 an override
//   --section.key value                 the same, space separated
//   --train.max-grad-norm 0.5           dashes in keys read as underscores (ConfigSchema)
// Overrides apply after every file, in the order given.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace shardtrain::cli {

// "section.key=value" assignments from the words CLI11 left over (its remaining()). Throws Error
// for a word that is not an override, and for an override without a value.
std::vector<std::string> config_assignments(const std::vector<std::string>& extras);

// Loads `config_paths` in order, then applies config_assignments(extras).
void apply_config_args(ConfigSchema& schema, const std::vector<std::string>& config_paths,
                       const std::vector<std::string>& extras);

}  // namespace shardtrain::cli
