#include "data/template_masks.h"

#include "core/error.h"
#include "data/chat/value.h"

namespace shardtrain {
namespace {

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}

size_t trim_trailing_space(const std::string& text, size_t begin, size_t end) {
  while (end > begin && chat::is_python_space(static_cast<unsigned char>(text[end - 1]))) --end;
  return end;
}

std::string message_content(const nlohmann::ordered_json& message) {
  const auto it = message.find("content");
  if (it == message.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

// What the template writes after the last assistant message's content: its end-of-turn marker
// (trailing whitespace dropped), "" when it cannot tell.
std::string stripped(const std::string& content) {
  const size_t first = content.find_first_not_of(" \t\n\r");
  if (first == std::string::npos) return std::string();
  const size_t last = content.find_last_not_of(" \t\n\r");
  return content.substr(first, last - first + 1);
}

std::string end_marker(const std::string& rendered, const std::string& content) {
  const std::string stripped_content = stripped(content);
  size_t after = std::string::npos;
  if (!stripped_content.empty()) {
    const size_t at = rendered.rfind(stripped_content);
    if (at != std::string::npos) after = at + stripped_content.size();
  }
  if (after == std::string::npos) return "";
  const size_t end = trim_trailing_space(rendered, after, rendered.size());
  std::string marker = rendered.substr(after, end - after);
  const size_t first = marker.find_first_not_of(" \t\n\r");
  return first == std::string::npos ? "" : marker.substr(first);
}

// The end-of-turn marker from a probe conversation, for replies whose own content cannot show
// it (empty content with tool_calls, say); "" when the probe does not render.
std::string probe_end_marker(const HfChatTemplate& chat_template) {
  const std::string reply = "shardtrain-probe-reply";
  ChatRenderInput probe;
  probe.messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": "probe"}, {"role": "assistant", "content": ")" + reply +
      R"("}])");
  try {
    return end_marker(chat_template.render(probe).text, reply);
  } catch (const Error&) {
    return "";
  }
}

ChatRenderInput prefix_input(const ChatRenderInput& input, size_t count, bool generation_prompt) {
  ChatRenderInput prefix = input;
  prefix.messages = nlohmann::ordered_json::array();
  for (size_t i = 0; i < count; ++i) prefix.messages.push_back(input.messages[i]);
  prefix.add_generation_prompt = generation_prompt;
  return prefix;
}

std::pair<size_t, size_t> assistant_span(const HfChatTemplate& chat_template,
                                         const ChatRenderInput& input, const std::string& full,
                                         size_t index, size_t search_from, bool train_on_eos) {
  std::string before;
  try {
    before = chat_template.render(prefix_input(input, index, true)).text;
  } catch (const Error& error) {
    fail(
        "the chat template cannot render messages[:{}] (the conversation before assistant "
        "message {}), so the assistant turn cannot be located ({}); train on all turns "
        "(--train-on-prompt)",
        index, index, error.what());
  }
  if (!starts_with(full, before) || before.size() < search_from) {
    fail(
        "the chat template does not render messages[:{}] (with the generation prompt) as a "
        "prefix of the whole conversation, so the assistant turn cannot be located; use a "
        "template with {{% generation %}} blocks or train on all turns (--train-on-prompt)",
        index);
  }
  size_t begin = before.size();
  const std::string content = stripped(message_content(input.messages[index]));
  if (!content.empty() && chat_template.render(prefix_input(input, index, false)).text == before) {
    // The template writes no generation prompt, so the turn's header follows `before`; the
    // reply starts at its content.
    const size_t at = full.find(content, begin);
    if (at != std::string::npos) begin = at;
  }
  const std::string through = chat_template.render(prefix_input(input, index + 1, false)).text;
  std::string marker = end_marker(through, message_content(input.messages[index]));
  if (marker.empty()) marker = probe_end_marker(chat_template);
  size_t end = 0;
  if (starts_with(full, through) && through.size() > begin) {
    end = trim_trailing_space(full, begin, through.size());
  } else {
    const size_t at = marker.empty() ? std::string::npos : full.find(marker, begin);
    if (at == std::string::npos) {
      fail(
          "cannot find where assistant message messages[{}] ends in the rendered chat (the "
          "template renders the last turn differently and writes no end-of-turn marker after "
          "it); train on all turns (--train-on-prompt) or use {{% generation %}} blocks",
          index);
    }
    end = at + marker.size();
  }
  if (!train_on_eos && !marker.empty() && end >= begin + marker.size() &&
      full.compare(end - marker.size(), marker.size(), marker) == 0) {
    end -= marker.size();
  }
  return {begin, end};
}

}  // namespace

MaskedText render_with_assistant_spans(const HfChatTemplate& chat_template,
                                       const ChatRenderInput& input,
                                       const TemplateMaskOptions& options) {
  const chat::RenderOutput full = chat_template.render(input);
  MaskedText out;
  out.text = full.text;
  if (options.train_on_prompt) {
    out.trained.emplace_back(0, out.text.size());
    return out;
  }
  if (!full.generation_spans.empty()) {
    for (const auto& span : full.generation_spans) {
      if (span.second > span.first) out.trained.push_back(span);
    }
    return out;
  }
  size_t search_from = 0;
  for (size_t i = 0; i < input.messages.size(); ++i) {
    const auto& message = input.messages[i];
    if (!message.is_object() || message.value("role", "") != "assistant") continue;
    const auto span =
        assistant_span(chat_template, input, out.text, i, search_from, options.train_on_eos);
    if (span.second > span.first) out.trained.push_back(span);
    search_from = span.second;
  }
  if (out.trained.empty()) {
    fail(
        "the chat has no assistant reply, so no token would be trained; add the reply or use "
        "--train-on-prompt");
  }
  return out;
}

RenderedDocument masked_document(const MaskedText& masked, bool train_on_prompt) {
  RenderedDocument document;
  document.add_special_tokens = false;
  document.separator_trained = false;
  size_t at = 0;
  for (const auto& [begin, end] : masked.trained) {
    if (begin > at) document.parts.push_back({masked.text.substr(at, begin - at), false, false});
    document.parts.push_back({masked.text.substr(begin, end - begin), true, false});
    at = end;
  }
  if (at < masked.text.size()) {
    document.parts.push_back({masked.text.substr(at), train_on_prompt, false});
  }
  return document;
}

}  // namespace shardtrain
