// Decoders of tokenizer.json: token strings -> text, as `tokenizers` chains them. Each step maps
// the list of token strings to a new list; the result is the concatenation of the final list.
//
// Supported types: ByteLevel (byte-level characters back to bytes, then lossy UTF-8), Replace,
// ByteFallback (<0xXX> runs to bytes; invalid UTF-8 gives one U+FFFD per byte), Fuse, Strip,
// Metaspace, Sequence. `null` means tokens are joined with a space, as `tokenizers` does.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer/json_config.h"

namespace shardtrain::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Returns nullptr for a JSON null.
std::unique_ptr<Decoder> parse_decoder(const nlohmann::json& config, const ConfigSite& site);

}  // namespace shardtrain::tokenizer
