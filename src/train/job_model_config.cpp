#include "train/job_model_config.h"

#include <filesystem>

#include "core/error.h"
#include "model/hf_config.h"

namespace shardtrain {

ModelConfig read_job_model_config(const TrainConfig& config, const std::string& context) {
  const std::string config_json =
      (std::filesystem::path(config.model.path) / "config.json").string();
  if (!std::filesystem::exists(config_json)) {
    fail(
        "{}model.path {} has no config.json; HINT: point model.path at a Hugging Face checkpoint "
        "dir",
        context, config.model.path);
  }
  return read_hf_config(config_json);
}

}  // namespace shardtrain
