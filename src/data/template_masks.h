// Loss masks that follow a model's own chat template: the conversation rendered by the template
// (data/hf_chat_template.h) as one text, with the spans of assistant turns marked trained.
//
// Spans, in order of preference:
//   1. {% generation %} blocks, when the template has them (transformers'
//      return_assistant_tokens_mask): exactly the text those blocks render;
//   2. prefix by prefix, for each assistant message i: the turn starts where the rendering of
//      messages[:i] with add_generation_prompt = True ends (that text must be a prefix of the
//      whole rendering; a template that writes no generation prompt starts the turn at the
//      reply's content instead, leaving its header untrained), and ends where the rendering of
//      messages[:i+1] ends when that is a prefix too; otherwise (templates that render the last
//      turn differently, e.g. Qwen3's reasoning) at the first end-of-turn marker after the start,
//      the marker being what the template writes after the message's content ("<|im_end|>",
//      "<|eot_id|>", ...).
//   Trailing whitespace after the end-of-turn marker is not trained. train_on_eos = false also
//   leaves the marker out (only the reply itself is trained).
// train_on_prompt = true trains every token (all turns).
// Throws Error (no file prefix; the caller adds FILE:LINE) when the template cannot be probed
// this way ("does not render a conversation prefix as a prefix of the whole"), when there is no
// assistant message and !train_on_prompt, or when rendering fails.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/hf_chat_template.h"
#include "data/rendered_document.h"

namespace shardtrain {

struct TemplateMaskOptions {
  bool train_on_prompt = false;
  bool train_on_eos = true;
};

// The rendered text and its trained [begin, end) byte spans (sorted, disjoint).
struct MaskedText {
  std::string text;
  std::vector<std::pair<size_t, size_t>> trained;
};

MaskedText render_with_assistant_spans(const HfChatTemplate& chat_template,
                                       const ChatRenderInput& input,
                                       const TemplateMaskOptions& options);

// As text parts for tokenize_document (no special parts; add_special_tokens = false, since the
// template writes BOS itself, as apply_chat_template tokenizes with add_special_tokens=False).
RenderedDocument masked_document(const MaskedText& masked, bool train_on_prompt);

}  // namespace shardtrain
