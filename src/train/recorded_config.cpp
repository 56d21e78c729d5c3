#include "train/recorded_config.h"

#include <filesystem>

namespace shardtrain {
namespace {

// absolute_path of each comma-separated source of a data path.
std::string absolute_sources(const std::string& paths) {
  std::string out;
  size_t begin = 0;
  while (begin <= paths.size()) {
    size_t end = paths.find(',', begin);
    if (end == std::string::npos) end = paths.size();
    std::string source = paths.substr(begin, end - begin);
    source.erase(0, source.find_first_not_of(" \t"));
    source.erase(source.find_last_not_of(" \t") + 1);
    if (!out.empty()) out += ",";
    out += absolute_path(source);
    begin = end + 1;
  }
  return out;
}

}  // namespace

std::string absolute_path(const std::string& path) {
  if (path.empty()) return path;
  return std::filesystem::absolute(path).lexically_normal().string();
}

TrainConfig with_absolute_paths(TrainConfig config) {
  config.model.path = absolute_path(config.model.path);
  config.data.path = absolute_sources(config.data.path);
  config.data.eval_path = absolute_sources(config.data.eval_path);
  config.data.tokenizer = absolute_path(config.data.tokenizer);
  config.data.cache_dir = absolute_path(config.data.cache_dir);
  config.train.output_dir = absolute_path(config.train.output_dir);
  config.train.checkpoint_dir = absolute_path(config.train.checkpoint_dir);
  config.lora.adapter = absolute_path(config.lora.adapter);
  if (config.train.resume != "auto" && config.train.resume != "never") {
    config.train.resume = absolute_path(config.train.resume);
  }
  return config;
}

std::string recorded_config_toml(const TrainConfig& config) {
  TrainConfig copy = with_absolute_paths(config);
  ConfigSchema schema;
  copy.register_config(schema);
  return schema.to_toml();
}

}  // namespace shardtrain
