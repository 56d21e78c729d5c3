// TokenizerFiles: where a model's tokenizer lives and what its tokenizer_config.json says about
// special tokens and the chat template.
//
// locate_tokenizer(path) accepts either a tokenizer.json file or a directory containing one (a
// Hugging Face checkpoint dir). tokenizer_config.json is read from the same directory when it is
// present; it is optional. Token fields may be plain strings or {"content": ...} objects (both
// forms occur in published files); null or absent means "not set".
// Throws shardtrain::Error naming the path when tokenizer.json is missing or tokenizer_config.json
// is not a JSON object. The tokenizer itself is loaded separately (Tokenizer::load).
#pragma once

#include <optional>
#include <string>

namespace shardtrain {

struct TokenizerFiles {
  std::string tokenizer_json;  // path of tokenizer.json
  std::string config_json;     // path of tokenizer_config.json, "" when absent
  std::optional<std::string> bos_token;
  std::optional<std::string> eos_token;
  std::optional<std::string> pad_token;
  std::string chat_template;  // the Jinja source, "" when absent
};

TokenizerFiles locate_tokenizer(const std::string& path);

}  // namespace shardtrain
