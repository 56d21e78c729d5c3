// Regex: the patterns of tokenizer.json (written for Oniguruma, which Hugging Face `tokenizers`
// uses) compiled with PCRE2 in UTF + UCP mode, JIT-compiled when the platform allows.
//
// Oniguruma compatibility: \s and \S are rewritten to Oniguruma's Unicode definition of
// whitespace (U+0009..U+000D, U+0085 and the Z categories), which PCRE2 versions define slightly
// differently. Everything else used by the Llama/Qwen/GPT-2 patterns (\p{L}, \p{N}, (?i:...),
// lookahead, {1,3}) means the same in both engines.
//
// Invalid UTF-8 in the subject never fails a match: invalid bytes simply match nothing
// (PCRE2_MATCH_INVALID_UTF). A Regex is immutable after construction and safe to share between
// threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardtrain::tokenizer {

struct MatchSpan {
  size_t start;
  size_t end;
};

class Regex {
 public:
  // Throws Error naming `context` (file and location) when the pattern does not compile.
  Regex(std::string_view pattern, const std::string& context);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Replaces `matches` with the leftmost non-overlapping matches in `text`, in order. An empty
  // match is reported and the search resumes one character later. Throws Error naming the
  // pattern when the whole search takes more than 2 s + 1 s per MiB of text (a total work
  // budget: PCRE2's own limits bound one match attempt, not their sum).
  void find_all(std::string_view text, std::vector<MatchSpan>& matches) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

// The Oniguruma-to-PCRE2 rewrite described above; exposed for tests.
std::string translate_oniguruma_pattern(std::string_view pattern);

}  // namespace shardtrain::tokenizer
