// Pre-tokenizers of tokenizer.json: they cut normalized text into the pieces ("words") that the
// BPE model encodes independently, and may rewrite them (ByteLevel maps bytes to characters,
// Metaspace turns spaces into U+2581).
//
// Supported types: Split (String or Regex pattern; behaviors Removed, Isolated,
// MergedWithPrevious, MergedWithNext, Contiguous; invert), ByteLevel (add_prefix_space,
// use_regex with the GPT-2 pattern), Metaspace (replacement, prepend_scheme or the older
// add_prefix_space, split), Sequence. `null` means the whole text is one piece. Each type
// reproduces the behaviour of Hugging Face `tokenizers`, including its handling of empty pieces
// (dropped).
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer/json_config.h"

namespace shardtrain::tokenizer {

struct Piece {
  std::string text;
  // True when the piece starts at offset 0 of the original input (Metaspace's "first" scheme).
  bool at_text_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `pieces` by their pre-tokenization, in order. `scratch` is a reusable buffer.
  virtual void pre_tokenize(std::vector<Piece>& pieces, std::vector<Piece>& scratch) const = 0;
};

// Returns nullptr for a JSON null.
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const nlohmann::json& config,
                                                  const ConfigSite& site);

}  // namespace shardtrain::tokenizer
