#include "train/job_model_config.h"

#include <filesystem>

#include "core/error.h"
#include "io/hub/hub_resolver.h"
#include "model/hf_config.h"

namespace shardtrain {

ModelConfig read_job_model_config(const TrainConfig& config, const std::string& context) {
  // A Hub id needs only its config.json (and tokenizer files) here, from the cache or the Hub.
  const std::string model_dir = resolve_hub_path({config.model.path, config.model.revision,
                                                  HubFiles::kConfigAndTokenizer,
                                                  context + "model.path"});
  const std::string config_json = (std::filesystem::path(model_dir) / "config.json").string();
  if (!std::filesystem::exists(config_json)) {
    fail(
        "{}model.path {} has no config.json; HINT: point model.path at a Hugging Face checkpoint "
        "dir",
        context, config.model.path);
  }
  return read_hf_config(config_json);
}

}  // namespace shardtrain
