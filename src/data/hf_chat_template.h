// HfChatTemplate: a model's own chat template (tokenizer_config.json's chat_template or
// chat_template.jinja, see data/tokenizer_files.h), rendered as transformers'
// tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=...,
// tokenize=False, **kwargs) renders it:
//   - template choice: a single template; of named ones "tool_use" when tools are given and
//     the file has it, else "default" (an Error when there is none);
//   - variables: the special tokens (bos_token, eos_token, ... as strings,
//     additional_special_tokens as a list), then the extra keyword arguments, then messages,
//     tools (none when absent), documents (none) and add_generation_prompt;
//   - messages and tools keep their JSON key order (tojson output depends on it).
// Errors are shardtrain::Error "TEMPLATE_FILE: line L, column C: what" (the caller appends
// which conversation it was).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/chat/template.h"
#include "data/tokenizer_files.h"

namespace shardtrain {

struct ChatRenderInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null = no tools
  bool add_generation_prompt = false;
  nlohmann::ordered_json extra = nlohmann::ordered_json::object();  // extra template variables
};

class HfChatTemplate {
 public:
  // nullopt when the tokenizer files carry no chat template. Throws Error (naming the file)
  // when a template does not parse.
  static std::optional<HfChatTemplate> load(const TokenizerFiles& files);

  chat::RenderOutput render(const ChatRenderInput& input,
                            const chat::RenderLimits& limits = {}) const;

  // "FILE" or "FILE (template NAME)": what the log says was used.
  std::string describe(bool with_tools = false) const;
  const std::string& file() const { return file_; }
  // The source of the template used without tools (exports copy it).
  const std::string& default_source() const;

 private:
  struct Named {
    std::string name;
    std::string source;
    std::shared_ptr<const chat::Template> compiled;
  };
  const Named& choose(bool with_tools) const;

  std::string file_;
  std::vector<Named> templates_;
  chat::ValueDict special_tokens_;
};

}  // namespace shardtrain
