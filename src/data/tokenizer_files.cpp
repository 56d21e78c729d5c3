#include "data/tokenizer_files.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_message.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> token_field(const nlohmann::json& config, const char* key) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    const auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return std::nullopt;
}

}  // namespace

TokenizerFiles locate_tokenizer(const std::string& path) {
  std::error_code ignored;
  TokenizerFiles files;
  fs::path json_path = path;
  if (fs::is_directory(json_path, ignored)) json_path /= "tokenizer.json";
  if (!fs::is_regular_file(json_path, ignored)) {
    fail(
        "tokenizer {}: no such file; pass a tokenizer.json file or a Hugging Face model directory "
        "that contains one",
        json_path.string());
  }
  files.tokenizer_json = json_path.string();
  const fs::path config_path = json_path.parent_path() / "tokenizer_config.json";
  if (!fs::is_regular_file(config_path, ignored)) return files;
  files.config_json = config_path.string();

  std::ifstream in(config_path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json config;
  try {
    config = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& error) {
    fail("{}: not valid JSON ({}); fix or remove tokenizer_config.json", files.config_json,
         json_message(error));
  }
  if (!config.is_object()) {
    fail("{}: expected a JSON object; fix or remove tokenizer_config.json", files.config_json);
  }
  files.bos_token = token_field(config, "bos_token");
  files.eos_token = token_field(config, "eos_token");
  files.pad_token = token_field(config, "pad_token");
  if (const auto it = config.find("chat_template"); it != config.end()) {
    if (it->is_string()) {
      files.chat_template = it->get<std::string>();
    } else if (it->is_array()) {
      // Named templates: [{"name": "default", "template": "..."}, ...]; use "default".
      for (const auto& entry : *it) {
        if (entry.is_object() && entry.value("name", "") == "default" &&
            entry.contains("template") && entry["template"].is_string()) {
          files.chat_template = entry["template"].get<std::string>();
        }
      }
    }
  }
  return files;
}

}  // namespace shardtrain
