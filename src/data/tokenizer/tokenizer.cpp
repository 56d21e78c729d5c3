#include "data/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_message.h"
#include "data/tokenizer/added_tokens.h"
#include "data/tokenizer/bpe_model.h"
#include "data/tokenizer/decoder.h"
#include "data/tokenizer/normalizer.h"
#include "data/tokenizer/post_processor.h"
#include "data/tokenizer/pre_tokenizer.h"
#include "io/read_file.h"

namespace shardtrain {

using tokenizer::ConfigSite;

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& tokenizer_json_path) {
  std::error_code ec;
  if (!std::filesystem::exists(tokenizer_json_path, ec)) {
    fail(
        "{}: cannot open tokenizer file; check the path (a Hugging Face model directory has "
        "tokenizer.json next to config.json)",
        tokenizer_json_path);
  }
  // The largest tokenizer.json files on the Hub (262k-token vocabularies) are ~35 MB.
  constexpr std::uintmax_t kMaxTokenizerJsonBytes = std::uintmax_t{1} << 30;
  return from_json_text(
      read_small_file(tokenizer_json_path, kMaxTokenizerJsonBytes, "tokenizer.json"),
      tokenizer_json_path);
}

Tokenizer Tokenizer::from_json_text(std::string_view json_text, const std::string& source_name) {
  nlohmann::json root;
  // The normalizer, pre-tokenizer, decoder and post-processor parsers recurse into Sequence
  // steps: bounding the document's nesting bounds them all.
  check_json_nesting(json_text, source_name);
  try {
    root = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& error) {  // also out_of_range: a number past double
    fail("{}: not valid JSON ({}); expected a Hugging Face tokenizer.json", source_name,
         json_message(error));
  }
  if (!root.is_object() || !root.contains("model")) {
    fail("{}: no \"model\" section; expected a Hugging Face tokenizer.json", source_name);
  }
  const ConfigSite file_site{source_name, ""};
  const auto section = [&root](const char* key) -> const nlohmann::json& {
    static const nlohmann::json null_json;
    auto it = root.find(key);
    return it == root.end() ? null_json : *it;
  };
  Tokenizer result;
  result.model_ = std::make_unique<tokenizer::BpeModel>(
      tokenizer::BpeModel::from_json(root["model"], file_site.child("model")));
  result.normalizer_ =
      tokenizer::parse_normalizer(section("normalizer"), file_site.child("normalizer"));
  result.pre_tokenizer_ =
      tokenizer::parse_pre_tokenizer(section("pre_tokenizer"), file_site.child("pre_tokenizer"));
  result.added_tokens_ = std::make_unique<tokenizer::AddedTokens>(tokenizer::AddedTokens::from_json(
      section("added_tokens"), result.normalizer_.get(), file_site.child("added_tokens")));
  result.post_processor_ =
      tokenizer::parse_post_processor(section("post_processor"), file_site.child("post_processor"));
  result.decoder_ = tokenizer::parse_decoder(section("decoder"), file_site.child("decoder"));
  return result;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<tokenizer::TextSegment> raw_segments, normalized_segments;
  std::vector<tokenizer::Piece> pieces, scratch;
  std::string normalized;

  added_tokens_->split(text, /*normalized_set=*/false, raw_segments);
  for (const tokenizer::TextSegment& raw : raw_segments) {
    if (raw.added_token_id >= 0) {
      ids.push_back(raw.added_token_id);
      continue;
    }
    normalized.assign(text.substr(raw.start, raw.end - raw.start));
    if (normalizer_) normalizer_->normalize(normalized);
    added_tokens_->split(normalized, /*normalized_set=*/true, normalized_segments);
    for (const tokenizer::TextSegment& segment : normalized_segments) {
      if (segment.added_token_id >= 0) {
        ids.push_back(segment.added_token_id);
        continue;
      }
      pieces.clear();
      pieces.push_back({normalized.substr(segment.start, segment.end - segment.start),
                        raw.start == 0 && segment.start == 0});
      if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces, scratch);
      for (const tokenizer::Piece& piece : pieces) model_->tokenize(piece.text, ids);
    }
  }
  if (add_special_tokens && post_processor_) post_processor_->add_special_tokens(ids);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    std::optional<std::string> token = id_to_token(id);
    if (!token) continue;
    if (skip_special_tokens && added_tokens_->is_special_content(*token)) continue;
    tokens.push_back(std::move(*token));
  }
  std::string text;
  if (decoder_) {
    decoder_->decode_chain(tokens);
    for (const std::string& token : tokens) text += token;
    return text;
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) text.push_back(' ');
    text += tokens[i];
  }
  return text;
}

int64_t Tokenizer::vocab_size() const {
  int64_t max_id = model_->max_id();
  for (const tokenizer::AddedToken& token : added_tokens_->tokens()) {
    max_id = std::max<int64_t>(max_id, token.id);
  }
  return max_id + 1;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_tokens_->find_by_content(token)) return id;
  return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const tokenizer::AddedToken* added = added_tokens_->find_by_id(id)) return added->content;
  if (const std::string* token = model_->id_to_token(id)) return *token;
  return std::nullopt;
}

}  // namespace shardtrain
