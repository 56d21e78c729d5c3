#include "data/builtin_chat_jinja.h"

namespace shardtrain {
namespace {

// `text` as a single-quoted Jinja string literal.
std::string jinja_literal(const std::string& text) {
  std::string out = "'";
  for (const char c : text) {
    if (c == '\\' || c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

constexpr const char* kChatml =
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{%- endif %}";

std::string llama3_source(const ChatTokens& tokens) {
  return "{{- " + jinja_literal(tokens.bos) +
         " }}"
         "{%- for message in messages %}"
         "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
         "message['content'] | trim + '<|eot_id|>' }}"
         "{%- endfor %}"
         "{%- if add_generation_prompt %}"
         "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
         "{%- endif %}";
}

std::string llama2_source(const ChatTokens& tokens) {
  return "{%- if messages[0]['role'] == 'system' %}"
         "{%- set system_block = '<<SYS>>\\n' + messages[0]['content'] + '\\n<</SYS>>\\n\\n' %}"
         "{%- set loop_messages = messages[1:] %}"
         "{%- else %}{%- set system_block = '' %}{%- set loop_messages = messages %}{%- endif %}"
         "{%- for message in loop_messages %}"
         "{%- if message['role'] == 'system' or "
         "(message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
         "{{ raise_exception('Conversation roles must be an optional system message, then "
         "user/assistant/user/assistant/...') }}"
         "{%- endif %}"
         "{%- if message['role'] == 'user' %}"
         "{%- if loop.first %}{%- set content = system_block + message['content'] %}"
         "{%- else %}{%- set content = message['content'] %}{%- endif %}"
         "{{ " +
         jinja_literal(tokens.bos) +
         " + '[INST] ' + content | trim + ' [/INST]' }}"
         "{%- else %}"
         "{{ ' ' + message['content'] | trim + ' ' + " +
         jinja_literal(tokens.eos) +
         " }}"
         "{%- endif %}"
         "{%- endfor %}";
}

}  // namespace

std::string builtin_chat_template_jinja(ChatTemplate chat_template, const ChatTokens& tokens) {
  switch (chat_template) {
    case ChatTemplate::kChatml:
      return kChatml;
    case ChatTemplate::kLlama3:
      return llama3_source(tokens);
    case ChatTemplate::kLlama2:
      return llama2_source(tokens);
  }
  return kChatml;
}

}  // namespace shardtrain
