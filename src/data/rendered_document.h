// RenderedDocument: one training example as text parts, before tokenization, and its
// tokenization into ids with a loss mask.
//
// A part is either text (tokenized with the tokenizer) or one special token written by its exact
// string (emitted by id, e.g. "<|im_start|>"). `trained` says whether the part's tokens carry the
// loss. Chat templates put a special part wherever the template has a special token, so text
// parts never straddle one; the tokenizer splits text at special tokens before anything else, so
// tokenizing the parts between special tokens one run at a time gives exactly the ids of
// tokenizing the whole rendered string at once (what Hugging Face's apply_chat_template does).
//
// tokenize_document() guarantees:
//   - ids == the tokenization of rendered_text(document) (added/special tokens matched, BOS/EOS
//     added by the tokenizer's post-processor only when document.add_special_tokens);
//   - mask[i] = 1 iff token i came from a trained part. A token that BPE merged across the
//     boundary of an untrained and a trained part counts as the later part's (found by comparing
//     with the tokenization of the text up to the boundary);
//   - mask[0] = 0: a document's first token has no context inside the document.
// REQUIRES: no special parts when add_special_tokens (BOS would be added to every text run).
// Throws Error when a special part is not a token of the tokenizer (the message names it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace shardtrain {

class Tokenizer;

struct TextPart {
  std::string text;
  bool trained = false;
  bool special = false;  // text is exactly one special token's string
};

struct RenderedDocument {
  std::vector<TextPart> parts;
  bool add_special_tokens = false;  // let the tokenizer's post-processor add BOS/EOS
  bool separator_trained = true;    // loss on the EOS that packing appends after the document
};

struct TokenizedDocument {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;  // (ids.size()); 1 = loss on this token as a target
  bool separator_trained = true;
};

// The whole document as one string (what a chat template renders).
std::string rendered_text(const RenderedDocument& document);

TokenizedDocument tokenize_document(const Tokenizer& tokenizer, const RenderedDocument& document);

}  // namespace shardtrain
