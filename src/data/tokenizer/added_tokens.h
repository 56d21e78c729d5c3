// AddedTokens: the "added_tokens" of tokenizer.json (special tokens such as <|im_start|> and
// user-added tokens), found in the text before normalization and pre-tokenization.
//
// Matching follows `tokenizers`' AddedVocabulary: tokens with normalized=false are searched in
// the raw text first; tokens with normalized=true are then searched in each remaining piece
// after that piece is normalized (their content normalized the same way). Among tokens that
// match, the leftmost wins, then the longest. single_word requires no word character (\w)
// touching either side; lstrip/rstrip extend the match over adjacent whitespace.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer/json_config.h"
#include "data/tokenizer/string_hash.h"

namespace shardtrain::tokenizer {

class Normalizer;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// A piece of text: either one added token or text to encode further.
struct TextSegment {
  size_t start;
  size_t end;
  int32_t added_token_id;  // -1 for ordinary text
};

class AddedTokens {
 public:
  AddedTokens() = default;
  // `normalizer` (may be null) normalizes the content of normalized=true tokens for matching.
  static AddedTokens from_json(const nlohmann::json& list, const Normalizer* normalizer,
                               const ConfigSite& site);

  // Cuts `text` into segments covering it in order, with the raw (normalized=false) tokens when
  // `normalized_set` is false, else with the normalized=true tokens. Empty text gives nothing.
  void split(std::string_view text, bool normalized_set, std::vector<TextSegment>& out) const;

  const AddedToken* find_by_id(int32_t id) const;
  std::optional<int32_t> find_by_content(std::string_view content) const;
  bool is_special_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }

 private:
  // One searchable set of tokens: each pattern by content (the earliest token for a content),
  // and per first byte the distinct pattern lengths, longest first. Finding the longest match
  // at a position costs one hash lookup per distinct length, not one comparison per token, and
  // building the set is linear (250,000 added tokens with one first byte load in well under a
  // second; sorting a bucket per insertion was quadratic).
  struct MatchSet {
    std::unordered_map<std::string, size_t, StringHash, std::equal_to<>> token_by_pattern;
    std::array<std::vector<size_t>, 256> lengths_by_first_byte;
    bool empty() const { return token_by_pattern.empty(); }
  };
  static void add_to_set(MatchSet& set, std::string pattern, size_t token_index);
  static void finish_set(MatchSet& set);
  // Leftmost-longest match starting at or after `from`; false when none.
  bool find_next(const MatchSet& set, std::string_view text, size_t from, size_t& start,
                 size_t& length, size_t& token_index) const;

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> index_by_id_;
  StringSet special_contents_;
  TokenIdMap id_by_content_;
  MatchSet raw_set_;
  MatchSet normalized_set_;
};

}  // namespace shardtrain::tokenizer
