// The built-in chat templates (data/chat_template.h: chatml, llama2, llama3) as Jinja sources,
// so that a model trained with one of them carries it in its exported Hugging Face dir
// (chat_template.jinja): transformers' apply_chat_template, `shardtrain render` and
// `generate --chat` then produce exactly the text render_chat() trained on (ASCII-whitespace
// trimming as render_chat does), plus the generation prompt (chatml:
// "<|im_start|>assistant\n", llama3: the assistant header; llama2 has none) when asked.
// The family's bos/eos strings (ChatTokens) are written into the source as literals; a llama2
// conversation whose roles do not alternate raises, as render_chat fails.
#pragma once

#include <string>

#include "data/chat_template.h"

namespace shardtrain {

std::string builtin_chat_template_jinja(ChatTemplate chat_template, const ChatTokens& tokens);

}  // namespace shardtrain
