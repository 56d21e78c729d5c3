// Example formats of JSONL training data, one JSON object per line:
//   text               {"text": "..."}                      continued pre-training; loss on all
//                                                           tokens; BOS/EOS as the tokenizer's
//                                                           post-processor adds them
//   prompt_completion  {"prompt": "...", "completion": "..."}   rendered prompt + completion
//                                                           (no separator is inserted)
//   alpaca             {"instruction", "input" (optional, may be ""), "output"}, rendered with
//                      the Stanford Alpaca prompt (alpaca_prompt, below) followed by output
//   chat               {"messages": [{"role": "...", "content": "..."}, ...], "tools": [...]
//                      (optional)}, rendered with the model's own chat template when the
//                      tokenizer has one (data/hf_chat_template.h; masks: data/template_masks.h;
//                      messages pass to it unchanged: tool_calls, the tool role, content
//                      lists), else with the family's built-in template (data/chat_template.h)
//   (chat, ShareGPT)   {"conversations": [{"from": "human"|"gpt"|"system"|"tool", "value"}]}
//                      is read as the chat {"messages": [{"role", "content"}]}; another
//                      "from" is an Error naming it
// Loss: on the completion / output / assistant tokens only, unless train_on_prompt (then on all).
// Other keys in a line are ignored.
//
// detect_format() picks the format from an object's keys: "messages" or "conversations" -> chat,
// "instruction" -> alpaca, "prompt" and "completion" -> prompt_completion, "text" -> text.
// render_record() validates a record and renders it; it throws Error with a message that says
// what is wrong and what the line needs (without the file:line prefix, which the caller adds):
// missing fields, fields of the wrong JSON type, empty (or whitespace-only) text, unknown roles.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/choice_names.h"
#include "data/chat_template.h"
#include "data/hf_chat_template.h"
#include "data/rendered_document.h"

namespace shardtrain {

enum class ExampleFormat { kText, kPromptCompletion, kAlpaca, kChat };

// The Stanford Alpaca prompt; the output follows it directly. With a non-blank input:
//   "Below is an instruction that describes a task, paired with an input that provides further
//    context. Write a response that appropriately completes the request.\n\n
//    ### Instruction:\n{instruction}\n\n### Input:\n{input}\n\n### Response:\n"
// without one (absent, null or blank):
//   "Below is an instruction that describes a task. Write a response that appropriately
//    completes the request.\n\n### Instruction:\n{instruction}\n\n### Response:\n"
std::string alpaca_prompt(const std::string& instruction, const std::string& input);

// The record formats by the names users type, in the order they are listed: text,
// prompt_completion, alpaca, chat.
const ChoiceNames<ExampleFormat>& example_format_names();
const char* example_format_name(ExampleFormat format);

// data.example_format, --example-format / prepare --format: "auto" (nullopt: by the first
// line's keys, detect_format) or one format. The other data choices' lists sit beside their
// enums: data/data_format.h (data.format), data/packing_mode.h (data.packing),
// data/chat_template.h (data.chat_template), data/packing.h (data.overlong),
// data/prepare.h (data.on_bad_line, data.invalid_utf8).
using ExampleFormatChoice = std::optional<ExampleFormat>;
const ChoiceNames<ExampleFormatChoice>& example_format_choice_names();

// nullopt when the keys match no format.
std::optional<ExampleFormat> detect_format(const nlohmann::ordered_json& record);

struct RenderSettings {
  ExampleFormat format = ExampleFormat::kText;
  ChatTemplate chat_template = ChatTemplate::kChatml;
  ChatTokens chat_tokens;
  bool train_on_prompt = false;
  bool train_on_eos = true;                     // with hf_template: train the end-of-turn
  const HfChatTemplate* hf_template = nullptr;  // the model's own template, when it has one
};

// Records keep their key order (ordered_json): a template's tojson output depends on it.
RenderedDocument render_record(const nlohmann::ordered_json& record,
                               const RenderSettings& settings);

}  // namespace shardtrain
