// Post-processors of tokenizer.json: what encode(text, add_special_tokens=true) adds around the
// ids of a single sequence (BOS/EOS and the like). Not applied when add_special_tokens is false.
//
// Supported types: TemplateProcessing ("single" template: SpecialToken items and the Sequence
// "A"), RobertaProcessing and BertProcessing (cls + A + sep), ByteLevel (adds nothing; it only
// adjusts offsets, which shardtrain does not produce), Sequence. `null` adds nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "data/tokenizer/json_config.h"

namespace shardtrain::tokenizer {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Rewrites `ids` (one encoded sequence) to include the special tokens.
  virtual void add_special_tokens(std::vector<int32_t>& ids) const = 0;
};

// Returns nullptr for a JSON null.
std::unique_ptr<PostProcessor> parse_post_processor(const nlohmann::json& config,
                                                    const ConfigSite& site);

}  // namespace shardtrain::tokenizer
