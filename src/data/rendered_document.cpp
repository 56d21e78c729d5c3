#include "data/rendered_document.h"

#include <algorithm>

#include "core/error.h"
#include "data/tokenizer/tokenizer.h"

namespace shardtrain {
namespace {

size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const size_t limit = std::min(a.size(), b.size());
  size_t n = 0;
  while (n < limit && a[n] == b[n]) ++n;
  return n;
}

// Tokenizes parts [begin, end) (all text parts) as one string and appends ids and mask.
void tokenize_text_run(const Tokenizer& tokenizer, const std::vector<TextPart>& parts, size_t begin,
                       size_t end, bool add_special_tokens, TokenizedDocument& out) {
  std::string text;
  for (size_t p = begin; p < end; ++p) text += parts[p].text;
  const std::vector<int32_t> ids = tokenizer.encode(text, add_special_tokens);
  // first_token[p - begin] = index in `ids` of the first token belonging to part p.
  std::vector<size_t> first_token(end - begin, 0);
  std::string prefix = parts[begin].text;
  for (size_t p = begin + 1; p < end; ++p) {
    size_t boundary = first_token[p - begin - 1];
    if (parts[p].trained != parts[p - 1].trained) {
      boundary =
          std::max(boundary, common_prefix(tokenizer.encode(prefix, add_special_tokens), ids));
    }
    first_token[p - begin] = boundary;
    prefix += parts[p].text;
  }
  size_t p = begin;
  for (size_t i = 0; i < ids.size(); ++i) {
    while (p + 1 < end && first_token[p + 1 - begin] <= i) ++p;
    out.ids.push_back(ids[i]);
    out.mask.push_back(parts[p].trained ? 1 : 0);
  }
}

}  // namespace

std::string rendered_text(const RenderedDocument& document) {
  std::string text;
  for (const TextPart& part : document.parts) text += part.text;
  return text;
}

TokenizedDocument tokenize_document(const Tokenizer& tokenizer, const RenderedDocument& document) {
  TokenizedDocument out;
  out.separator_trained = document.separator_trained;
  const std::vector<TextPart>& parts = document.parts;
  SHARDTRAIN_CHECK(!document.add_special_tokens ||
                       std::none_of(parts.begin(), parts.end(),
                                    [](const TextPart& part) { return part.special; }),
                   "add_special_tokens applies to documents of one text run");
  size_t p = 0;
  while (p < parts.size()) {
    if (parts[p].special) {
      const auto id = tokenizer.token_to_id(parts[p].text);
      if (!id) {
        fail(
            "the tokenizer has no token \"{}\", which the chat template needs; choose the "
            "template that matches the model (--chat-template / data.chat_template)",
            parts[p].text);
      }
      out.ids.push_back(*id);
      out.mask.push_back(parts[p].trained ? 1 : 0);
      ++p;
      continue;
    }
    size_t end = p;
    while (end < parts.size() && !parts[end].special) ++end;
    tokenize_text_run(tokenizer, parts, p, end, document.add_special_tokens, out);
    p = end;
  }
  if (!out.mask.empty()) out.mask[0] = 0;
  return out;
}

}  // namespace shardtrain
