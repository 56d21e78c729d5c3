#include "data/tokenizer/json_config.h"

#include "core/error.h"

namespace shardtrain::tokenizer {
namespace {

const nlohmann::json* find_field(const nlohmann::json& config, std::string_view key) {
  if (!config.is_object()) return nullptr;
  auto it = config.find(std::string(key));
  if (it == config.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

ConfigSite ConfigSite::child(std::string_view key) const {
  return {file, location.empty() ? std::string(key) : location + "." + std::string(key)};
}

ConfigSite ConfigSite::element(size_t index) const {
  return {file, location + "[" + std::to_string(index) + "]"};
}

std::string component_type(const nlohmann::json& config, const ConfigSite& site) {
  if (!config.is_object()) {
    fail("{}: {} must be a JSON object with a \"type\"; the tokenizer.json is malformed", site.file,
         site.location);
  }
  return string_field(config, "type", site);
}

std::string string_field(const nlohmann::json& config, std::string_view key,
                         const ConfigSite& site) {
  const nlohmann::json* value = find_field(config, key);
  if (value == nullptr || !value->is_string()) {
    fail("{}: {}.{} must be a string; the tokenizer.json is malformed", site.file, site.location,
         key);
  }
  return value->get<std::string>();
}

bool bool_field(const nlohmann::json& config, std::string_view key, bool default_value,
                const ConfigSite& site) {
  const nlohmann::json* value = find_field(config, key);
  if (value == nullptr) return default_value;
  if (!value->is_boolean()) {
    fail("{}: {}.{} must be true or false", site.file, site.location, key);
  }
  return value->get<bool>();
}

int64_t int_field(const nlohmann::json& config, std::string_view key, int64_t default_value,
                  const ConfigSite& site) {
  const nlohmann::json* value = find_field(config, key);
  if (value == nullptr) return default_value;
  if (!value->is_number_integer()) {
    fail("{}: {}.{} must be an integer", site.file, site.location, key);
  }
  return value->get<int64_t>();
}

const nlohmann::json& array_field(const nlohmann::json& config, std::string_view key,
                                  const ConfigSite& site) {
  const nlohmann::json* value = find_field(config, key);
  if (value == nullptr || !value->is_array()) {
    fail("{}: {}.{} must be an array; the tokenizer.json is malformed", site.file, site.location,
         key);
  }
  return *value;
}

void fail_unsupported(std::string_view what, std::string_view type, const ConfigSite& site) {
  fail(
      "{}: {}: unsupported {} type '{}'; shardtrain's tokenizer handles the BPE family used by "
      "Llama 2/3, Qwen and Mistral",
      site.file, site.location, what, type);
}

}  // namespace shardtrain::tokenizer
