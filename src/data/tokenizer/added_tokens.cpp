#include "data/tokenizer/added_tokens.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/error.h"
#include "data/tokenizer/normalizer.h"
#include "data/tokenizer/utf8.h"

namespace shardtrain::tokenizer {
namespace {

// The code point that ends `text` (kInvalidCodePoint when none or invalid), and its start.
char32_t last_code_point(std::string_view text, size_t& start) {
  start = text.size();
  if (text.empty()) return kInvalidCodePoint;
  size_t pos = text.size() - 1;
  // Step back over at most 3 continuation bytes to the lead byte.
  while (pos > 0 && text.size() - pos < 4 &&
         (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80) {
    --pos;
  }
  const Utf8Unit unit = decode_utf8(text, pos);
  if (pos + unit.length != text.size()) {
    start = text.size() - 1;
    return kInvalidCodePoint;
  }
  start = pos;
  return unit.code_point;
}

bool ends_with_word_character(std::string_view text) {
  size_t start = 0;
  return is_word_character(last_code_point(text, start));
}

bool starts_with_word_character(std::string_view text) {
  return !text.empty() && is_word_character(decode_utf8(text, 0).code_point);
}

// Start of the run of whitespace that ends `text`.
size_t whitespace_run_start(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = 0;
    if (!is_unicode_whitespace(last_code_point(text.substr(0, end), start))) break;
    end = start;
  }
  return end;
}

// Length of the run of whitespace that starts `text`.
size_t whitespace_run_length(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const Utf8Unit unit = decode_utf8(text, pos);
    if (!is_unicode_whitespace(unit.code_point)) break;
    pos += unit.length;
  }
  return pos;
}

}  // namespace

AddedTokens AddedTokens::from_json(const nlohmann::json& list, const Normalizer* normalizer,
                                   const ConfigSite& site) {
  AddedTokens added;
  if (list.is_null()) return added;
  if (!list.is_array()) fail("{}: added_tokens must be an array", site.file);
  for (size_t i = 0; i < list.size(); ++i) {
    const ConfigSite token_site = site.element(i);
    const nlohmann::json& entry = list[i];
    AddedToken token;
    const int64_t id = int_field(entry, "id", -1, token_site);
    if (id < 0 || id >= kMaxTokenIdExclusive) {
      fail("{}: {}.id = {} must be in [0, {}); HINT: the tokenizer.json is malformed", site.file,
           token_site.location, id, kMaxTokenIdExclusive);
    }
    token.id = static_cast<int32_t>(id);
    token.content = string_field(entry, "content", token_site);
    token.special = bool_field(entry, "special", false, token_site);
    token.single_word = bool_field(entry, "single_word", false, token_site);
    token.lstrip = bool_field(entry, "lstrip", false, token_site);
    token.rstrip = bool_field(entry, "rstrip", false, token_site);
    token.normalized = bool_field(entry, "normalized", !token.special, token_site);
    if (token.content.empty()) continue;  // `tokenizers` ignores empty added tokens
    added.index_by_id_[token.id] = added.tokens_.size();
    if (token.special) added.special_contents_.insert(token.content);
    added.id_by_content_.insert_or_assign(token.content, token.id);
    added.tokens_.push_back(std::move(token));
  }
  for (size_t i = 0; i < added.tokens_.size(); ++i) {
    const AddedToken& token = added.tokens_[i];
    if (!token.normalized) {
      added.add_to_set(added.raw_set_, token.content, i);
      continue;
    }
    std::string pattern = token.content;
    if (normalizer != nullptr) normalizer->normalize(pattern);
    if (!pattern.empty()) added.add_to_set(added.normalized_set_, std::move(pattern), i);
  }
  finish_set(added.raw_set_);
  finish_set(added.normalized_set_);
  return added;
}

void AddedTokens::add_to_set(MatchSet& set, std::string pattern, size_t token_index) {
  const auto first_byte = static_cast<uint8_t>(pattern[0]);
  set.lengths_by_first_byte[first_byte].push_back(pattern.size());
  // Among equal patterns the earlier token wins (as the Aho-Corasick build does): no overwrite.
  set.token_by_pattern.emplace(std::move(pattern), token_index);
}

void AddedTokens::finish_set(MatchSet& set) {
  for (std::vector<size_t>& lengths : set.lengths_by_first_byte) {
    std::sort(lengths.begin(), lengths.end(), std::greater<>());
    lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  }
}

bool AddedTokens::find_next(const MatchSet& set, std::string_view text, size_t from, size_t& start,
                            size_t& length, size_t& token_index) const {
  for (size_t pos = from; pos < text.size(); ++pos) {
    for (const size_t candidate : set.lengths_by_first_byte[static_cast<uint8_t>(text[pos])]) {
      if (candidate > text.size() - pos) continue;
      const auto found = set.token_by_pattern.find(text.substr(pos, candidate));
      if (found != set.token_by_pattern.end()) {
        start = pos;
        length = candidate;
        token_index = found->second;
        return true;
      }
    }
  }
  return false;
}

void AddedTokens::split(std::string_view text, bool normalized_set,
                        std::vector<TextSegment>& out) const {
  out.clear();
  if (text.empty()) return;
  const MatchSet& set = normalized_set ? normalized_set_ : raw_set_;
  size_t segment_start = 0;  // end of the last emitted segment
  size_t search_from = 0;
  size_t match_start = 0, match_length = 0, token_index = 0;
  while (!set.empty() &&
         find_next(set, text, search_from, match_start, match_length, token_index)) {
    const AddedToken& token = tokens_[token_index];
    size_t start = match_start;
    size_t stop = match_start + match_length;
    search_from = stop;  // matches never overlap, even when one is discarded
    if (token.single_word) {
      const bool space_before = start == 0 || !ends_with_word_character(text.substr(0, start));
      const bool space_after =
          stop == text.size() || !starts_with_word_character(text.substr(stop));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) {
      start = std::max(whitespace_run_start(text.substr(0, start)), segment_start);
    }
    if (token.rstrip) stop += whitespace_run_length(text.substr(stop));
    if (segment_start < start) out.push_back({segment_start, start, -1});
    out.push_back({start, stop, token.id});
    segment_start = stop;
    search_from = std::max(search_from, stop);
  }
  if (segment_start < text.size()) out.push_back({segment_start, text.size(), -1});
}

const AddedToken* AddedTokens::find_by_id(int32_t id) const {
  auto it = index_by_id_.find(id);
  return it == index_by_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedTokens::find_by_content(std::string_view content) const {
  auto it = id_by_content_.find(content);
  if (it == id_by_content_.end()) return std::nullopt;
  return it->second;
}

bool AddedTokens::is_special_content(std::string_view content) const {
  return special_contents_.contains(content);
}

}  // namespace shardtrain::tokenizer
