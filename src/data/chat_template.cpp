#include "data/chat_template.h"

#include "core/error.h"

namespace shardtrain {
namespace {

std::string strip_ascii(const std::string& text) {
  const char* const kSpace = " \t\n\r\f\v";
  const size_t first = text.find_first_not_of(kSpace);
  if (first == std::string::npos) return "";
  const size_t last = text.find_last_not_of(kSpace);
  return text.substr(first, last - first + 1);
}

TextPart text(std::string value, bool trained) { return {std::move(value), trained, false}; }
TextPart special(std::string value, bool trained) { return {std::move(value), trained, true}; }

void render_chatml(const std::vector<ChatMessage>& messages, bool train_on_prompt,
                   RenderedDocument& out) {
  for (const ChatMessage& message : messages) {
    const bool trained = train_on_prompt || message.role == "assistant";
    out.parts.push_back(special("<|im_start|>", train_on_prompt));
    out.parts.push_back(text(message.role + "\n", train_on_prompt));
    out.parts.push_back(text(message.content, trained));
    out.parts.push_back(special("<|im_end|>", trained));
    out.parts.push_back(text("\n", train_on_prompt));
  }
}

void render_llama3(const std::vector<ChatMessage>& messages, const ChatTokens& tokens,
                   bool train_on_prompt, RenderedDocument& out) {
  out.parts.push_back(special(tokens.bos, train_on_prompt));
  for (const ChatMessage& message : messages) {
    const bool trained = train_on_prompt || message.role == "assistant";
    out.parts.push_back(special("<|start_header_id|>", train_on_prompt));
    out.parts.push_back(text(message.role, train_on_prompt));
    out.parts.push_back(special("<|end_header_id|>", train_on_prompt));
    out.parts.push_back(text("\n\n", train_on_prompt));
    out.parts.push_back(text(strip_ascii(message.content), trained));
    out.parts.push_back(special("<|eot_id|>", trained));
  }
}

void render_llama2(const std::vector<ChatMessage>& messages, const ChatTokens& tokens,
                   bool train_on_prompt, RenderedDocument& out) {
  size_t first = 0;
  std::string system_block;
  if (messages[0].role == "system") {
    system_block = "<<SYS>>\n" + messages[0].content + "\n<</SYS>>\n\n";
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& message = messages[i];
    const bool expect_user = (i - first) % 2 == 0;
    if ((message.role == "user") != expect_user || message.role == "system") {
      fail(
          "messages[{}] has role \"{}\" but the llama2 template needs an optional first system "
          "message, then user and assistant turns alternating, starting with user",
          i, message.role);
    }
    if (message.role == "user") {
      const std::string content = i == first ? system_block + message.content : message.content;
      out.parts.push_back(special(tokens.bos, train_on_prompt));
      out.parts.push_back(text("[INST] " + strip_ascii(content) + " [/INST]", train_on_prompt));
    } else {
      out.parts.push_back(text(" " + strip_ascii(message.content) + " ", true));
      out.parts.push_back(special(tokens.eos, true));
    }
  }
}

}  // namespace

const ChoiceNames<ChatTemplate>& chat_template_names() {
  static const ChoiceNames<ChatTemplate> names = {{"chatml", ChatTemplate::kChatml},
                                                  {"llama2", ChatTemplate::kLlama2},
                                                  {"llama3", ChatTemplate::kLlama3}};
  return names;
}

const char* chat_template_name(ChatTemplate chat_template) {
  for (const auto& [name, value] : chat_template_names())
    if (value == chat_template) return name.c_str();
  return "?";
}

const ChoiceNames<ChatTemplateChoice>& chat_template_choice_names() {
  static const ChoiceNames<ChatTemplateChoice> names = {{"auto", ChatTemplateChoice::kAuto},
                                                        {"model", ChatTemplateChoice::kModel},
                                                        {"chatml", ChatTemplateChoice::kChatml},
                                                        {"llama2", ChatTemplateChoice::kLlama2},
                                                        {"llama3", ChatTemplateChoice::kLlama3}};
  return names;
}

std::optional<ChatTemplate> builtin_template_of(ChatTemplateChoice choice) {
  switch (choice) {
    case ChatTemplateChoice::kChatml:
      return ChatTemplate::kChatml;
    case ChatTemplateChoice::kLlama2:
      return ChatTemplate::kLlama2;
    case ChatTemplateChoice::kLlama3:
      return ChatTemplate::kLlama3;
    case ChatTemplateChoice::kAuto:
    case ChatTemplateChoice::kModel:
      break;
  }
  return std::nullopt;
}

ChatTokens chat_tokens(ChatTemplate chat_template, const TokenizerFiles& files) {
  ChatTokens tokens;
  if (chat_template == ChatTemplate::kLlama3) {
    tokens.bos = files.bos_token.value_or("<|begin_of_text|>");
  } else if (chat_template == ChatTemplate::kLlama2) {
    tokens.bos = files.bos_token.value_or("<s>");
    tokens.eos = files.eos_token.value_or("</s>");
  }
  return tokens;
}

RenderedDocument render_chat(ChatTemplate chat_template, const ChatTokens& tokens,
                             const std::vector<ChatMessage>& messages, bool train_on_prompt) {
  if (messages.empty()) fail("\"messages\" is empty; a chat needs at least one message");
  bool has_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant") {
      fail("messages[{}] has unknown role \"{}\"; roles are system, user and assistant", i, role);
    }
    has_assistant = has_assistant || role == "assistant";
  }
  if (!has_assistant && !train_on_prompt) {
    fail(
        "the chat has no assistant message, so no token would be trained; add the reply or use "
        "--train-on-prompt");
  }
  RenderedDocument out;
  out.add_special_tokens = false;  // the templates write BOS themselves
  out.separator_trained = false;   // the template's end-of-turn token is what the model learns
  switch (chat_template) {
    case ChatTemplate::kChatml:
      render_chatml(messages, train_on_prompt, out);
      break;
    case ChatTemplate::kLlama3:
      render_llama3(messages, tokens, train_on_prompt, out);
      break;
    case ChatTemplate::kLlama2:
      render_llama2(messages, tokens, train_on_prompt, out);
      break;
  }
  return out;
}

}  // namespace shardtrain
