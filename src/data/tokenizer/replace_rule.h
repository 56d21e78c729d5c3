// ReplaceRule: the `Replace` step tokenizer.json uses both as a normalizer and as a decoder:
// every leftmost non-overlapping match of a pattern ({"String": ...} or {"Regex": ...}) is
// replaced by `content`.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "data/tokenizer/json_config.h"
#include "data/tokenizer/regex.h"

namespace shardtrain::tokenizer {

class ReplaceRule {
 public:
  // Reads {"pattern": {...}, "content": "..."}; throws Error naming the file and location.
  static ReplaceRule parse(const nlohmann::json& config, const ConfigSite& site);
  // Applies the rule to `text` in place.
  void apply(std::string& text) const;

 private:
  std::string literal_;
  std::optional<Regex> regex_;
  std::string content_;
};

}  // namespace shardtrain::tokenizer
