#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/tokenizer/regex.h"

#include <pcre2.h>

#include <chrono>

#include "core/error.h"
#include "data/tokenizer/utf8.h"

namespace shardtrain::tokenizer {
namespace {

// Oniguruma's \s for Unicode subjects, as class members.
constexpr std::string_view kSpaceClassMembers = "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Zs}\\p{Zl}\\p{Zp}";

// The time one find_all may take: real tokenizer patterns split 50+ MB/s, so even a 10x slower
// machine stays far inside it.
constexpr std::chrono::milliseconds kRegexBaseBudget{2000};
constexpr std::chrono::milliseconds kRegexBudgetPerMiB{1000};
constexpr int kBudgetExceeded = -1000000;  // not a PCRE2 code

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

std::string translate_oniguruma_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char escaped = pattern[i + 1];
      ++i;
      if (escaped == 's') {
        if (in_class) {
          out += kSpaceClassMembers;
        } else {
          out += "[";
          out += kSpaceClassMembers;
          out += "]";
        }
      } else if (escaped == 'S' && !in_class) {
        out += "[^";
        out += kSpaceClassMembers;
        out += "]";
      } else {
        out.push_back('\\');
        out.push_back(escaped);
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out.push_back(c);
  }
  return out;
}

struct Regex::Compiled {
  pcre2_code* code = nullptr;
  std::string context;  // file and location, for errors
  std::string pattern;
  ~Compiled() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, const std::string& context)
    : compiled_(std::make_unique<Compiled>()) {
  const std::string translated = translate_oniguruma_pattern(pattern);
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  compiled_->code = pcre2_compile(
      reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error_code, &error_offset, nullptr);
  if (compiled_->code == nullptr) {
    fail("{}: regex '{}' does not compile (PCRE2: {} at offset {})", context, pattern,
         pcre2_message(error_code), error_offset);
  }
  // JIT is an optimisation only: where it is unavailable, pcre2_match interprets.
  pcre2_jit_compile(compiled_->code, PCRE2_JIT_COMPLETE);
  compiled_->context = context;
  compiled_->pattern = std::string(pattern.substr(0, 80));
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find_all(std::string_view text, std::vector<MatchSpan>& matches) const {
  matches.clear();
  pcre2_match_data* match_data = pcre2_match_data_create_from_pattern(compiled_->code, nullptr);
  SHARDTRAIN_CHECK(match_data != nullptr, "out of memory creating PCRE2 match data");
  pcre2_jit_stack* jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* match_context = pcre2_match_context_create(nullptr);
  if (jit_stack != nullptr && match_context != nullptr) {
    pcre2_jit_stack_assign(match_context, nullptr, jit_stack);
  }
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  int status = 0;
  // PCRE2's match limit bounds one call, not the sum: a pattern whose every match looks ahead
  // over the rest of the text (a(?=.*Z)) makes each call short and their total quadratic. The
  // whole split gets a time budget instead, with room for the slowest real pattern by far.
  const auto started = std::chrono::steady_clock::now();
  const auto budget = kRegexBaseBudget + kRegexBudgetPerMiB * (text.size() >> 20);
  while (offset <= text.size()) {
    status =
        pcre2_match(compiled_->code, subject, text.size(), offset, 0, match_data, match_context);
    if (status < 0) break;
    if (std::chrono::steady_clock::now() - started > budget) {
      status = kBudgetExceeded;
      break;
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(match_data);
    const size_t start = ovector[0], end = ovector[1];
    matches.push_back({start, end});
    if (end > start) {
      offset = end;
    } else if (end < text.size()) {
      offset = end + decode_utf8(text, end).length;
    } else {
      break;
    }
  }
  pcre2_match_context_free(match_context);
  pcre2_jit_stack_free(jit_stack);
  pcre2_match_data_free(match_data);
  if (status == kBudgetExceeded) {
    fail(
        "{}: the pre-tokenizer regex '{}' needs more than {} s on a {}-byte text (a pattern that "
        "looks ahead over the whole text is quadratic); HINT: fix the pattern in tokenizer.json "
        "or split the text into smaller documents",
        compiled_->context, compiled_->pattern,
        std::chrono::duration_cast<std::chrono::seconds>(budget).count(), text.size());
  }
  if (status < 0 && status != PCRE2_ERROR_NOMATCH) {
    fail(
        "tokenizer regex failed on a {}-byte text (PCRE2: {}); split the text into smaller "
        "documents",
        text.size(), pcre2_message(status));
  }
}

}  // namespace shardtrain::tokenizer
