// What an exported Hugging Face dir carries besides the weights, so it tokenizes and chats as
// the model was trained: the tokenizer files of the tokenizer the data was prepared with, and
// the chat template that training used.
//   - the tokenizer dir: --tokenizer DIR of export when given, else the run's data.tokenizer
//     (its directory when it names tokenizer.json), else the run's model.path;
//   - its files (model/save_hf.h tokenizer_files_in: tokenizer.json, tokenizer_config.json,
//     chat_template.jinja, ...): the model's own chat template travels inside them;
//   - a built-in template (data/chat_template.h) is written as chat_template.jinja
//     (data/builtin_chat_jinja.h) when training used one: data.chat_template = chatml, llama2
//     or llama3, or auto / model-less chat data (data.example_format = "chat") on a tokenizer
//     without a template (auto then picks the family's, as prepare does). transformers and
//     shardtrain both prefer chat_template.jinja over tokenizer_config.json's chat_template.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "data/chat_template.h"
#include "data/formats.h"

namespace shardtrain {

struct RunDataSettings {
  std::string tokenizer;                // data.tokenizer ("" = model.path)
  ChatTemplateChoice chat_template = ChatTemplateChoice::kAuto;  // data.chat_template
  ExampleFormatChoice example_format;                            // data.example_format
};

struct ExportedTokenizer {
  std::string dir;                                 // where the files come from
  std::vector<std::string> files;                  // full paths to copy
  std::optional<std::string> chat_template_jinja;  // written as chat_template.jinja
  std::string template_note;                       // for the log: which template, or ""
};

// `tokenizer_override` = export's --tokenizer ("" = from the run). Throws Error naming the
// directory when the override is not a directory holding tokenizer.json.
ExportedTokenizer exported_tokenizer(const RunDataSettings& data, const std::string& model_path,
                                     const std::string& tokenizer_override);

// The [data] settings above from a run's resolved config TOML (a checkpoint's); defaults for
// keys it lacks or a TOML that does not parse.
RunDataSettings run_data_settings_from_toml(const std::string& config_toml);

}  // namespace shardtrain
