#include "data/hf_chat_template.h"

#include "core/error.h"

namespace shardtrain {

std::optional<HfChatTemplate> HfChatTemplate::load(const TokenizerFiles& files) {
  if (files.named_chat_templates.empty()) return std::nullopt;
  HfChatTemplate result;
  result.file_ = files.chat_template_file;
  for (const auto& [name, source] : files.named_chat_templates) {
    try {
      result.templates_.push_back({name, source, std::make_shared<const chat::Template>(source)});
    } catch (const Error& error) {
      const std::string which =
          files.named_chat_templates.size() > 1 ? " (template \"" + name + "\")" : "";
      fail("{}{}: {}; fix the chat template or pass --chat-template to use a built-in one",
           result.file_, which, error.what());
    }
  }
  for (const auto& [key, token] : files.special_tokens) {
    result.special_tokens_.set(key, chat::Value::string(token));
  }
  if (!files.additional_special_tokens.empty()) {
    std::vector<chat::Value> tokens;
    for (const auto& token : files.additional_special_tokens) {
      tokens.push_back(chat::Value::string(token));
    }
    result.special_tokens_.set("additional_special_tokens", chat::Value::list(std::move(tokens)));
  }
  return result;
}

const HfChatTemplate::Named& HfChatTemplate::choose(bool with_tools) const {
  if (templates_.size() == 1) return templates_[0];
  const Named* fallback = nullptr;
  for (const Named& named : templates_) {
    if (with_tools && named.name == "tool_use") return named;
    if (named.name == "default") fallback = &named;
  }
  if (!fallback) {
    fail("{}: the chat templates have no \"default\" entry; name one \"default\"", file_);
  }
  return *fallback;
}

const std::string& HfChatTemplate::default_source() const { return choose(false).source; }

std::string HfChatTemplate::describe(bool with_tools) const {
  if (templates_.size() == 1) return file_;
  return file_ + " (template \"" + choose(with_tools).name + "\")";
}

chat::RenderOutput HfChatTemplate::render(const ChatRenderInput& input,
                                          const chat::RenderLimits& limits) const {
  const bool with_tools = !input.tools.is_null();
  const Named& named = choose(with_tools);
  chat::ValueDict variables = special_tokens_;
  if (input.extra.is_object()) {
    for (const auto& [key, value] : input.extra.items()) {
      variables.set(key, chat::Value::from_json(value));
    }
  }
  variables.set("messages", chat::Value::from_json(input.messages));
  variables.set("tools", chat::Value::from_json(input.tools));
  variables.set("documents", chat::Value::none());
  variables.set("add_generation_prompt", chat::Value::boolean(input.add_generation_prompt));
  try {
    return named.compiled->render(variables, limits);
  } catch (const Error& error) {
    fail("{}: {}", describe(with_tools), error.what());
  }
}

}  // namespace shardtrain
