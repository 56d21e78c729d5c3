// Chat templates: render {"role", "content"} messages the way each model family was trained,
// with the loss on assistant replies only (or on everything, with train_on_prompt).
//
// Templates (the strings are those of the families' Hugging Face chat templates, for training:
// no generation prompt is appended):
//   chatml (Qwen2/2.5/3):  <|im_start|>{role}\n{content}<|im_end|>\n   for every message.
//       Trained: an assistant's {content}<|im_end|>. No default system prompt is inserted
//       (Qwen2.5's template adds one when there is none; write it into the data if wanted) and
//       Qwen3 <think> blocks are kept as the content has them.
//   llama3:  {bos}  then for every message
//            <|start_header_id|>{role}<|end_header_id|>\n\n{content, trimmed}<|eot_id|>
//       Trained: an assistant's {content}<|eot_id|>.
//   llama2:  {bos}[INST] {user, stripped} [/INST] {assistant, stripped} {eos}{bos}[INST] ...
//       An optional first system message becomes "<<SYS>>\n{system}\n<</SYS>>\n\n" in front of the
//       first user message. After it, roles must alternate user, assistant, user, ...
//       Trained: " {assistant} " and {eos}.
// Roles are "system", "user" and "assistant"; any other role is an error. bos/eos are the
// tokenizer_config.json tokens (llama2 defaults <s> and </s>, llama3 <|begin_of_text|>).
// Stripping removes ASCII whitespace (" \t\n\r\f\v") at both ends, like Jinja's trim on ASCII.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/choice_names.h"
#include "data/rendered_document.h"
#include "data/tokenizer_files.h"

namespace shardtrain {

enum class ChatTemplate { kChatml, kLlama2, kLlama3 };

struct ChatMessage {
  std::string role;
  std::string content;
};

// chatml, llama2, llama3.
const ChoiceNames<ChatTemplate>& chat_template_names();
const char* chat_template_name(ChatTemplate chat_template);

// data.chat_template, --chat-template: auto (the model's own template when its tokenizer has
// one, else the family's built-in one), model (the model's own; an error without one), or a
// built-in template by name.
enum class ChatTemplateChoice { kAuto, kModel, kChatml, kLlama2, kLlama3 };
// auto, model, chatml, llama2, llama3.
const ChoiceNames<ChatTemplateChoice>& chat_template_choice_names();
// The built-in template `choice` names, or nullopt for auto and model.
std::optional<ChatTemplate> builtin_template_of(ChatTemplateChoice choice);

// The family's template from tokenizer_config.json's chat_template source (<|im_start|> ->
// chatml, <|start_header_id|> -> llama3, [INST] -> llama2), else from the special tokens the
// tokenizer has (`has_token`), else llama2.
template <typename HasToken>
ChatTemplate detect_chat_template(const TokenizerFiles& files, HasToken has_token) {
  const std::string& source = files.chat_template;
  if (source.find("<|im_start|>") != std::string::npos) return ChatTemplate::kChatml;
  if (source.find("<|start_header_id|>") != std::string::npos) return ChatTemplate::kLlama3;
  if (source.find("[INST]") != std::string::npos) return ChatTemplate::kLlama2;
  if (has_token("<|im_start|>")) return ChatTemplate::kChatml;
  if (has_token("<|start_header_id|>")) return ChatTemplate::kLlama3;
  return ChatTemplate::kLlama2;
}

struct ChatTokens {
  std::string bos;  // llama2 and llama3
  std::string eos;  // llama2
};

// The bos/eos strings the template writes, from tokenizer_config.json or the family defaults.
ChatTokens chat_tokens(ChatTemplate chat_template, const TokenizerFiles& files);

// Renders `messages`. Throws Error (message without file:line; the caller adds it) for an unknown
// role, a llama2 conversation whose roles do not alternate, no messages, or no assistant message
// when !train_on_prompt (nothing would be trained).
RenderedDocument render_chat(ChatTemplate chat_template, const ChatTokens& tokens,
                             const std::vector<ChatMessage>& messages, bool train_on_prompt);

}  // namespace shardtrain
