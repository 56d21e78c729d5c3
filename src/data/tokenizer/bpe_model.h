// BpeModel: the "model" section of a tokenizer.json of type BPE, and the merge algorithm of
// Hugging Face `tokenizers` (same results, including tie-breaking).
//
// Encoding one pre-token ("word"):
//   1. ignore_merges: a word that is itself in the vocabulary is one token.
//   2. The word is cut into characters (UTF-8 units; see utf8.h for invalid bytes), each looked up
//      in the vocabulary (with continuing_subword_prefix on all but the first and
//      end_of_word_suffix on the last). A character not in the vocabulary becomes its <0xXX> byte
//      tokens when byte_fallback is set and they all exist, else the unk_token (consecutive ones
//      fused into one when fuse_unk), else it is dropped.
//   3. Adjacent symbols are merged repeatedly, always the pair of lowest merge rank, leftmost
//      first, until no pair has a merge.
// Results for words shorter than 256 bytes are cached (thread-safe), so repeated words cost one
// hash lookup. BpeModel is safe to use from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/tokenizer/json_config.h"
#include "data/tokenizer/string_hash.h"

namespace shardtrain::tokenizer {

class BpeModel {
 public:
  // `config` is tokenizer.json's "model" object. Throws Error naming the file when the type is
  // not BPE or a merge names a token absent from the vocabulary.
  static BpeModel from_json(const nlohmann::json& config, const ConfigSite& site);

  BpeModel(BpeModel&&) noexcept;
  BpeModel& operator=(BpeModel&&) noexcept;
  ~BpeModel();

  // Appends the ids of `word` to `ids`.
  void tokenize(std::string_view word, std::vector<int32_t>& ids) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr when no token has this id.
  const std::string* id_to_token(int32_t id) const;
  // Largest id in the vocabulary, -1 when empty.
  int32_t max_id() const { return static_cast<int32_t>(id_to_token_.size()) - 1; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  struct WordCache;
  struct Symbol;

  BpeModel();
  // Steps 2 and 3 of the header for one piece; appends its ids.
  void merge_word(std::string_view word, std::vector<int32_t>& ids) const;
  void split_into_symbols(std::string_view word, std::vector<Symbol>& symbols) const;
  void apply_merges(std::vector<Symbol>& symbols) const;
  static bool can_split_before_metaspace(const BpeModel& model, const nlohmann::json& merges);
  // tokenize() for one piece, through the word cache.
  void tokenize_piece(std::string_view word, std::vector<int32_t>& ids) const;

  TokenIdMap vocab_;
  std::vector<std::string> id_to_token_;        // "" for ids with no token
  std::unordered_map<uint64_t, Merge> merges_;  // key: (left id << 32) | right id
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  // SentencePiece-style vocabularies (Llama 2, Mistral) have no pre-tokenizer, so a whole
  // paragraph arrives as one word. When no merge joins a token ending in a non-"▁" character to
  // one starting with "▁", no merge can cross such a point, so the word is cut there first:
  // the result is identical and the pieces hit the word cache.
  bool split_before_metaspace_ = false;
  std::vector<int32_t> byte_fallback_ids_;  // id of <0xXX> for each byte, -1 where absent
  std::unique_ptr<WordCache> cache_;
};

}  // namespace shardtrain::tokenizer
