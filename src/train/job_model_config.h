// The model a job config names: the Hugging Face config.json in its model.path, for the commands
// that size a job without training it (plan, doctor's checkpoint-space check).
#pragma once

#include <string>

#include "model/model_config.h"
#include "train/train_config.h"

namespace shardtrain {

// Reads model.path/config.json (model/hf_config.h; a Hub id "org/name" through the Hugging Face
// cache, io/hub/hub_resolver.h). Throws Error naming model.path, after
// `context` (e.g. "--config job.toml: "), when that dir holds no config.json.
ModelConfig read_job_model_config(const TrainConfig& config, const std::string& context = "");

}  // namespace shardtrain
