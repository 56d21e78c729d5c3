#include "data/formats.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/template_masks.h"

namespace shardtrain {
namespace {

using json = nlohmann::ordered_json;

bool is_blank(const std::string& text) {
  return text.find_first_not_of(" \t\n\r\f\v") == std::string::npos;
}

const char* expected_shape(ExampleFormat format) {
  switch (format) {
    case ExampleFormat::kText:
      return "{\"text\": \"...\"}";
    case ExampleFormat::kPromptCompletion:
      return "{\"prompt\": \"...\", \"completion\": \"...\"}";
    case ExampleFormat::kAlpaca:
      return "{\"instruction\": \"...\", \"input\": \"...\", \"output\": \"...\"}";
    case ExampleFormat::kChat:
      return "{\"messages\": [{\"role\": \"user\", \"content\": \"...\"}, ...]}";
  }
  return "";
}

// The string field `key`; throws when it is missing, not a string, or (unless allow_empty)
// empty or whitespace only. `owner` names the object in messages ("" for the line itself).
std::string string_field(const json& object, const char* key, ExampleFormat format,
                         bool allow_empty, const std::string& owner = "") {
  const auto it = object.find(key);
  const std::string where = owner.empty() ? "" : owner + ": ";
  if (it == object.end()) {
    fail("{}missing \"{}\"; {} lines look like {}", where, key, example_format_name(format),
         expected_shape(format));
  }
  if (!it->is_string()) {
    fail("{}\"{}\" must be a string, got {}", where, key, it->type_name());
  }
  std::string value = it->get<std::string>();
  if (!allow_empty && is_blank(value)) {
    fail("{}\"{}\" is empty; remove the line or fill it in", where, key);
  }
  return value;
}

RenderedDocument prompt_then_completion(std::string prompt, std::string completion,
                                        bool train_on_prompt) {
  RenderedDocument out;
  out.add_special_tokens = true;
  out.separator_trained = true;
  out.parts.push_back({std::move(prompt), train_on_prompt, false});
  out.parts.push_back({std::move(completion), true, false});
  return out;
}

std::vector<ChatMessage> chat_messages(const json& record) {
  const auto it = record.find("messages");
  if (it == record.end()) {
    fail("missing \"messages\"; chat lines look like {}", expected_shape(ExampleFormat::kChat));
  }
  if (!it->is_array()) fail("\"messages\" must be an array, got {}", it->type_name());
  std::vector<ChatMessage> messages;
  for (size_t i = 0; i < it->size(); ++i) {
    const json& message = (*it)[i];
    const std::string owner = fmt::format("messages[{}]", i);
    if (!message.is_object()) {
      fail("{} must be an object {{\"role\": ..., \"content\": ...}}, got {}", owner,
           message.type_name());
    }
    ChatMessage parsed;
    parsed.role = string_field(message, "role", ExampleFormat::kChat, false, owner);
    parsed.content =
        string_field(message, "content", ExampleFormat::kChat, parsed.role == "system", owner);
    messages.push_back(std::move(parsed));
  }
  return messages;
}

// ShareGPT lines {"conversations": [{"from": "human"|"gpt"|"system"|"tool", "value": ...}]}
// as {"messages": [{"role", "content"}]} (other keys kept); other lines unchanged.
json normalize_chat(const json& record) {
  const auto it = record.find("conversations");
  if (record.contains("messages") || it == record.end()) return record;
  if (!it->is_array()) fail("\"conversations\" must be a list, got {}", it->type_name());
  json messages = json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const json& turn = (*it)[i];
    if (!turn.is_object() || !turn.contains("from") || !turn["from"].is_string() ||
        !turn.contains("value") || !turn["value"].is_string()) {
      fail(
          "conversations[{}] must be {{\"from\": \"human\"|\"gpt\"|\"system\", \"value\": "
          "\"...\"}} (ShareGPT)",
          i);
    }
    const std::string from = turn["from"].get<std::string>();
    std::string role;
    if (from == "human" || from == "user") role = "user";
    if (from == "gpt" || from == "assistant" || from == "chatgpt" || from == "bing") {
      role = "assistant";
    }
    if (from == "system") role = "system";
    if (from == "tool" || from == "function_call" || from == "observation") role = "tool";
    if (role.empty()) {
      fail(
          "conversations[{}] has \"from\": \"{}\", which is not supported; use human, gpt, "
          "system or tool",
          i, from);
    }
    messages.push_back(json{{"role", role}, {"content", turn["value"]}});
  }
  json out = record;
  out.erase("conversations");
  out["messages"] = std::move(messages);
  return out;
}

// The chat through the model's own template: messages go to it as they are (tool_calls, the
// tool role and content lists included); only the shape the template relies on is checked.
RenderedDocument render_with_model_template(const json& record, const RenderSettings& settings) {
  const auto it = record.find("messages");
  if (it == record.end() || !it->is_array()) {
    fail("missing \"messages\" list; chat lines look like {}",
         expected_shape(ExampleFormat::kChat));
  }
  if (it->empty()) fail("\"messages\" is empty; a chat needs at least one message");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& message = (*it)[i];
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string()) {
      fail("messages[{}] must be an object with a string \"role\"", i);
    }
  }
  ChatRenderInput input;
  input.messages = *it;
  if (const auto tools = record.find("tools"); tools != record.end() && !tools->is_null()) {
    if (!tools->is_array()) fail("\"tools\" must be a list of tool definitions");
    input.tools = *tools;
  }
  TemplateMaskOptions options;
  options.train_on_prompt = settings.train_on_prompt;
  options.train_on_eos = settings.train_on_eos;
  return masked_document(render_with_assistant_spans(*settings.hf_template, input, options),
                         settings.train_on_prompt);
}

}  // namespace

