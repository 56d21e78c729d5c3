#include "data/tokenizer_files.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_message.h"
#include "io/read_file.h"

namespace shardtrain {
namespace {

// tokenizer_config.json and chat_template.jinja: a few KiB to a few MiB (added-token tables).
constexpr std::uintmax_t kMaxTokenizerConfigBytes = std::uintmax_t{64} << 20;

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

void read_config_chat_template(const nlohmann::json& config, TokenizerFiles& files) {
  if (!files.chat_template_file.empty()) return;  // chat_template.jinja wins
  const auto it = config.find("chat_template");
  if (it == config.end()) return;
  if (it->is_string()) {
    files.chat_template = it->get<std::string>();
    files.chat_template_file = files.config_json;
    files.named_chat_templates.emplace_back("default", files.chat_template);
  } else if (it->is_array()) {
    for (const auto& entry : *it) {
      if (!entry.is_object() || !entry.contains("name") || !entry["name"].is_string() ||
          !entry.contains("template") || !entry["template"].is_string()) {
        fail(
            "{}: \"chat_template\" entries must be {{\"name\": ..., \"template\": ...}}; fix "
            "tokenizer_config.json",
            files.config_json);
      }
      files.named_chat_templates.emplace_back(entry["name"].get<std::string>(),
                                              entry["template"].get<std::string>());
      if (entry["name"] == "default") files.chat_template = entry["template"].get<std::string>();
    }
    files.chat_template_file = files.config_json;
  } else if (!it->is_null()) {
    fail("{}: \"chat_template\" must be a string or a list of named templates, got {}",
         files.config_json, it->type_name());
  }
}

// chat_template.jinja beside tokenizer.json (the newer transformers layout).
void read_jinja_file(const fs::path& dir, TokenizerFiles& files) {
  std::error_code ignored;
  const fs::path path = dir / "chat_template.jinja";
  if (!fs::is_regular_file(path, ignored)) return;
  files.chat_template =
      read_small_file(path.string(), kMaxTokenizerConfigBytes, "chat_template.jinja");
  files.chat_template_file = path.string();
  files.named_chat_templates.emplace_back("default", files.chat_template);
}

void read_config_files(const fs::path& dir, TokenizerFiles& files);

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
  read_config_files(json_path.parent_path(), files);
  return files;
}

TokenizerFiles locate_chat_template(const std::string& path) {
  std::error_code ignored;
  const fs::path dir =
      fs::is_directory(path, ignored) ? fs::path(path) : fs::path(path).parent_path();
  if (!fs::is_directory(dir, ignored)) {
    fail("{}: no such directory; pass a Hugging Face model directory with tokenizer_config.json",
         path);
  }
  TokenizerFiles files;
  if (fs::is_regular_file(dir / "tokenizer.json", ignored)) {
    files.tokenizer_json = (dir / "tokenizer.json").string();
  }
  read_config_files(dir, files);
  return files;
}

namespace {

void read_config_files(const fs::path& dir, TokenizerFiles& files) {
  std::error_code ignored;
  read_jinja_file(dir, files);
  const fs::path config_path = dir / "tokenizer_config.json";
  if (!fs::is_regular_file(config_path, ignored)) return;
  files.config_json = config_path.string();

  const std::string text =
      read_small_file(files.config_json, kMaxTokenizerConfigBytes, "tokenizer_config.json");
  nlohmann::json config;
  check_json_nesting(text, files.config_json);
  try {
    config = nlohmann::json::parse(text);
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
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                          "cls_token", "mask_token"}) {
    if (const auto token = token_field(config, key)) files.special_tokens.emplace_back(key, *token);
  }
  if (const auto it = config.find("additional_special_tokens");
      it != config.end() && it->is_array()) {
    for (const auto& entry : *it) {
      if (entry.is_string()) files.additional_special_tokens.push_back(entry.get<std::string>());
      if (entry.is_object() && entry.contains("content") && entry["content"].is_string()) {
        files.additional_special_tokens.push_back(entry["content"].get<std::string>());
      }
    }
  }
  read_config_chat_template(config, files);
}

}  // namespace
}  // namespace shardtrain
