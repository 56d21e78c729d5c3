#include "train/checkpoint/export_tokenizer.h"

#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "data/builtin_chat_jinja.h"
#include "data/chat_template.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer_files.h"
#include "model/save_hf.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

std::string tokenizer_dir_of(const RunDataSettings& data, const std::string& model_path,
                             const std::string& tokenizer_override) {
  if (!tokenizer_override.empty()) {
    std::error_code ec;
    if (!fs::is_regular_file(fs::path(tokenizer_override) / "tokenizer.json", ec)) {
      fail(
          "export --tokenizer {}: not a directory with tokenizer.json; HINT: pass the Hugging "
          "Face model or tokenizer dir the data was tokenized with",
          tokenizer_override);
    }
    return tokenizer_override;
  }
  if (data.tokenizer.empty()) return model_path;
  std::error_code ec;
  if (fs::is_regular_file(data.tokenizer, ec)) return fs::path(data.tokenizer).parent_path();
  return data.tokenizer;
}

// The built-in template training used, or nullopt (the model's own, or not chat data).
std::optional<ChatTemplate> builtin_template_used(const RunDataSettings& data,
                                                  const std::string& dir) {
  if (const auto builtin = builtin_template_of(data.chat_template)) return builtin;
  if (data.chat_template != ChatTemplateChoice::kAuto ||
      data.example_format != ExampleFormat::kChat) {
    return std::nullopt;
  }
  std::error_code ec;
  if (!fs::is_regular_file(fs::path(dir) / "tokenizer.json", ec)) return std::nullopt;
  const TokenizerFiles files = locate_tokenizer(dir);
  if (!files.chat_template.empty()) return std::nullopt;  // the model's own travels with it
  const Tokenizer tokenizer = Tokenizer::load(files.tokenizer_json);
  return detect_chat_template(
      files, [&](const char* token) { return tokenizer.token_to_id(token).has_value(); });
}

}  // namespace

ExportedTokenizer exported_tokenizer(const RunDataSettings& data, const std::string& model_path,
                                     const std::string& tokenizer_override) {
  ExportedTokenizer out;
  out.dir = tokenizer_dir_of(data, model_path, tokenizer_override);
  out.files = tokenizer_files_in(out.dir);
  const std::optional<ChatTemplate> builtin = builtin_template_used(data, out.dir);
  if (!builtin) return out;
  std::error_code ec;
  TokenizerFiles files;
  if (fs::is_regular_file(fs::path(out.dir) / "tokenizer.json", ec)) {
    files = locate_tokenizer(out.dir);
  }
  out.chat_template_jinja = builtin_chat_template_jinja(*builtin, chat_tokens(*builtin, files));
  out.template_note = std::string("built-in ") + chat_template_name(*builtin);
  // Ours replaces a chat_template.jinja the tokenizer dir may hold.
  out.files.erase(std::remove_if(out.files.begin(), out.files.end(),
                                 [](const std::string& file) {
                                   return fs::path(file).filename() == "chat_template.jinja";
                                 }),
                  out.files.end());
  return out;
}

RunDataSettings run_data_settings_from_toml(const std::string& config_toml) {
  RunDataSettings settings;
  try {
    const toml::table root = toml::parse(config_toml);
    settings.tokenizer = root["data"]["tokenizer"].value_or(settings.tokenizer);
    // The run's saved config: written by train, so its names are ours; a value that is not
    // (a hand-edited file) keeps the default, as a missing key does.
    const auto read_choice = [&](const char* key, auto& target, const auto& names) {
      const std::string name = root["data"][key].value_or(choice_name(names, target));
      for (const auto& [known, value] : names)
        if (known == name) target = value;
    };
    read_choice("chat_template", settings.chat_template, chat_template_choice_names());
    read_choice("example_format", settings.example_format, example_format_choice_names());
  } catch (const toml::parse_error&) {
  }
  return settings;
}

}  // namespace shardtrain