std::string alpaca_prompt(const std::string& instruction, const std::string& input) {
  if (is_blank(input)) {
    return "Below is an instruction that describes a task. Write a response that appropriately "
           "completes the request.\n\n### Instruction:\n" +
           instruction + "\n\n### Response:\n";
  }
  return "Below is an instruction that describes a task, paired with an input that provides "
         "further context. Write a response that appropriately completes the request.\n\n"
         "### Instruction:\n" +
         instruction + "\n\n### Input:\n" + input + "\n\n### Response:\n";
}

const ChoiceNames<ExampleFormat>& example_format_names() {
  static const ChoiceNames<ExampleFormat> names = {
      {"text", ExampleFormat::kText},
      {"prompt_completion", ExampleFormat::kPromptCompletion},
      {"alpaca", ExampleFormat::kAlpaca},
      {"chat", ExampleFormat::kChat}};
  return names;
}

const char* example_format_name(ExampleFormat format) {
  for (const auto& [name, known] : example_format_names())
    if (known == format) return name.c_str();
  return "?";
}

const ChoiceNames<ExampleFormatChoice>& example_format_choice_names() {
  static const ChoiceNames<ExampleFormatChoice> names = [] {
    ChoiceNames<ExampleFormatChoice> out = {{"auto", std::nullopt}};
    for (const auto& [name, format] : example_format_names()) out.emplace_back(name, format);
    return out;
  }();
  return names;
}

std::optional<ExampleFormat> detect_format(const json& record) {
  if (!record.is_object()) return std::nullopt;
  if (record.contains("messages") || record.contains("conversations")) return ExampleFormat::kChat;
  if (record.contains("instruction")) return ExampleFormat::kAlpaca;
  if (record.contains("prompt") && record.contains("completion")) {
    return ExampleFormat::kPromptCompletion;
  }
  if (record.contains("text")) return ExampleFormat::kText;
  return std::nullopt;
}

RenderedDocument render_record(const json& record, const RenderSettings& settings) {
  const ExampleFormat format = settings.format;
  if (!record.is_object()) {
    fail("expected a JSON object like {}, got {}", expected_shape(format), record.type_name());
  }
  switch (format) {
    case ExampleFormat::kText: {
      RenderedDocument out;
      out.add_special_tokens = true;
      out.separator_trained = true;
      out.parts.push_back({string_field(record, "text", format, false), true, false});
      return out;
    }
    case ExampleFormat::kPromptCompletion:
      return prompt_then_completion(string_field(record, "prompt", format, false),
                                    string_field(record, "completion", format, false),
                                    settings.train_on_prompt);
    case ExampleFormat::kAlpaca: {
      const std::string instruction = string_field(record, "instruction", format, false);
      std::string input;
      if (record.contains("input") && !record["input"].is_null()) {
        input = string_field(record, "input", format, true);
      }
      const std::string output = string_field(record, "output", format, false);
      return prompt_then_completion(alpaca_prompt(instruction, input), output,
                                    settings.train_on_prompt);
    }
    case ExampleFormat::kChat: {
      const json chat = normalize_chat(record);
      if (settings.hf_template) return render_with_model_template(chat, settings);
      return render_chat(settings.chat_template, settings.chat_tokens, chat_messages(chat),
                         settings.train_on_prompt);
    }
  }
  fail("unknown format");
}

}  // namespace shardtrain
