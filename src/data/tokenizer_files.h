// TokenizerFiles: where a model's tokenizer lives and what its tokenizer_config.json says about
// special tokens and the chat template.
//
// locate_tokenizer(path) accepts either a tokenizer.json file or a directory containing one (a
// Hugging Face checkpoint dir). tokenizer_config.json is read from the same directory when it is
// present; it is optional. Token fields may be plain strings or {"content": ...} objects (both
// forms occur in published files); null or absent means "not set".
// chat_template is read as transformers reads it: a chat_template.jinja file beside
// tokenizer.json wins; else tokenizer_config.json's "chat_template", either a string or the list
// form [{"name": ..., "template": ...}] (all kept in named_chat_templates; chat_template is the
// "default" one, "" when there is none).
// special_tokens holds the strings of transformers' special_tokens_map that are set (bos_token,
// eos_token, unk_token, sep_token, pad_token, cls_token, mask_token), in that order; templates
// see them as variables.
// Throws shardtrain::Error naming the path when tokenizer.json is missing or tokenizer_config.json
// is not a JSON object. The tokenizer itself is loaded separately (Tokenizer::load).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain {

struct TokenizerFiles {
  std::string tokenizer_json;  // path of tokenizer.json
  std::string config_json;     // path of tokenizer_config.json, "" when absent
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::string chat_template;       // the Jinja source, "" when absent
  std::string chat_template_file;  // where chat_template came from ("" when absent)
  std::vector<std::pair<std::string, std::string>> named_chat_templates;  // (name, source)
  std::vector<std::pair<std::string, std::string>> special_tokens;        // (key, token)
  std::vector<std::string> additional_special_tokens;
};

TokenizerFiles locate_tokenizer(const std::string& path);

// As locate_tokenizer, for what only needs the chat template (render): `path` is a model
// directory (or a file in it); tokenizer.json may be absent (tokenizer_json is then "").
TokenizerFiles locate_chat_template(const std::string& path);

}  // namespace shardtrain
