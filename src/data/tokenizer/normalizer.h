// Normalizers of tokenizer.json: text -> text rewrites applied to each piece of the input that
// is not an added token, before pre-tokenization.
//
// Supported types: NFC, NFD, NFKC, NFKD (utf8proc), Prepend, Replace (String or Regex pattern),
// Sequence. `null` means no normalizer. Any other type is an Error naming the file and the type.
// Unicode normalization of invalid UTF-8 leaves invalid bytes as they are and normalizes the
// valid runs between them.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "data/tokenizer/json_config.h"

namespace shardtrain::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

// Returns nullptr for a JSON null.
std::unique_ptr<Normalizer> parse_normalizer(const nlohmann::json& config, const ConfigSite& site);

}  // namespace shardtrain::tokenizer
